//! The Kafka sink's configuration (`kind = "kafka"`).

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::ClientConfig;
use serde::Deserialize;

use crate::retry::RetryPolicy;
use crate::SinkError;

/// librdkafka properties the sink sets itself: durability and ordering depend on them, so a
/// passthrough property may not override them.
const FIXED_PROPERTIES: &[&str] = &[
    "bootstrap.servers",
    "metadata.broker.list",
    "enable.idempotence",
    "acks",
    "request.required.acks",
    "message.timeout.ms",
    "delivery.timeout.ms",
];

/// Configuration of a Kafka sink.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// Bootstrap brokers, comma-separated `host:port`. Required, no default.
    pub brokers: String,
    /// The topic events are produced to. Required, no default.
    pub topic: String,
    /// How long a record may wait for its delivery report before it fails and comes back as
    /// `Retry` (librdkafka `message.timeout.ms`). Default `30s`.
    #[serde(with = "humantime_serde", default = "default_message_timeout")]
    pub message_timeout: Duration,
    /// Timeout of the healthcheck's metadata request. Default `10s`.
    #[serde(with = "humantime_serde", default = "default_healthcheck_timeout")]
    pub healthcheck_timeout: Duration,
    /// librdkafka client properties passed through as is: `security.protocol`, `ssl.*`,
    /// `sasl.*`, `linger.ms`, `compression.type`... Default empty. The brokers, idempotence,
    /// `acks` and timeouts have keys of their own or are fixed, and are refused here.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// Whether every `deleted` event is followed by a tombstone: a record with the event's
    /// key and a null value, in the same partition right after it, so that a compacted topic
    /// keeps the present state (Debezium's convention). Default `false`.
    #[serde(default)]
    pub tombstones: bool,
    /// The publisher's retry schedule for this sink. Default: [`RetryPolicy::default`].
    #[serde(default)]
    pub retry: RetryPolicy,
}

fn default_message_timeout() -> Duration {
    Duration::from_secs(30)
}

fn default_healthcheck_timeout() -> Duration {
    Duration::from_secs(10)
}

impl KafkaConfig {
    /// A config for `topic` on `brokers`, every other key at its default.
    pub fn new(brokers: impl Into<String>, topic: impl Into<String>) -> Self {
        KafkaConfig {
            brokers: brokers.into(),
            topic: topic.into(),
            message_timeout: default_message_timeout(),
            healthcheck_timeout: default_healthcheck_timeout(),
            properties: BTreeMap::new(),
            tombstones: false,
            retry: RetryPolicy::default(),
        }
    }

    /// Checks the config and returns the producer's client config; errors name the field and
    /// never echo a property's value (it may be a password).
    pub(crate) fn client_config(&self) -> Result<ClientConfig, SinkError> {
        if self.brokers.trim().is_empty() {
            return Err(SinkError::Config("brokers must not be empty".into()));
        }
        validate_topic(&self.topic)?;
        let timeout_ms = millis("message_timeout", self.message_timeout)?;
        millis("healthcheck_timeout", self.healthcheck_timeout)?;
        let mut config = ClientConfig::new();
        for (key, value) in &self.properties {
            if FIXED_PROPERTIES.contains(&key.as_str()) {
                return Err(SinkError::Config(format!(
                    "properties.{key} is set by the sink and cannot be overridden"
                )));
            }
            check_property(key, value)?;
            config.set(key, value);
        }
        if !self.properties.contains_key("linger.ms") {
            // The publisher hands over whole batches; waiting librdkafka's default 5 ms for
            // more records only adds latency. An operator may still set it.
            config.set("linger.ms", "1");
        }
        config
            .set("bootstrap.servers", &self.brokers)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("message.timeout.ms", timeout_ms.to_string());
        Ok(config)
    }
}

/// Kafka's topic name rules: 1-249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
fn validate_topic(topic: &str) -> Result<(), SinkError> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if topic.is_empty() || topic.len() > 249 || topic == "." || topic == ".." {
        return Err(SinkError::Config("topic must be 1-249 characters".into()));
    }
    if !topic.chars().all(legal) {
        return Err(SinkError::Config(
            "topic may only hold [a-zA-Z0-9._-]".into(),
        ));
    }
    Ok(())
}

/// `duration` in whole milliseconds, > 0 and within librdkafka's `i32` range.
fn millis(field: &str, duration: Duration) -> Result<u32, SinkError> {
    match u32::try_from(duration.as_millis()) {
        Ok(ms) if ms > 0 && ms <= i32::MAX as u32 => Ok(ms),
        _ => Err(SinkError::Config(format!(
            "{field} must be between 1ms and {}ms",
            i32::MAX
        ))),
    }
}

/// Asks librdkafka whether it knows `key` and accepts `value`, one property at a time so the
/// error can name the key.
fn check_property(key: &str, value: &str) -> Result<(), SinkError> {
    match ClientConfig::new().set(key, value).create_native_config() {
        Ok(_) => Ok(()),
        Err(KafkaError::ClientConfig(result, ..)) => Err(SinkError::Config(format!(
            "properties.{key} was refused by librdkafka ({result:?})"
        ))),
        Err(_) => Err(SinkError::Config(format!("properties.{key} is invalid"))),
    }
}

/// Property values are redacted (`sasl.password`, `ssl.key.password`...).
impl std::fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let properties: BTreeMap<&str, &str> = self
            .properties
            .keys()
            .map(|k| (k.as_str(), "<redacted>"))
            .collect();
        f.debug_struct("KafkaConfig")
            .field("brokers", &self.brokers)
            .field("topic", &self.topic)
            .field("message_timeout", &self.message_timeout)
            .field("healthcheck_timeout", &self.healthcheck_timeout)
            .field("properties", &properties)
            .field("tombstones", &self.tombstones)
            .field("retry", &self.retry)
            .finish()
    }
}
