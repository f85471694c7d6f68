//! Trace context: the W3C `traceparent` a request comes with, the node's spans joined to it,
//! and their optional export over OTLP.
//!
//! The node's spans are `tracing` spans; the `tracing-opentelemetry` layer ([`Tracing::layer`])
//! makes each an OpenTelemetry span, with ids from the SDK's tracer. The admin API's request
//! span takes the caller's trace as its parent ([`join`]), read by OpenTelemetry's
//! `TraceContextPropagator` ([`extract`]): a missing or malformed `traceparent` is no error,
//! a new trace starts, as the W3C spec says. What a change records is the `traceparent` of
//! that span, written by the same propagator ([`trace_of`]): its row and its event carry it.
//!
//! Where no layer is installed (the node embedded in a test or a tool, or the request span
//! filtered out), [`join`] starts the request's span with a tracer of its own that exports
//! nothing, so every change still gets a valid trace. Export is on only with
//! `[telemetry] otlp_endpoint`: a batch processor on the tokio runtime posts protobuf to the
//! collector with the reqwest client the node already has (no gRPC), and [`Tracing::shutdown`]
//! flushes it at the node's stop.

use std::collections::HashMap;
use std::sync::LazyLock;

use axum::http::{HeaderMap, Method, StatusCode};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::Context;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing::Span;
use tracing_opentelemetry::{OpenTelemetryLayer, OpenTelemetrySpanExt};
use tracing_subscriber::registry::LookupSpan;

use crate::audit::Trace;
use crate::config::TelemetryConfig;

/// The instrumentation scope of every span the node makes.
const SCOPE: &str = "ankusa";

/// The `service.name` spans are exported under.
const SERVICE: &str = "ankusa";

/// The tracer of requests served with no layer installed: it gives spans their ids and
/// exports nothing.
static DETACHED: LazyLock<SdkTracer> =
    LazyLock::new(|| SdkTracerProvider::builder().build().tracer(SCOPE));

/// Why span export could not start.
#[derive(Debug, thiserror::Error)]
#[error("telemetry.otlp_endpoint: the OTLP exporter cannot start: {0}")]
pub struct TraceError(String);

/// The node's tracer provider: its spans' ids, and their export when it is on.
#[derive(Debug)]
pub struct Tracing {
    provider: SdkTracerProvider,
}

impl Tracing {
    /// The provider `config` asks for: exporting nothing, or exporting to its OTLP endpoint
    /// (then call it inside the tokio runtime the batch processor is to run on).
    pub fn start(config: &TelemetryConfig) -> Result<Tracing, TraceError> {
        let resource = Resource::builder().with_service_name(SERVICE).build();
        let builder = SdkTracerProvider::builder().with_resource(resource);
        let Some(url) = config.traces_url() else {
            return Ok(Tracing {
                provider: builder.build(),
            });
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(reqwest::Client::new())
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(url)
            .build()
            .map_err(|e| TraceError(e.to_string()))?;
        // The async-runtime processor: the exporter's reqwest client needs tokio's reactor,
        // which the SDK's own batch thread does not have.
        let processor =
            BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::Tokio).build();
        Ok(Tracing {
            provider: builder.with_span_processor(processor).build(),
        })
    }

    /// The `tracing` layer that makes the node's spans OpenTelemetry spans of this provider.
    pub fn layer<S>(&self) -> OpenTelemetryLayer<S, SdkTracer>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer(SCOPE))
            .with_threads(false)
    }

    /// Export what is still buffered and stop. It blocks until the export is done: call it
    /// outside the runtime's workers, with the runtime still running.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(target: "ankusa::telemetry", error = %e, "span export did not finish");
        }
    }
}

/// The span of one admin request: named by its method and route (the route's template, so
/// names stay few; the method alone for a path no route matched), with its request id and,
/// once [`join`]ed, its trace id.
pub fn request_span(method: &Method, route: Option<&str>, request_id: &str) -> Span {
    let name = match route {
        Some(route) => format!("{method} {route}"),
        None => method.to_string(),
    };
    tracing::info_span!(
        target: "ankusa::api",
        "admin request",
        otel.name = name,
        otel.kind = "server",
        http.request.method = %method,
        http.route = route,
        http.response.status_code = tracing::field::Empty,
        request_id,
        trace_id = tracing::field::Empty,
    )
}

