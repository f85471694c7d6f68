//! Loading: the layers merged (embedded default, file, environment), extracted, validated,
//! and figment's errors put in an operator's terms.

use std::path::Path;

use figment::providers::{Env, Format, Toml};
use figment::{Figment, Provider};

use super::{invalid, Config, ConfigError, DEFAULT_TOML};

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
        self.node.validate()?;
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
