//! Configuration in layers: the compiled-in `config/default.toml`, then a file, then
//! `ANKUSA_<SECTION>__<KEY>` environment variables, then validation.
//!
//! Every struct denies unknown fields, so a misspelt key is an error at start, not a
//! setting silently ignored. Errors name the key.

use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use figment::providers::{Env, Format, Toml};
use figment::{Figment, Provider};
use ipnet::IpNet;
use serde::Deserialize;

/// The embedded default configuration.
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

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
    /// Where route definitions live.
    pub routes: RoutesConfig,
    /// Where API-managed sources live.
    pub sources: SourcesConfig,
    /// How pending rows of dual writes are settled.
    pub settlement: SettlementConfig,
}

/// `[node]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// Where the RocksDB store lives.
    pub data_dir: PathBuf,
    /// The node's URI, the `source` of its CloudEvents.
    pub uri: String,
    /// Where `POST /admin/v1/backups` writes backups (outside `data_dir`).
    pub backup_dir: PathBuf,
}

/// `[api]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    /// The admin server's address.
    pub listen: SocketAddr,
    /// The largest request body the admin API reads, in bytes; larger ones get 413.
    pub body_limit: usize,
    /// Peers whose `X-Forwarded-For` is believed (IPs or CIDRs). Anyone else's is ignored.
    pub trusted_proxies: Vec<TrustedProxy>,
    /// Bearer tokens. Empty: the node makes one admin token on first start (see
    /// `api::auth`).
    pub tokens: Vec<TokenConfig>,
}

/// One `[[api.tokens]]` entry: a bearer token known only by its SHA-256 digest.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// The token's name: the `actor` of every row its requests write.
    pub name: String,
    /// Hex SHA-256 digest of the token (`ankusa token hash`).
    pub sha256: String,
    /// What the token may do.
    pub scopes: Vec<Scope>,
}

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
pub enum Scope {
    /// Read local subjects.
    #[serde(rename = "admin:read")]
    AdminRead,
    /// Create, change and delete local subjects.
    #[serde(rename = "admin:write")]
    AdminWrite,
    /// Read the audit trail.
    #[serde(rename = "audit:read")]
    AuditRead,
}

impl Scope {
    /// Every scope (the first-start admin token has them all).
    pub const ALL: [Scope; 3] = [Scope::AdminRead, Scope::AdminWrite, Scope::AuditRead];

    /// The scope's name, as configured.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::AdminRead => "admin:read",
            Scope::AdminWrite => "admin:write",
            Scope::AuditRead => "audit:read",
        }
    }
}

/// An address or network whose `X-Forwarded-For` header the admin API believes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct TrustedProxy(pub IpNet);

impl TrustedProxy {
    /// Whether `ip` is this proxy (or inside its network).
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.contains(&ip)
    }
}

impl TryFrom<String> for TrustedProxy {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        if let Ok(net) = IpNet::from_str(&s) {
            return Ok(TrustedProxy(net));
        }
        IpAddr::from_str(&s)
            .map(|ip| TrustedProxy(IpNet::from(ip)))
            .map_err(|_| format!("`{s}` is neither an IP address nor a CIDR network"))
    }
}

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
    /// How long a sink's loop waits for a commit before it looks at the outbox anyway.
    #[serde(with = "humantime_serde")]
    pub idle: Duration,
    /// Most delivery attempts (batches) in flight per sink, for sinks that keep order across
    /// attempts (Kafka).
    pub in_flight: usize,
}

impl LifecycleConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=10_000).contains(&self.batch) {
            return invalid("lifecycle.batch", "must be between 1 and 10000");
        }
        if self.idle.is_zero() {
            return invalid("lifecycle.idle", "must be more than zero");
        }
        if !(1..=64).contains(&self.in_flight) {
            return invalid("lifecycle.in_flight", "must be between 1 and 64");
        }
        let mut seen = HashSet::new();
        for name in &self.sinks {
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
            if !self.sink.contains_key(name) {
                return invalid(
                    "lifecycle.sinks",
                    &format!("`{name}` has no definition under [lifecycle.sink.{name}]"),
                );
            }
        }
        Ok(())
    }
}

