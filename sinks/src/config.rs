//! The one config type an operator writes for a sink, and the one place that turns it into a
//! running sink.
//!
//! `SinkConfig` is tagged by `kind` so that a sink table in the node's config reads as
//! `kind = "webhook"` plus that kind's own keys. Every struct denies unknown keys: a typo in a
//! sink's config (`max_inflight`, `secret`) must stop the node at startup, not silently fall back
//! to a default that nobody chose. Validation happens in `build`, and its errors name the field.

use serde::Deserialize;

use crate::file::{FileConfig, FileSink};
use crate::kafka::{KafkaConfig, KafkaSink};
use crate::retry::RetryPolicy;
use crate::webhook::{WebhookConfig, WebhookSink};
use crate::{Sink, SinkError};

/// The configuration of one sink, tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum SinkConfig {
    /// `kind = "kafka"`: an idempotent Kafka producer, CloudEvents Kafka binding (binary mode).
    Kafka(KafkaConfig),
    /// `kind = "webhook"`: signed HTTP requests, CloudEvents HTTP binding.
    Webhook(WebhookConfig),
    /// `kind = "file"`: structured CloudEvents as JSON lines, fsynced.
    File(FileConfig),
}

impl SinkConfig {
    /// The sink's kind, as in the `kind` key and [`Sink::kind`].
    pub fn kind(&self) -> &'static str {
        match self {
            SinkConfig::Kafka(_) => "kafka",
            SinkConfig::Webhook(_) => "webhook",
            SinkConfig::File(_) => "file",
        }
    }

    /// The retry schedule the publisher applies to this sink's `Retry` outcomes.
    pub fn retry(&self) -> RetryPolicy {
        match self {
            SinkConfig::Kafka(c) => c.retry,
            SinkConfig::Webhook(c) => c.retry,
            SinkConfig::File(c) => c.retry,
        }
    }

    /// Validates the config and builds the sink, returning it with its retry schedule.
    ///
    /// Building does no network or file I/O (a Kafka producer connects lazily); call
    /// [`Sink::healthcheck`] on the result to exercise the real path.
    pub async fn build(&self) -> Result<(Box<dyn Sink>, RetryPolicy), SinkError> {
        let retry = self.retry();
        retry.validate("retry")?;
        let sink: Box<dyn Sink> = match self {
            SinkConfig::Kafka(c) => Box::new(KafkaSink::new(c.clone())?),
            SinkConfig::Webhook(c) => Box::new(WebhookSink::new(c.clone())?),
            SinkConfig::File(c) => Box::new(FileSink::new(c.clone())?),
        };
        Ok((sink, retry))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::webhook::WebhookMode;

    fn parse(json: serde_json::Value) -> Result<SinkConfig, String> {
        serde_json::from_value(json).map_err(|e| e.to_string())
    }

    #[test]
    fn each_kind_parses_with_defaults() {
        let file = parse(serde_json::json!({"kind": "file", "path": "/tmp/x.jsonl"})).unwrap();
        assert_eq!(file.kind(), "file");
        assert_eq!(file.retry(), RetryPolicy::default());

        let hook = parse(serde_json::json!({
            "kind": "webhook", "url": "http://127.0.0.1:1/hook",
            "secrets": ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
        }))
        .unwrap();
        let SinkConfig::Webhook(hook) = hook else {
            panic!("not a webhook: {hook:?}")
        };
        assert_eq!(hook.mode, WebhookMode::Binary);
        assert_eq!(hook.timeout, Duration::from_secs(15));
        assert_eq!(hook.max_in_flight, 16);

        let kafka = parse(serde_json::json!({
            "kind": "kafka", "brokers": "127.0.0.1:9092", "topic": "t",
            "message_timeout": "2s", "retry": {"initial": "1s", "max": "10s"},
        }))
        .unwrap();
        let SinkConfig::Kafka(kafka) = kafka else {
            panic!("not kafka: {kafka:?}")
        };
        assert_eq!(kafka.message_timeout, Duration::from_secs(2));
        assert_eq!(kafka.retry.initial, Duration::from_secs(1));
        assert_eq!(kafka.retry.max_retry_after, Duration::from_secs(300));
    }

    #[test]
    fn unknown_keys_are_refused_at_every_level() {
        let err = parse(serde_json::json!({"kind": "file", "path": "/x", "pth": "/y"}));
        assert!(err.unwrap_err().contains("unknown field `pth`"));
        let err = parse(serde_json::json!({
            "kind": "kafka", "brokers": "b", "topic": "t", "max_inflight": 3,
        }));
        assert!(err.unwrap_err().contains("unknown field `max_inflight`"));
        let err = parse(serde_json::json!({
            "kind": "webhook", "url": "http://h/", "secrets": [], "secret": "x",
        }));
        assert!(err.unwrap_err().contains("unknown field `secret`"));
        let err = parse(serde_json::json!({
            "kind": "file", "path": "/x", "retry": {"intial": "1s"},
        }));
        assert!(err.unwrap_err().contains("unknown field `intial`"));
    }

    #[test]
    fn a_missing_or_unknown_kind_is_refused() {
        let err = parse(serde_json::json!({"path": "/x"})).unwrap_err();
        assert!(err.contains("missing field `kind`"), "{err}");
        let err = parse(serde_json::json!({"kind": "s3", "path": "/x"})).unwrap_err();
        assert!(err.contains("unknown variant `s3`"), "{err}");
    }

    #[test]
    fn a_missing_required_field_is_named() {
        let err = parse(serde_json::json!({"kind": "kafka", "brokers": "b"})).unwrap_err();
        assert!(err.contains("missing field `topic`"), "{err}");
    }

    #[tokio::test]
    async fn build_validates_the_retry_policy() {
        let cfg = parse(serde_json::json!({
            "kind": "file", "path": "/tmp/x", "retry": {"initial": "0s"},
        }))
        .unwrap();
        let err = cfg.build().await.err().unwrap().to_string();
        assert!(err.contains("retry.initial"), "{err}");
    }
}
