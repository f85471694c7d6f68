//! Configuration in layers: the compiled-in `config/default.toml`, then a file, then
//! `ANKUSA_<SECTION>__<KEY>` environment variables, then validation.
//!
//! Every struct denies unknown fields, so a misspelt key is an error at start, not a
//! setting silently ignored. Errors name the key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Toml};
use figment::Figment;
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
    /// Lifecycle events.
    pub lifecycle: LifecycleConfig,
    /// Logging.
    pub log: LogConfig,
}

/// `[node]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// Where the RocksDB store lives.
    pub data_dir: PathBuf,
    /// The node's URI, the `source` of its CloudEvents.
    pub uri: String,
}

/// `[api]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    /// The admin server's address.
    pub listen: SocketAddr,
}

/// `[lifecycle]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LifecycleConfig {
    /// Flag route and source changes and write their entities to the outbox.
    pub enabled: bool,
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
    /// A key is unknown, missing, or of the wrong type (the message names it).
    #[error("configuration: {0}")]
    Parse(#[from] Box<figment::Error>),
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
        Self::load_from(file, Env::prefixed("ANKUSA_"))
    }

    /// Load the layers with an explicit environment provider (tests).
    pub fn load_from(file: Option<&Path>, env: Env) -> Result<Config, ConfigError> {
        let mut figment = Figment::from(Toml::string(DEFAULT_TOML));
        if let Some(file) = file {
            figment = figment.merge(Toml::file_exact(file));
        }
        // Only ANKUSA_<SECTION>__<KEY> variables are settings; others with the prefix (such
        // as ANKUSA_CONFIG, the --config flag's variable) are not.
        let env = env.filter(|k| k.as_str().contains("__")).split("__");
        let config: Config = figment.merge(env).extract().map_err(Box::new)?;
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
        if tracing_subscriber::EnvFilter::try_new(&self.log.level).is_err() {
            return invalid("log.level", "is not a valid level or filter directive");
        }
        Ok(())
    }
}

fn invalid(key: &'static str, message: &str) -> Result<(), ConfigError> {
    Err(ConfigError::Invalid {
        key,
        message: message.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_str(toml: &str) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, toml).unwrap();
        Config::load_from(Some(&path), Env::prefixed("ANKUSA_TEST_NONE_"))
    }

    #[test]
    fn embedded_default_loads() {
        let c = Config::load_from(None, Env::prefixed("ANKUSA_TEST_NONE_")).unwrap();
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
            assert!(err.contains("bogus"), "{err}");
            Ok(())
        });
    }
}