/// `[audit]`: how long the trail keeps rows, how large it may grow, and how far the
/// lifecycle sinks may fall behind before operators' changes are refused.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// Rows older than this many days are deleted by the retention sweep, unless a lifecycle
    /// sink has not confirmed them yet.
    pub retention_days: u32,
    /// How often the retention sweep runs (humantime: "1h", "15m").
    #[serde(with = "humantime_serde")]
    pub sweep_interval: Duration,
    /// Rows deleted per sweep batch (one writer batch each; commits run between them).
    pub sweep_batch: usize,
    /// Most rows the trail holds; beyond it the oldest published rows are pruned for a new
    /// change, and if none can be, the change is refused (503 audit_backlog).
    pub max_rows: u64,
    /// Most bytes (keys and values of rows and outbox entities) the trail holds; likewise.
    pub max_bytes: u64,
    /// The outbox backlog (`m:audit_seq` minus the lifecycle cursor) at which an operator's
    /// change is refused.
    pub outbox_max_backlog: u64,
}

/// The smallest `audit.max_rows`: above one group commit, so a group's own rows never have
/// to be pruned to make room for each other.
const MIN_MAX_ROWS: u64 = 10_000;
/// The smallest `audit.max_bytes` (16 MiB).
const MIN_MAX_BYTES: u64 = 16 << 20;

