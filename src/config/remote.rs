//! `[routes]` and `[sources]`: the stores of subjects kept outside the node (memory, the
//! node's own store, or Redis), with the Redis settings both check the same way.

use std::time::Duration;

use serde::Deserialize;

use super::{invalid, ConfigError};

/// `[routes]`: the route store.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutesConfig {
    /// `memory` (this process only, the default) or `redis` (shared by a fleet).
    pub store: RemoteStoreKind,
    /// The Redis server of `store = "redis"` (`redis://[:password@]host:port[/db]`).
    pub redis_url: String,
    /// The prefix of every Redis key the route store writes.
    pub key_prefix: String,
    /// How long one Redis call (or connection attempt) may take.
    #[serde(with = "humantime_serde")]
    pub redis_timeout: Duration,
}

/// Where subjects that live outside the node's store are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RemoteStoreKind {
    /// In this process: lost when it stops.
    Memory,
    /// In Redis.
    Redis,
}

impl RoutesConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        check_redis(
            self.store == RemoteStoreKind::Redis,
            &self.redis_url,
            &self.key_prefix,
            self.redis_timeout,
            [
                "routes.redis_url",
                "routes.key_prefix",
                "routes.redis_timeout",
            ],
        )
    }
}

/// Check a section's Redis settings (`keys`: their names, url, prefix, timeout); the URL
/// only when the section uses Redis.
fn check_redis(
    redis: bool,
    url: &str,
    prefix: &str,
    timeout: Duration,
    keys: [&'static str; 3],
) -> Result<(), ConfigError> {
    if redis && redis::parse_redis_url(url).is_none() {
        return invalid(keys[0], "is not a redis:// or rediss:// URL");
    }
    if prefix.len() > 64
        || prefix
            .chars()
            .any(|c| c.is_control() || c == '{' || c == '}')
    {
        return invalid(
            keys[1],
            "must be at most 64 characters, without braces or control characters",
        );
    }
    if timeout < Duration::from_millis(10) {
        return invalid(keys[2], "must be at least 10ms");
    }
    Ok(())
}

/// `[sources]`: where API-managed sources live.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourcesConfig {
    /// `local` (this node's store, the default) or `redis` (shared by a fleet).
    pub store: SourceStoreKind,
    /// The Redis server of `store = "redis"`.
    pub redis_url: String,
    /// The prefix of every Redis key the source store writes.
    pub key_prefix: String,
    /// How long one Redis call (or connection attempt) may take.
    #[serde(with = "humantime_serde")]
    pub redis_timeout: Duration,
}

/// Where API-managed sources live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceStoreKind {
    /// In this node's store: a change and its row in one batch.
    Local,
    /// In Redis: a dual write.
    Redis,
}

impl SourcesConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        check_redis(
            self.store == SourceStoreKind::Redis,
            &self.redis_url,
            &self.key_prefix,
            self.redis_timeout,
            [
                "sources.redis_url",
                "sources.key_prefix",
                "sources.redis_timeout",
            ],
        )
    }
}
