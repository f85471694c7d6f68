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
    /// Redis Sentinel: the sentinels (`host:port`) that name the primary; empty: `redis_url`.
    pub sentinels: Vec<String>,
    /// The name the sentinels monitor the primary under.
    pub sentinel_master: String,
    /// The sentinels' own password, if they require one.
    #[serde(default)]
    pub sentinel_password: Option<String>,
    /// Replicas that must hold a change before it is acknowledged (Redis `WAIT`); 0: none.
    pub min_replicas: u32,
    /// How long a change waits for them.
    #[serde(with = "humantime_serde")]
    pub min_replicas_timeout: Duration,
    /// The secret every node of the fleet signs the subjects it writes with (empty: a
    /// checksum, which finds hand edits but not forged ones).
    pub fleet_secret: String,
    /// How often every subject in Redis is checked against what the fleet wrote (0: never;
    /// `POST /admin/v1/stores/verify` checks on demand).
    #[serde(with = "humantime_serde")]
    pub verify_interval: Duration,
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

/// A section's Redis settings, as the Redis store takes them.
#[derive(Debug, Clone, Copy)]
pub struct RedisSettings<'a> {
    /// The server (or, with sentinels, the primary's password and db).
    pub url: &'a str,
    /// The prefix of every key.
    pub prefix: &'a str,
    /// How long one call may take.
    pub timeout: Duration,
    /// The sentinels; empty: `url`'s server.
    pub sentinels: &'a [String],
    /// The primary's name at the sentinels.
    pub master: &'a str,
    /// The sentinels' password.
    pub sentinel_password: Option<&'a str>,
    /// Replicas that must hold a change before it is acknowledged; 0: none.
    pub min_replicas: u32,
    /// How long a change waits for them.
    pub min_replicas_timeout: Duration,
    /// Every node's shared secret: writes sign subjects with it, the drift check holds
    /// them to it.
    pub fleet_secret: &'a str,
}

impl RoutesConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        check_redis(
            self.store == RemoteStoreKind::Redis,
            &self.redis(),
            [
                "routes.redis_url",
                "routes.key_prefix",
                "routes.redis_timeout",
                "routes.sentinels",
                "routes.min_replicas_timeout",
            ],
        )
    }

    /// The route store's Redis settings.
    pub fn redis(&self) -> RedisSettings<'_> {
        RedisSettings {
            url: &self.redis_url,
            prefix: &self.key_prefix,
            timeout: self.redis_timeout,
            sentinels: &self.sentinels,
            master: &self.sentinel_master,
            sentinel_password: self.sentinel_password.as_deref(),
            min_replicas: self.min_replicas,
            min_replicas_timeout: self.min_replicas_timeout,
            fleet_secret: &self.fleet_secret,
        }
    }
}

/// Check a section's Redis settings (`keys`: their names, url, prefix, timeout, sentinels,
/// replica timeout); the URL and the sentinels only when the section uses Redis.
fn check_redis(
    redis: bool,
    settings: &RedisSettings<'_>,
    keys: [&'static str; 5],
) -> Result<(), ConfigError> {
    let RedisSettings {
        url,
        prefix,
        timeout,
        sentinels,
        master,
        ..
    } = *settings;
    if redis && redis::parse_redis_url(url).is_none() {
        return invalid(keys[0], "is not a redis:// or rediss:// URL");
    }
    if redis && !sentinels.is_empty() {
        let not_address = |s: &String| {
            s.rsplit_once(':')
                .is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err())
        };
        if sentinels.iter().any(not_address) {
            return invalid(keys[3], "must each be host:port");
        }
        if master.is_empty() {
            return invalid(
                keys[3],
                "need sentinel_master, the name they know the primary by",
            );
        }
    }
    if settings.min_replicas > 0 && settings.min_replicas_timeout >= timeout {
        return invalid(keys[4], "must be less than redis_timeout");
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
    /// Redis Sentinel: the sentinels (`host:port`) that name the primary; empty: `redis_url`.
    pub sentinels: Vec<String>,
    /// The name the sentinels monitor the primary under.
    pub sentinel_master: String,
    /// The sentinels' own password, if they require one.
    #[serde(default)]
    pub sentinel_password: Option<String>,
    /// Replicas that must hold a change before it is acknowledged (Redis `WAIT`); 0: none.
    pub min_replicas: u32,
    /// How long a change waits for them.
    #[serde(with = "humantime_serde")]
    pub min_replicas_timeout: Duration,
    /// The secret every node of the fleet signs the subjects it writes with (empty: a
    /// checksum, which finds hand edits but not forged ones).
    pub fleet_secret: String,
    /// How often every subject in Redis is checked against what the fleet wrote (0: never;
    /// `POST /admin/v1/stores/verify` checks on demand).
    #[serde(with = "humantime_serde")]
    pub verify_interval: Duration,
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
            &self.redis(),
            [
                "sources.redis_url",
                "sources.key_prefix",
                "sources.redis_timeout",
                "sources.sentinels",
                "sources.min_replicas_timeout",
            ],
        )
    }

    /// The source store's Redis settings.
    pub fn redis(&self) -> RedisSettings<'_> {
        RedisSettings {
            url: &self.redis_url,
            prefix: &self.key_prefix,
            timeout: self.redis_timeout,
            sentinels: &self.sentinels,
            master: &self.sentinel_master,
            sentinel_password: self.sentinel_password.as_deref(),
            min_replicas: self.min_replicas,
            min_replicas_timeout: self.min_replicas_timeout,
            fleet_secret: &self.fleet_secret,
        }
    }
}
