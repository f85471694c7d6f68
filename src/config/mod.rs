//! Configuration in layers: the compiled-in `config/default.toml`, then a file, then
//! `ANKUSA_<SECTION>__<KEY>` environment variables, then validation.
//!
//! Every struct denies unknown fields, so a misspelt key is an error at start, not a
//! setting silently ignored. Errors name the key and where it was set, never its value
//! (which may be a secret): `describe.rs` builds them from figment's error kinds.
//!
//! One file per part of the node a section configures: `node.rs` (`[node]` and the path checks
//! its directories need), `api.rs`, `audit.rs` (`[audit]`, `[settlement]`), `lifecycle.rs`,
//! `remote.rs` (`[routes]`, `[sources]`: the stores kept outside the node) and `telemetry.rs`
//! (`[telemetry]`: the export of spans); `load.rs` layers and validates them. Every type is
//! re-exported here, so callers name `crate::config::X`.

mod api;
mod audit;
mod describe;
mod lifecycle;
mod load;
mod node;
mod remote;
mod show;
mod telemetry;
#[cfg(test)]
mod tests;

pub use api::{ApiConfig, ConsoleMode, Scope, TokenConfig, TrustedProxy};
pub use audit::{AuditConfig, SettlementConfig};
pub use lifecycle::LifecycleConfig;
pub use node::{relative_within, within, NodeConfig};
pub use remote::{RedisSettings, RemoteStoreKind, RoutesConfig, SourceStoreKind, SourcesConfig};
pub use show::{redact, REDACTED};
pub use telemetry::TelemetryConfig;

use serde::Deserialize;

/// The embedded default configuration.
pub const DEFAULT_TOML: &str = include_str!("../../config/default.toml");

/// The node's whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The node itself.
    pub node: NodeConfig,
    /// The admin HTTP server.
    pub api: ApiConfig,
    /// The audit trail's retention and ceilings.
    pub audit: AuditConfig,
    /// Lifecycle events.
    pub lifecycle: LifecycleConfig,
    /// Logging.
    pub log: LogConfig,
    /// The export of spans.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// Where route definitions live.
    pub routes: RoutesConfig,
    /// Where API-managed sources live.
    pub sources: SourcesConfig,
    /// How pending rows of dual writes are settled.
    pub settlement: SettlementConfig,
}

/// `[log]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// An env-filter directive.
    pub level: String,
    /// `text` or `json`.
    pub format: LogFormat,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// A configuration that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file could not be read, or a key is unknown, missing, or of the wrong type: one
    /// line per error, each naming where it came from and the key as the operator wrote it
    /// (`c.toml: audit.max_rows: ...`, `ANKUSA_AUDIT__MAX_ROWS: ...`).
    #[error("configuration: {0}")]
    Parse(String),
    /// A value is of the right type but not acceptable. The message never quotes the value
    /// of a key that may hold a secret (sink secrets and properties, Redis URLs, digests).
    #[error("configuration: {key}: {message}")]
    Invalid {
        /// The key, dotted (`api.listen`).
        key: &'static str,
        /// What is wrong with its value.
        message: String,
    },
}

/// A value refused by validation: `key` and what is wrong with it.
fn invalid(key: &'static str, message: &str) -> Result<(), ConfigError> {
    Err(ConfigError::Invalid {
        key,
        message: message.to_owned(),
    })
}
