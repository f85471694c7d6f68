//! The effective configuration as an operator reads it (`ankusa config show`): the layers
//! merged as [`Config::load`] merges them, every secret replaced by `"[redacted]"`.
//!
//! Redacted: webhook `secrets`, any key named like a secret or a password (Kafka
//! `properties` such as `sasl.password` or `ssl.key.password` included), and the password of
//! a `redis_url`. Token entries keep their `sha256` digests: a digest is what the config
//! holds instead of the token, and names which token is which.

use std::path::Path;

use figment::providers::{Env, Format, Toml};
use figment::Figment;
use serde_json::Value;

use super::describe::describe;
use super::{Config, ConfigError, DEFAULT_TOML};

/// What stands for a secret.
pub const REDACTED: &str = "[redacted]";

impl Config {
    /// The effective configuration of `file` and the environment (prefix `ANKUSA_`), checked
    /// as [`Config::load`] checks it, with every secret redacted.
    pub fn effective(file: Option<&Path>) -> Result<Value, ConfigError> {
        Config::load(file)?;
        let mut figment = Figment::from(Toml::string(DEFAULT_TOML));
        if let Some(file) = file {
            figment = figment.merge(Toml::file_exact(file));
        }
        let env = Env::prefixed("ANKUSA_")
            .filter(|k| k.as_str().contains("__"))
            .split("__");
        let env_name = figment::Provider::metadata(&env).name;
        let figment = figment.merge(env);
        let mut value: Value = figment
            .extract()
            .map_err(|e| ConfigError::Parse(describe(e, &figment, &env_name, "ANKUSA_")))?;
        redact(&mut value);
        Ok(value)
    }
}

/// Whether a key names a secret.
fn secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["secret", "password", "passwd", "credential", "private"]
        .iter()
        .any(|word| key.contains(word))
        || key == "sasl.oauthbearer.config"
        || key.ends_with(".key.pem")
}

/// Redact every secret in `value`, in place.
pub fn redact(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if secret_key(key) && !v.is_null() {
                    *v = Value::String(REDACTED.into());
                } else if key == "redis_url" {
                    if let Value::String(url) = v {
                        *url = without_password(url);
                    }
                } else {
                    redact(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}

/// `url` with its password (and user) replaced: `redis://[redacted]@host:port/db`.
fn without_password(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(parsed) if parsed.password().is_some() || !parsed.username().is_empty() => {
            let rest = &url[url.find('@').map_or(0, |at| at + 1)..];
            format!("{}://{REDACTED}@{rest}", parsed.scheme())
        }
        Ok(_) => url.to_owned(),
        Err(_) => REDACTED.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_passwords_and_redis_passwords_are_redacted() {
        let mut v = json!({
            "lifecycle": {"sink": {
                "hook": {"kind": "webhook", "url": "https://h.test/", "secrets": ["whsec_a", "whsec_b"]},
                "k": {"kind": "kafka", "properties": {"sasl.password": "p", "sasl.username": "u",
                                                       "ssl.key.password": "k", "linger.ms": "5"}},
            }},
            "routes": {"redis_url": "redis://:hunter2@r.test:6379/0"},
            "sources": {"redis_url": "redis://r.test:6379"},
            "api": {"tokens": [{"name": "ops", "sha256": "ab12", "scopes": ["admin:read"]}]},
        });
        redact(&mut v);
        assert_eq!(v["lifecycle"]["sink"]["hook"]["secrets"], REDACTED);
        assert_eq!(v["lifecycle"]["sink"]["hook"]["url"], "https://h.test/");
        let props = &v["lifecycle"]["sink"]["k"]["properties"];
        assert_eq!(props["sasl.password"], REDACTED);
        assert_eq!(props["ssl.key.password"], REDACTED);
        assert_eq!(props["sasl.username"], "u");
        assert_eq!(props["linger.ms"], "5");
        assert_eq!(v["routes"]["redis_url"], "redis://[redacted]@r.test:6379/0");
        assert_eq!(v["sources"]["redis_url"], "redis://r.test:6379");
        assert_eq!(v["api"]["tokens"][0]["sha256"], "ab12");
        assert!(!v.to_string().contains("hunter2"));
    }
}
