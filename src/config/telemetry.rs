//! `[telemetry]`: where the node's spans go. Logs are `[log]`'s; metrics are scraped from
//! `/metrics`. Spans are exported only when an OTLP endpoint is set: the trace context of a
//! change (its row's and event's `traceparent`) is kept either way.

use serde::Deserialize;

use super::{invalid, ConfigError};

/// The OTLP/HTTP path of traces under an endpoint, as OpenTelemetry's
/// `OTEL_EXPORTER_OTLP_ENDPOINT` appends it.
const TRACES_PATH: &str = "v1/traces";

/// `[telemetry]`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// An OTLP/HTTP collector (`http://host:4318`): spans are sent, as protobuf, to
    /// `<otlp_endpoint>/v1/traces`. `None`: spans are not exported.
    pub otlp_endpoint: Option<String>,
}

impl TelemetryConfig {
    /// The URL spans are posted to, when export is on.
    pub fn traces_url(&self) -> Option<String> {
        let endpoint = self.otlp_endpoint.as_deref()?;
        Some(format!("{}/{TRACES_PATH}", endpoint.trim_end_matches('/')))
    }

    /// An endpoint must be an http(s) URL with a host, and without credentials, a query or a
    /// fragment: the path of traces is appended to it, and the message never shows it.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        const KEY: &str = "telemetry.otlp_endpoint";
        let Some(endpoint) = self.otlp_endpoint.as_deref() else {
            return Ok(());
        };
        let Ok(url) = url::Url::parse(endpoint) else {
            return invalid(KEY, "is not a URL (http://host:4318)");
        };
        if !matches!(url.scheme(), "http" | "https") || !url.has_host() {
            return invalid(KEY, "must be an http:// or https:// URL with a host");
        }
        if !url.username().is_empty() || url.password().is_some() {
            return invalid(KEY, "must not carry credentials");
        }
        if url.query().is_some() || url.fragment().is_some() {
            return invalid(
                KEY,
                "must have no query or fragment (/v1/traces is appended)",
            );
        }
        Ok(())
    }
}