/// Record the answer's status on a [`request_span`].
pub fn request_answered(span: &Span, status: StatusCode) {
    // An i64: tracing-opentelemetry writes an unsigned number as a string.
    span.record("http.response.status_code", i64::from(status.as_u16()));
}

/// The most list-members a `tracestate` may have (W3C trace context: over it, the whole
/// header is discarded).
const TRACESTATE_MEMBERS: usize = 32;
/// The longest `tracestate` kept, in characters: what W3C trace context asks every vendor to
/// propagate. A longer one is dropped, as the spec allows, so the row, its event and a
/// webhook's headers never carry more.
const TRACESTATE_CHARS: usize = 512;

/// Whether `tracestate` is within W3C trace context's limits (32 members, 512 characters).
pub fn tracestate_fits(tracestate: &str) -> bool {
    tracestate.len() <= TRACESTATE_CHARS
        && tracestate
            .split(',')
            .filter(|m| !m.trim().is_empty())
            .count()
            <= TRACESTATE_MEMBERS
}

/// The trace context of a request's headers (`traceparent`, `tracestate`). A missing or
/// malformed `traceparent` gives an empty context: the request starts a new trace. A
/// `tracestate` past the limits ([`tracestate_fits`]) is dropped; the `traceparent` stays.
pub fn extract(headers: &HeaderMap) -> Context {
    TraceContextPropagator::new().extract(&Bounded(opentelemetry_http::HeaderExtractor(headers)))
}

/// Request headers as the propagator reads them, without a `tracestate` past the limits.
struct Bounded<'a>(opentelemetry_http::HeaderExtractor<'a>);

impl opentelemetry::propagation::Extractor for Bounded<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        let value = self.0.get(key)?;
        (key != "tracestate" || tracestate_fits(value)).then_some(value)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys()
    }
}

/// Make `span` a child of `parent` (a request's [`extract`]) and give the context the
/// request runs in: `span`'s own, or, where no layer gives it one, that of a span started
/// with [`DETACHED`] under `parent`, which ends when the context is dropped.
pub fn join(span: &Span, parent: Context) -> Context {
    // Refused only without a layer, or for a disabled span: both leave `span` invalid below.
    let _ = span.set_parent(parent.clone());
    let mut cx = span.context();
    if !cx.span().span_context().is_valid() {
        let detached =
            opentelemetry::trace::Tracer::start_with_context(&*DETACHED, "admin request", &parent);
        cx = parent.with_span(detached);
    }
    span.record("trace_id", tracing::field::display(trace_id(&cx)));
    cx
}

/// The `traceparent` (and `tracestate`) of the span in `cx`, as the propagator writes them;
/// `None` when `cx` holds no valid span.
pub fn trace_of(cx: &Context) -> Option<Trace> {
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut fields = HashMap::new();
    TraceContextPropagator::new().inject_context(cx, &mut fields);
    Some(Trace {
        traceparent: fields.remove("traceparent")?,
        tracestate: fields.remove("tracestate").filter(|s| !s.is_empty()),
    })
}

/// The trace of the node's current span, if there is one (system changes made in a span).
pub fn current() -> Option<Trace> {
    trace_of(&Span::current().context())
}