impl AuditConfig {
    /// The trail's limits (`TrailOptions::limits`).
    pub fn limits(&self) -> crate::audit::Limits {
        crate::audit::Limits {
            retention: Duration::from_secs(u64::from(self.retention_days) * 86_400),
            sweep_interval: self.sweep_interval,
            sweep_batch: self.sweep_batch,
            max_rows: self.max_rows,
            max_bytes: self.max_bytes,
            outbox_max_backlog: self.outbox_max_backlog,
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=36_500).contains(&self.retention_days) {
            return invalid("audit.retention_days", "must be between 1 and 36500");
        }
        if self.sweep_interval < Duration::from_secs(1) {
            return invalid("audit.sweep_interval", "must be at least 1s");
        }
        if !(1..=100_000).contains(&self.sweep_batch) {
            return invalid("audit.sweep_batch", "must be between 1 and 100000");
        }
        if self.max_rows < MIN_MAX_ROWS {
            return invalid("audit.max_rows", "must be at least 10000");
        }
        if self.max_bytes < MIN_MAX_BYTES {
            return invalid("audit.max_bytes", "must be at least 16777216 (16 MiB)");
        }
        if self.outbox_max_backlog == 0 || self.outbox_max_backlog > self.max_rows {
            // Above max_rows the ceilings would refuse changes first: the limit would be moot.
            return invalid(
                "audit.outbox_max_backlog",
                "must be between 1 and audit.max_rows",
            );
        }
        Ok(())
    }
}

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
    fn validate(&self) -> Result<(), ConfigError> {
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
    fn validate(&self) -> Result<(), ConfigError> {
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

/// `[settlement]`: pending rows whose caller never finished them (it was cancelled, or the
/// node crashed) are settled by reading the subject's present state, retried while its store
/// cannot be read.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettlementConfig {
    /// Between two attempts to read a subject's store.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// How long to keep trying before the row settles `interrupted`.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
}

impl SettlementConfig {
    /// The trail's settlement options.
    pub fn options(&self) -> crate::audit::SettleOptions {
        crate::audit::SettleOptions {
            interval: self.interval,
            window: self.window,
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.interval < Duration::from_millis(10) {
            return invalid("settlement.interval", "must be at least 10ms");
        }
        if self.window < self.interval {
            return invalid("settlement.window", "must be at least settlement.interval");
        }
        Ok(())
    }
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
    /// A value is of the right type but not acceptable.
    #[error("configuration: {key}: {message}")]
    Invalid {
        /// The key, dotted (`api.listen`).
        key: &'static str,
        /// What is wrong with its value.
        message: String,
    },
}

impl Config {
    /// Load the layers: defaults, then `file` (if any), then the environment.
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
        Self::load_from(file, "ANKUSA_")
    }

    /// Load the layers with the environment's variables read under `prefix` (tests).
    pub fn load_from(file: Option<&Path>, prefix: &str) -> Result<Config, ConfigError> {
        let mut figment = Figment::from(Toml::string(DEFAULT_TOML));
        if let Some(file) = file {
            figment = figment.merge(Toml::file_exact(file));
        }
        // Only <PREFIX><SECTION>__<KEY> variables are settings; others with the prefix (such
        // as ANKUSA_CONFIG, the --config flag's variable) are not.
        let env = Env::prefixed(prefix)
            .filter(|k| k.as_str().contains("__"))
            .split("__");
        let env_name = env.metadata().name;
        let config: Config = figment
            .merge(env)
            .extract()
            .map_err(|e| ConfigError::Parse(describe(e, &env_name, prefix)))?;
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.node.uri.trim().is_empty() {
            return invalid("node.uri", "must not be empty");
        }
        if self.node.uri.chars().any(char::is_whitespace) {
            return invalid("node.uri", "must be a URI reference (no whitespace)");
        }
        if self.node.data_dir.as_os_str().is_empty() {
            return invalid("node.data_dir", "must not be empty");
        }
        // Inside the store, a restore with --force would move the backups aside with it.
        let backups = &self.node.backup_dir;
        if backups.as_os_str().is_empty() || within(backups, &self.node.data_dir) {
            return invalid("node.backup_dir", "must be set, outside node.data_dir");
        }
        if tracing_subscriber::EnvFilter::try_new(&self.log.level).is_err() {
            return invalid("log.level", "is not a valid level or filter directive");
        }
        self.audit.validate()?;
        self.lifecycle.validate()?;
        self.routes.validate()?;
        self.sources.validate()?;
        self.settlement.validate()?;
        self.api.validate()
    }
}

/// Bounds of `api.body_limit`: below 1 KiB no real request fits; above 64 MiB one request
/// could hold a worker's memory hostage.
const BODY_LIMIT_RANGE: std::ops::RangeInclusive<usize> = 1024..=(64 << 20);

impl ApiConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if !BODY_LIMIT_RANGE.contains(&self.body_limit) {
            return invalid("api.body_limit", "must be between 1024 and 67108864 bytes");
        }
        let mut names = HashSet::new();
        for (i, token) in self.tokens.iter().enumerate() {
            if !valid_token_name(&token.name) {
                return invalid(
                    "api.tokens.name",
                    &format!("token #{i}: must be 1 to 64 characters of A-Z a-z 0-9 . _ - : @"),
                );
            }
            if token.name == crate::audit::SYSTEM_ACTOR {
                return invalid(
                    "api.tokens.name",
                    &format!("token #{i}: `system` is the node's own actor name"),
                );
            }
            if !names.insert(token.name.as_str()) {
                return invalid(
                    "api.tokens.name",
                    &format!("token #{i}: `{}` is used by another token", token.name),
                );
            }
            if token.sha256.len() != 64 || hex::decode(&token.sha256).is_err() {
                return invalid(
                    "api.tokens.sha256",
                    &format!(
                        "token `{}`: must be the 64 hex digits of a SHA-256 digest \
                         (`ankusa token hash`)",
                        token.name
                    ),
                );
            }
            if token.scopes.is_empty() {
                return invalid(
                    "api.tokens.scopes",
                    &format!("token `{}`: must name at least one scope", token.name),
                );
            }
        }
        Ok(())
    }
}

/// A token name becomes a row's `actor`: keep it short, printable and unambiguous.
fn valid_token_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_:@".contains(&b))
}

