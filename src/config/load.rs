//! Loading: the layers merged (embedded default, file, environment), extracted and
//! validated; figment's errors are put in an operator's terms by `describe`.

use std::path::Path;

use figment::providers::{Env, Format, Toml};
use figment::{Figment, Provider};

use super::describe::describe;
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
        let figment = figment.merge(env);
        let config: Config = figment
            .extract()
            .map_err(|e| ConfigError::Parse(describe(e, &figment, &env_name, prefix)))?;
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
        self.telemetry.validate()?;
        self.api.validate()
    }
}
