//! The effective configuration as an operator reads it (`ankusa config show`): the layers
//! merged as [`Config::load`] merges them, every secret replaced by `"[redacted]"`.
//!
//! Redacted: webhook `secrets`, any key named like a secret or a password (Kafka
//! `properties` such as `sasl.password` or `ssl.key.password` included), and in every URL
//! (`url`, `healthcheck_url`, `redis_url`, `otlp_endpoint`, ...) its user, password and
//! query, which may hold a token (`?pass=` of a `redis+unix` URL). A shown URL is built from
//! the parsed URL's parts, never cut out of the text, so it shows what a URL parser reads.
//! Token entries keep their `sha256` digests: a digest is what the config holds instead of
//! the token, and names which token is which.

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

/// Whether a key holds a URL.
fn url_key(key: &str) -> bool {
    key.ends_with("url") || key.ends_with("endpoint")
}

/// Redact every secret in `value`, in place.
pub fn redact(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if secret_key(key) && !v.is_null() {
                    *v = Value::String(REDACTED.into());
                } else if url_key(key) {
                    if let Value::String(url) = v {
                        *url = shown_url(url);
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

/// `url` without its user, password, query and fragment, each replaced by `[redacted]`
/// where it had one: `redis://[redacted]@host:6379/0`, `https://h.test/hook?[redacted]`.
fn shown_url(url: &str) -> String {
    use url::Position;
    let Ok(parsed) = url::Url::parse(url) else {
        return REDACTED.to_owned();
    };
    let mut shown = format!("{}:", parsed.scheme());
    if parsed.has_authority() {
        shown.push_str("//");
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        shown.push_str(REDACTED);
        shown.push('@');
    }
    shown.push_str(&parsed[Position::BeforeHost..Position::AfterPath]);
    if parsed.query().is_some() || parsed.fragment().is_some() {
        shown.push('?');
        shown.push_str(REDACTED);
    }
    shown
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

    #[test]
    fn every_url_is_shown_without_user_password_or_query() {
        let mut v = json!({
            "lifecycle": {"sink": {"hook": {
                "kind": "webhook",
                "url": "https://ops:pa55@h.test:8443/hook?token=t0k#frag",
                "healthcheck_url": "https://ops:pa55@h.test/health?key=k3y",
            }}},
            // A password holding `@`: URL parsers end the user part at the last one.
            "routes": {"redis_url": "redis://:p@ss@word@r.test:6379/0"},
            "sources": {"redis_url": "redis+unix:///run/redis.sock?pass=s3cret&db=1"},
            "telemetry": {"otlp_endpoint": "http://u:otlp-pw@collector:4318"},
            "plain": {"url": "http://h.test/x", "bad_url": "not a url"},
        });
        redact(&mut v);
        let hook = &v["lifecycle"]["sink"]["hook"];
        assert_eq!(
            hook["url"],
            "https://[redacted]@h.test:8443/hook?[redacted]"
        );
        assert_eq!(
            hook["healthcheck_url"],
            "https://[redacted]@h.test/health?[redacted]"
        );
        assert_eq!(v["routes"]["redis_url"], "redis://[redacted]@r.test:6379/0");
        assert_eq!(
            v["sources"]["redis_url"],
            "redis+unix:///run/redis.sock?[redacted]"
        );
        assert_eq!(
            v["telemetry"]["otlp_endpoint"],
            "http://[redacted]@collector:4318/"
        );
        assert_eq!(v["plain"]["url"], "http://h.test/x");
        assert_eq!(v["plain"]["bad_url"], REDACTED);
        let shown = v.to_string();
        for secret in [
            "pa55", "t0k", "k3y", "ss@word", "word", "s3cret", "otlp-pw", "frag",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
    }
}