/// Whether `path` is `dir` or inside it, however either is written: relative or absolute,
/// with `.` or `..` (taken as written, before symlinks), through symlinks (as far as the
/// paths exist).
pub fn within(path: &Path, dir: &Path) -> bool {
    resolved(path).starts_with(resolved(dir))
}

/// `path` relative to `dir` when it is inside it (as [`within`] decides) and not `dir`
/// itself, else `None`.
pub fn relative_within(path: &Path, dir: &Path) -> Option<PathBuf> {
    resolved(path)
        .strip_prefix(resolved(dir))
        .ok()
        .filter(|rel| !rel.as_os_str().is_empty())
        .map(Path::to_owned)
}

/// `path` made absolute, `.` and `..` taken out as written, then its deepest existing
/// ancestor resolved (symlinks).
fn resolved(path: &Path) -> PathBuf {
    use std::path::Component;
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let mut normal = PathBuf::new();
    for part in absolute.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                normal.pop();
            }
            other => normal.push(other),
        }
    }
    let mut existing = normal.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            return rest.iter().rev().fold(real, |path, part| path.join(part));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name);
                existing = parent;
            }
            _ => return normal,
        }
    }
}

fn invalid(key: &'static str, message: &str) -> Result<(), ConfigError> {
    Err(ConfigError::Invalid {
        key,
        message: message.to_owned(),
    })
}

