//! The webhook sink's configuration (`kind = "webhook"`).

use std::time::Duration;

use reqwest::Url;
use serde::Deserialize;

use crate::retry::RetryPolicy;
use crate::SinkError;

/// How events map onto HTTP requests (the CloudEvents HTTP binding's content modes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookMode {
    /// One request per event: attributes in `ce-` headers, `data` as the body (the default:
    /// receivers route on headers without parsing the body). The headers are outside the
    /// body's signature, so `webhook-id` is their digest
    /// ([`binary_message_id`](super::signing::binary_message_id)): a receiver that acts on
    /// them checks it.
    #[default]
    Binary,
    /// One request per event: the whole event as `application/cloudevents+json`, all of it
    /// in the signed body.
    Structured,
    /// One request per `send` call: a JSON array of structured events,
    /// `application/cloudevents-batch+json`. Fewest requests; all events share one outcome.
    Batch,
}

/// Configuration of a webhook sink.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// The endpoint events are POSTed to (`http` or `https`). Required, no default.
    pub url: String,
    /// `binary`, `structured` or `batch`. Default `binary`.
    #[serde(default)]
    pub mode: WebhookMode,
    /// Standard Webhooks signing secrets, `whsec_<base64 key>`. Every request carries one
    /// signature per secret, so a key is rotated by adding the new one, then removing the old.
    /// Required, at least one.
    pub secrets: Vec<String>,
    /// Timeout of a whole request (connect, send, response). Default `15s`.
    #[serde(with = "humantime_serde", default = "default_timeout")]
    pub timeout: Duration,
    /// Timeout of the TCP (and TLS) connect alone. Default `5s`.
    #[serde(with = "humantime_serde", default = "default_connect_timeout")]
    pub connect_timeout: Duration,
    /// Requests in flight at once within one `send`, across distinct partition keys (events
    /// of one key always go one after another). Ignored in `batch` mode. Default `16`.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// URL the healthcheck GETs, expecting a 2xx. Default none: the healthcheck then passes
    /// without a request, since POSTing to `url` would deliver a bogus event.
    #[serde(default)]
    pub healthcheck_url: Option<String>,
    /// The publisher's retry schedule for this sink; `retry.max_retry_after` also clamps the
    /// receiver's `Retry-After`. Default: [`RetryPolicy::default`].
    #[serde(default)]
    pub retry: RetryPolicy,
}

fn default_timeout() -> Duration {
    Duration::from_secs(15)
}

fn default_connect_timeout() -> Duration {
    Duration::from_secs(5)
}

fn default_max_in_flight() -> usize {
    16
}

impl WebhookConfig {
    /// A config for `url` signed with `secrets`, every other key at its default.
    pub fn new(url: impl Into<String>, secrets: Vec<String>) -> Self {
        WebhookConfig {
            url: url.into(),
            mode: WebhookMode::default(),
            secrets,
            timeout: default_timeout(),
            connect_timeout: default_connect_timeout(),
            max_in_flight: default_max_in_flight(),
            healthcheck_url: None,
            retry: RetryPolicy::default(),
        }
    }

    /// Checks everything but the secrets (see `Signer::new`); errors name the field.
    pub(crate) fn validate(&self) -> Result<(Url, Option<Url>), SinkError> {
        let url = parse_url("url", &self.url)?;
        let healthcheck_url = self
            .healthcheck_url
            .as_deref()
            .map(|u| parse_url("healthcheck_url", u))
            .transpose()?;
        if self.timeout.is_zero() {
            return Err(SinkError::Config("timeout must be > 0".into()));
        }
        if self.connect_timeout.is_zero() {
            return Err(SinkError::Config("connect_timeout must be > 0".into()));
        }
        if self.max_in_flight == 0 {
            return Err(SinkError::Config("max_in_flight must be >= 1".into()));
        }
        Ok((url, healthcheck_url))
    }
}

/// Parses an `http(s)` URL; the error names `field` but not the value (it may hold a token).
fn parse_url(field: &str, value: &str) -> Result<Url, SinkError> {
    match Url::parse(value) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => Ok(url),
        Ok(_) => Err(SinkError::Config(format!(
            "{field} must be an http or https URL with a host"
        ))),
        Err(e) => Err(SinkError::Config(format!("{field} is not a URL: {e}"))),
    }
}

/// Secrets are redacted, and URLs shown without credentials or query (they may hold tokens).
impl std::fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("url", &redact_url(&self.url))
            .field("mode", &self.mode)
            .field(
                "secrets",
                &format_args!("<{} redacted>", self.secrets.len()),
            )
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_in_flight", &self.max_in_flight)
            .field(
                "healthcheck_url",
                &self.healthcheck_url.as_deref().map(redact_url),
            )
            .field("retry", &self.retry)
            .finish()
    }
}

fn redact_url(url: &str) -> String {
    match Url::parse(url) {
        Ok(mut url) => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.set_query(None);
            url.to_string()
        }
        Err(_) => "<invalid url>".into(),
    }
}
