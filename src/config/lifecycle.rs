//! `[lifecycle]`: whether changes are flagged for publication, the sinks the publisher
//! delivers to (each defined by the sinks crate's `SinkConfig`), and its page, window and
//! idle timer.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use serde::Deserialize;

use super::{invalid, ConfigError};

/// `[lifecycle]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LifecycleConfig {
    /// Flag route and source changes and write their entities to the outbox. The publisher
    /// runs while `sinks` is set either way, delivering what the outbox already holds.
    pub enabled: bool,
    /// The sinks the publisher delivers to, by name (each defined under `lifecycle.sink`).
    /// A list, so that a config file replaces it rather than adding to the default's.
    pub sinks: Vec<String>,
    /// Sink definitions by name; only those listed in `sinks` run.
    #[serde(default)]
    pub sink: BTreeMap<String, ankusa_sinks::SinkConfig>,
    /// Most events handed to a sink in one delivery attempt.
    pub batch: usize,
    /// How long a sink's lane waits for a commit before it looks at the outbox anyway.
    #[serde(with = "humantime_serde")]
    pub idle: Duration,
    /// Most delivery attempts under way per sink, for sinks that keep order across attempts
    /// (Kafka).
    pub in_flight: usize,
    /// Most dead letters a sink holds. At the ceiling the sink stops at the next event it
    /// would dead-letter (retrying it, `dead_letters_full`) until an operator drops or
    /// redrives some: an event is never passed over without a dead letter.
    pub max_dead_letters: u64,
}

impl LifecycleConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=10_000).contains(&self.batch) {
            return invalid("lifecycle.batch", "must be between 1 and 10000");
        }
        if self.idle.is_zero() {
            return invalid("lifecycle.idle", "must be more than zero");
        }
        if !(1..=64).contains(&self.in_flight) {
            return invalid("lifecycle.in_flight", "must be between 1 and 64");
        }
        if self.max_dead_letters == 0 {
            return invalid("lifecycle.max_dead_letters", "must be at least 1");
        }
        let mut seen = HashSet::new();
        for name in &self.sinks {
            self.check_listed(name, &mut seen)?;
        }
        Ok(())
    }

    /// Check sink `name` of `lifecycle.sinks`; `seen` are the names listed before it.
    fn check_listed<'a>(
        &self,
        name: &'a str,
        seen: &mut HashSet<&'a str>,
    ) -> Result<(), ConfigError> {
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return invalid(
                "lifecycle.sinks",
                &format!("`{name}`: a sink name is 1 to 64 characters of A-Z a-z 0-9 _ -"),
            );
        }
        if !seen.insert(name) {
            return invalid("lifecycle.sinks", &format!("`{name}` is listed twice"));
        }
        let Some(sink) = self.sink.get(name) else {
            return invalid(
                "lifecycle.sinks",
                &format!("`{name}` has no definition under [lifecycle.sink.{name}]"),
            );
        };
        if let ankusa_sinks::SinkConfig::Webhook(webhook) = sink {
            if let Some(i) = webhook.secrets.iter().position(|s| published_secret(s)) {
                return invalid(
                    "lifecycle.sink.secrets",
                    &format!(
                        "sink `{name}`: secret #{i} is a published example (a test vector anyone can sign \
                         with): make your own, e.g. whsec_$(head -c 32 /dev/urandom | base64)"
                    ),
                );
            }
        }
        Ok(())
    }
}

/// Webhook secrets printed in specifications and documentation (the Standard Webhooks
/// reference vector, the svix examples): anyone can sign with them.
const PUBLISHED_SECRETS: [&str; 2] = [
    "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
];

/// Whether `secret` is one of [`PUBLISHED_SECRETS`].
fn published_secret(secret: &str) -> bool {
    PUBLISHED_SECRETS.contains(&secret.trim())
}