/// figment's errors, one line each, in an operator's terms. figment's own text names the
/// key with its profile (`default.audit.max_rows`) or, for the environment, as dotted upper
/// case, which is neither what the file says nor the variable's name.
fn describe(error: figment::Error, env_name: &str, prefix: &str) -> String {
    error
        .into_iter()
        .map(|e| {
            let kind = e.kind.to_string();
            let kind = kind.split_whitespace().collect::<Vec<_>>().join(" ");
            let from_env = e.metadata.as_ref().is_some_and(|m| m.name == env_name);
            let key = if e.path.is_empty() {
                None
            } else if from_env {
                let path: Vec<String> = e.path.iter().map(|k| k.to_ascii_uppercase()).collect();
                Some(format!("{prefix}{}", path.join("__")))
            } else {
                Some(e.path.join("."))
            };
            let source = match &e.metadata {
                _ if from_env => None,
                Some(m) => Some(match &m.source {
                    // The path as it was given (figment's own text makes it relative to the
                    // working directory when that is shorter).
                    Some(figment::Source::File(path)) => path.display().to_string(),
                    Some(source) => source.to_string(),
                    None if m.name.contains("source string") => "the embedded default".into(),
                    None => m.name.to_string(),
                }),
                None => None,
            };
            [source, key, Some(kind)]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(": ")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_str(toml: &str) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, toml).unwrap();
        Config::load_from(Some(&path), "ANKUSA_TEST_NONE_")
    }

    #[test]
    fn embedded_default_loads() {
        let c = Config::load_from(None, "ANKUSA_TEST_NONE_").unwrap();
        assert_eq!(c.api.listen, "127.0.0.1:8080".parse().unwrap());
        assert!(c.lifecycle.enabled);
        assert_eq!(c.log.format, LogFormat::Text);
    }

    #[test]
    fn file_overrides_defaults() {
        let c = load_str("[api]\nlisten = \"127.0.0.1:9000\"\n").unwrap();
        assert_eq!(c.api.listen.port(), 9000);
        assert_eq!(c.node.uri, "urn:ankusa:node:local");
    }

    #[test]
    fn unknown_key_is_refused_by_name() {
        let err = load_str("[api]\nlisen = \"127.0.0.1:9000\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("lisen"), "{err}");
        let err = load_str("[apii]\nlisten = \"127.0.0.1:9000\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("apii"), "{err}");
    }

    #[test]
    fn bad_value_is_refused_by_name() {
        let err = load_str("[api]\nlisten = \"nowhere\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("api.listen") || err.contains("listen"),
            "{err}"
        );
        let err = load_str("[lifecycle]\nenabled = \"yes\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("enabled"), "{err}");
        let err = load_str("[node]\nuri = \"has space\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("node.uri"), "{err}");
        let err = load_str("[log]\nformat = \"xml\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("format"), "{err}");
    }

    #[test]
    fn backups_inside_the_store_are_refused_however_the_path_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        let root = dir.path().display();
        for backups in [
            format!("{root}/data/backups"),
            format!("{root}/./data/backups"),
            format!("{root}/other/../data/backups"),
            format!("{root}/data"),
        ] {
            let toml = format!(
                "[node]\ndata_dir = \"{}\"\nbackup_dir = \"{backups}\"\n",
                data.display()
            );
            let err = load_str(&toml).unwrap_err().to_string();
            assert!(err.contains("node.backup_dir"), "{backups}: {err}");
        }
        let toml = format!(
            "[node]\ndata_dir = \"{}\"\nbackup_dir = \"{root}/data-backups\"\n",
            data.display()
        );
        load_str(&toml).unwrap();
        assert!(within(Path::new("./data/b"), Path::new("data")));
        assert!(!within(Path::new("data-b"), Path::new("data")));
    }

    #[test]
    fn parse_errors_name_the_file_and_the_key_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[audit]\nmax_rows = \"lots\"\n").unwrap();
        let err = Config::load_from(Some(&path), "ANKUSA_TEST_NONE_")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!(
                "configuration: {}: audit.max_rows: invalid type: found string \"lots\", \
                 expected u64",
                path.display()
            )
        );
        let missing = dir.path().join("missing.toml");
        let err = Config::load_from(Some(&missing), "ANKUSA_TEST_NONE_")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!(
                "configuration: {}: No such file or directory (os error 2)",
                missing.display()
            )
        );
    }

    const DIGEST: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn api_defaults_and_tokens_load() {
        let c = Config::load_from(None, "ANKUSA_TEST_NONE_").unwrap();
        assert_eq!(c.api.body_limit, 1 << 20);
        assert!(c.api.trusted_proxies.is_empty());
        assert!(c.api.tokens.is_empty());
        let c = load_str(&format!(
            "[api]\nbody_limit = 4096\ntrusted_proxies = [\"10.0.0.0/8\", \"::1\"]\n\
             [[api.tokens]]\nname = \"ops\"\nsha256 = \"{DIGEST}\"\n\
             scopes = [\"admin:read\", \"audit:read\"]\n"
        ))
        .unwrap();
        assert_eq!(c.api.body_limit, 4096);
        assert!(c.api.trusted_proxies[0].contains("10.1.2.3".parse().unwrap()));
        assert!(!c.api.trusted_proxies[0].contains("11.1.2.3".parse().unwrap()));
        assert!(c.api.trusted_proxies[1].contains("::1".parse().unwrap()));
        assert_eq!(
            c.api.tokens[0].scopes,
            vec![Scope::AdminRead, Scope::AuditRead]
        );
    }

    #[test]
    fn bad_api_keys_are_refused_by_name() {
        let cases = [
            ("[api]\nbody_limt = 10\n", "body_limt"),
            ("[api]\nbody_limit = 10\n", "api.body_limit"),
            ("[api]\nbody_limit = \"big\"\n", "body_limit"),
            ("[api]\ntrusted_proxies = [\"10.0.0.0/33\"]\n", "trusted_proxies"),
            ("[api]\ntrusted_proxies = [\"proxy.local\"]\n", "trusted_proxies"),
            (
                "[[api.tokens]]\nname = \"a\"\nsha256 = \"00\"\nscopes = [\"admin:read\"]\n",
                "api.tokens.sha256",
            ),
            (
                &format!("[[api.tokens]]\nname = \"a\"\nsha256 = \"{DIGEST}\"\nscopes = [\"root\"]\n"),
                "scopes",
            ),
            (
                &format!("[[api.tokens]]\nname = \"a\"\nsha256 = \"{DIGEST}\"\nscopes = []\n"),
                "api.tokens.scopes",
            ),
            (
                &format!("[[api.tokens]]\nname = \"a b\"\nsha256 = \"{DIGEST}\"\nscopes = [\"admin:read\"]\n"),
                "api.tokens.name",
            ),
            (
                &format!("[[api.tokens]]\nname = \"system\"\nsha256 = \"{DIGEST}\"\nscopes = [\"admin:read\"]\n"),
                "api.tokens.name",
            ),
            (
                &format!("[[api.tokens]]\nname = \"a\"\nsha256 = \"{DIGEST}\"\nscopes = [\"admin:read\"]\ntoken = \"x\"\n"),
                "token",
            ),
            (
                &format!("[[api.tokens]]\nname = \"a\"\nsha256 = \"{DIGEST}\"\nscopes = [\"admin:read\"]\n\
                          [[api.tokens]]\nname = \"a\"\nsha256 = \"{DIGEST}\"\nscopes = [\"admin:read\"]\n"),
                "api.tokens.name",
            ),
        ];
        for (toml, key) in cases {
            let err = load_str(toml).unwrap_err().to_string();
            assert!(err.contains(key), "{toml}: {err}");
        }
    }

    #[test]
    fn audit_defaults_load_and_bad_values_are_refused_by_name() {
        let c = Config::load_from(None, "ANKUSA_TEST_NONE_").unwrap();
        let limits = c.audit.limits();
        assert_eq!(
            limits,
            crate::audit::Limits::default(),
            "default.toml and Limits agree"
        );
        assert_eq!(c.audit.retention_days, 365);
        assert_eq!(c.audit.sweep_interval, Duration::from_secs(3600));
        let c = load_str("[audit]\nretention_days = 30\nsweep_interval = \"15m\"\n").unwrap();
        assert_eq!(c.audit.limits().retention, Duration::from_secs(30 * 86_400));
        assert_eq!(c.audit.sweep_interval, Duration::from_secs(900));
        let cases = [
            ("[audit]\nretention_days = 0\n", "audit.retention_days"),
            ("[audit]\nsweep_interval = \"0s\"\n", "audit.sweep_interval"),
            ("[audit]\nsweep_interval = \"soon\"\n", "sweep_interval"),
            ("[audit]\nsweep_batch = 0\n", "audit.sweep_batch"),
            ("[audit]\nmax_rows = 10\n", "audit.max_rows"),
            ("[audit]\nmax_bytes = 1024\n", "audit.max_bytes"),
            (
                "[audit]\noutbox_max_backlog = 0\n",
                "audit.outbox_max_backlog",
            ),
            (
                "[audit]\nmax_rows = 20000\noutbox_max_backlog = 30000\n",
                "audit.outbox_max_backlog",
            ),
            ("[audit]\nretention = 3\n", "retention"),
        ];
        for (toml, key) in cases {
            let err = load_str(toml).unwrap_err().to_string();
            assert!(err.contains(key), "{toml}: {err}");
        }
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail fixes the closure's error type
    fn environment_overrides_file() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("c.toml", "[api]\nlisten = \"127.0.0.1:9000\"\n")?;
            jail.set_env("ANKUSA_API__LISTEN", "127.0.0.1:9100");
            jail.set_env("ANKUSA_CONFIG", "c.toml");
            let c = Config::load(Some(Path::new("c.toml"))).map_err(|e| e.to_string())?;
            assert_eq!(c.api.listen.port(), 9100);
            jail.set_env("ANKUSA_API__BOGUS", "1");
            let err = Config::load(Some(Path::new("c.toml")))
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with("configuration: ANKUSA_API__BOGUS: "),
                "{err}"
            );
            assert!(err.contains("unknown field: found `bogus`"), "{err}");
            jail.clear_env();
            jail.set_env("ANKUSA_AUDIT__MAX_ROWS", "lots");
            let err = Config::load(Some(Path::new("c.toml")))
                .unwrap_err()
                .to_string();
            assert_eq!(
                err,
                "configuration: ANKUSA_AUDIT__MAX_ROWS: invalid type: found string \"lots\", \
                 expected u64"
            );
            Ok(())
        });
    }
}