/// The trace id of `cx`'s span, as 32 hex digits (the request span's `trace_id` field).
pub fn trace_id(cx: &Context) -> String {
    cx.span().span_context().trace_id().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn headers(traceparent: &str, tracestate: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("traceparent", HeaderValue::from_str(traceparent).unwrap());
        if let Some(state) = tracestate {
            h.insert("tracestate", HeaderValue::from_str(state).unwrap());
        }
        h
    }

    /// The parts of a traceparent: version, trace id, parent id, flags.
    fn parts(traceparent: &str) -> Vec<String> {
        traceparent.split('-').map(str::to_owned).collect()
    }

    #[test]
    fn a_request_joins_the_callers_trace() {
        let parent = extract(&headers(PARENT, Some("congo=t61rcWkgMzE")));
        let cx = join(&tracing::info_span!("request"), parent);
        let trace = trace_of(&cx).unwrap();
        let p = parts(&trace.traceparent);
        assert_eq!(p.len(), 4);
        assert_eq!(
            (p[0].as_str(), p[1].as_str()),
            ("00", "4bf92f3577b34da6a3ce929d0e0e4736")
        );
        // The node's own span, a child of the caller's: a span id of its own, sampled as the
        // caller's was.
        assert_ne!(p[2], "00f067aa0ba902b7");
        assert_eq!((p[2].len(), p[3].as_str()), (16, "01"));
        assert_eq!(trace.tracestate.as_deref(), Some("congo=t61rcWkgMzE"));
        assert_eq!(trace_id(&cx), "4bf92f3577b34da6a3ce929d0e0e4736");
    }

    #[test]
    fn a_tracestate_past_the_w3c_limits_is_dropped_and_the_trace_kept() {
        let members = |n: usize| {
            (0..n)
                .map(|i| format!("v{i}=x"))
                .collect::<Vec<_>>()
                .join(",")
        };
        // Eight members, each within W3C's 256-character value: 512 characters in all.
        let long = |extra: usize| {
            let mut m: Vec<String> = (0..8).map(|i| format!("v{i}={}", "a".repeat(60))).collect();
            m[0].push_str(&"b".repeat(1 + extra));
            m.join(",")
        };
        assert_eq!(long(0).len(), TRACESTATE_CHARS);
        for (state, kept) in [
            (members(32), true),
            (members(33), false),
            (long(0), true),
            (long(1), false),
            (format!("congo={}", "a".repeat(400 << 10)), false),
        ] {
            let cx = join(
                &tracing::info_span!("request"),
                extract(&headers(PARENT, Some(&state))),
            );
            let trace = trace_of(&cx).unwrap();
            assert_eq!(
                parts(&trace.traceparent)[1],
                "4bf92f3577b34da6a3ce929d0e0e4736"
            );
            assert_eq!(trace.tracestate.is_some(), kept, "{} chars", state.len());
            if kept {
                assert_eq!(trace.tracestate.as_deref(), Some(state.as_str()));
            }
        }
    }

    #[test]
    fn a_malformed_or_missing_traceparent_starts_a_new_trace() {
        for bad in [
            "",
            "nonsense",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            // Its tracestate goes with it.
            let cx = join(
                &tracing::info_span!("request"),
                extract(&headers(bad, Some("congo=t61rcWkgMzE"))),
            );
            let trace = trace_of(&cx).unwrap();
            let p = parts(&trace.traceparent);
            assert_eq!((p.len(), p[0].as_str()), (4, "00"), "{bad}");
            assert_ne!(p[1], "4bf92f3577b34da6a3ce929d0e0e4736", "{bad}");
            assert_eq!(trace.tracestate, None, "{bad}");
        }
        let a = trace_of(&join(&Span::none(), extract(&HeaderMap::new()))).unwrap();
        let b = trace_of(&join(&Span::none(), extract(&HeaderMap::new()))).unwrap();
        assert_ne!(parts(&a.traceparent)[1], parts(&b.traceparent)[1]);
        assert_eq!(parts(&a.traceparent)[1].len(), 32);
    }

    #[test]
    fn without_a_span_there_is_no_trace() {
        assert_eq!(current(), None);
        assert_eq!(trace_of(&Context::new()), None);
    }

    #[test]
    fn with_the_layer_the_tracing_span_is_the_requests() {
        use tracing_subscriber::layer::SubscriberExt;
        let tracing = Tracing::start(&TelemetryConfig::default()).unwrap();
        let subscriber = tracing_subscriber::registry().with(tracing.layer());
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("request");
            let cx = join(&span, extract(&headers(PARENT, None)));
            let trace = trace_of(&cx).unwrap();
            // The context is the tracing span's: the same inside it, for system changes too.
            let inside = span.in_scope(current).unwrap();
            assert_eq!(inside, trace);
            assert_eq!(
                parts(&trace.traceparent)[1],
                "4bf92f3577b34da6a3ce929d0e0e4736"
            );
        });
    }
}
