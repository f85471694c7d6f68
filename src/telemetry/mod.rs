//! Named telemetry events (vector's `internal_events`): every log line and metric the node
//! emits is defined here, once, so that names stay consistent and no secret can slip into a
//! field. A caller says what happened (`telemetry::audit::row_committed(&row)`); the event
//! decides the metric, the log level and the fields.
//!
//! One file per area: [`audit`] (`ankusa_audit_*`: the writer, the trail's usage and
//! ceilings, retention), [`dual`] (`ankusa_audit_pending_*`, `ankusa_audit_settlement_*`:
//! dual writes and their settlement), [`lifecycle`] (`ankusa_lifecycle_*`: the publisher and
//! its sinks), [`watch`] (`ankusa_lifecycle_watch*`: the watchers of the events over HTTP),
//! [`remote`] (`ankusa_remote_*`: the remote stores' refresh after a restore),
//! [`api`] (the admin API's log lines; it has no metrics), and [`trace`] (the trace context of
//! requests and changes, and the export of spans). A caller names the area and the
//! event: `telemetry::<area>::<what happened>(..)` (`telemetry::dual::pending_begun()`,
//! `telemetry::remote::refresh_failed(..)`). Each area keeps its metrics in one `METRICS`
//! struct whose fields are the exported names without `ankusa_<area>_` and `_total`.
//!
//! This file holds what the areas share: the process-wide Prometheus registry (prefix
//! `ankusa_`, served at `/metrics` by [`render`]), the one registration helper each metric
//! definition goes through (`counter`, `counter_vec`, `gauge`, ...) and the log subscriber
//! ([`init_logging`]). Each area's `METRICS` is a `LazyLock`, registered on its first
//! event, so a metric appears in `/metrics` once its area has something to say; the trail's
//! own appear from the start ([`render`] registers them).
//!
//! Labels are low-cardinality (a result, a reason, a sink's or a kind's name), never a
//! tenant or a resource.
//!
//! The sinks crate (`ankusa-sinks`) has no metrics of its own, only `tracing` events (its
//! `telemetry.rs`). Dependencies point one way, so it cannot use this registry; and it needs
//! none: every outcome of a sink returns to the publisher, which counts it here, in
//! [`lifecycle`]. One registry and one helper stay in one crate, with no metrics crate
//! between the two.

pub mod api;
pub mod audit;
#[cfg(test)]
mod deploy;
pub mod dual;
pub mod follow;
pub mod lifecycle;
pub mod node;
pub mod remote;
pub mod trace;
pub mod watch;

use std::sync::LazyLock;

use prometheus::core::Collector;
use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// The node's one registry: every metric is in it, named `ankusa_<area>_...`.
static REGISTRY: LazyLock<Registry> =
    LazyLock::new(|| Registry::new_custom(Some("ankusa".into()), None).expect("valid prefix"));

/// The metrics in Prometheus text format.
pub fn render() -> String {
    audit::register_trail();
    let mut out = Vec::new();
    let families = REGISTRY.gather();
    if TextEncoder::new().encode(&families, &mut out).is_err() {
        return String::new();
    }
    String::from_utf8(out).unwrap_or_default()
}

/// Install the `tracing` subscriber: `level` is an env-filter directive (`RUST_LOG`
/// overrides it), `json` picks JSON lines over text. Logs go to stderr, coloured only when
/// it is a terminal: a file, a pipe or journald gets plain text. With `tracer`, the node's
/// own spans (target `ankusa`, info and up, whatever the log level) also become its
/// OpenTelemetry spans ([`trace::Tracing::layer`]).
pub fn init_logging(level: &str, json: bool, tracer: Option<&trace::Tracing>) {
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let fmt = if json {
        fmt.json().with_filter(filter).boxed()
    } else {
        fmt.with_filter(filter).boxed()
    };
    // Its own filter: a quiet log level must not cut a request's span out of its trace.
    let spans = tracer.map(|t| {
        let targets =
            tracing_subscriber::filter::Targets::new().with_target("ankusa", tracing::Level::INFO);
        t.layer().with_filter(targets)
    });
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(spans)
        .try_init();
}

/// A counter.
fn counter(name: &str, help: &str) -> IntCounter {
    register(IntCounter::new(name, help))
}

/// A counter per value of `labels`.
fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    register(IntCounterVec::new(Opts::new(name, help), labels))
}

/// An integer gauge.
fn gauge(name: &str, help: &str) -> IntGauge {
    register(IntGauge::new(name, help))
}

/// An integer gauge per value of `labels`.
fn gauge_vec(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    register(IntGaugeVec::new(Opts::new(name, help), labels))
}

/// A gauge of a fraction (seconds).
fn float_gauge(name: &str, help: &str) -> Gauge {
    register(Gauge::new(name, help))
}

/// A histogram with `buckets`.
fn histogram(name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
    register(Histogram::with_opts(
        HistogramOpts::new(name, help).buckets(buckets),
    ))
}

/// A histogram with `buckets` per value of `labels`.
fn histogram_vec(name: &str, help: &str, labels: &[&str], buckets: Vec<f64>) -> HistogramVec {
    register(HistogramVec::new(
        HistogramOpts::new(name, help).buckets(buckets),
        labels,
    ))
}

/// `count` buckets from `start`, each `factor` times the last.
fn exponential_buckets(start: f64, factor: f64, count: usize) -> Vec<f64> {
    prometheus::exponential_buckets(start, factor, count).expect("valid buckets")
}

/// The one registration: a metric's name and help are constants of this module, so an
/// invalid one is a bug the tests meet first. A name registered twice is logged, not fatal:
/// telemetry never stops the node.
fn register<M: Collector + Clone + 'static>(metric: prometheus::Result<M>) -> M {
    let metric = metric.expect("valid metric");
    if let Err(e) = REGISTRY.register(Box::new(metric.clone())) {
        tracing::warn!(error = %e, "metric not registered");
    }
    metric
}

#[cfg(test)]
mod tests {
    /// Every metric the node exports with its labels, as dashboards and alerts know them
    /// (histograms also have `le`). A name here changes only with the operators' runbook.
    const METRICS: [&str; 46] = [
        "ankusa_api_connections_closed_total{reason}",
        "ankusa_audit_ceiling{ceiling}",
        "ankusa_audit_checkpoint_size",
        "ankusa_audit_checkpoints_total",
        "ankusa_audit_clock_jumps_total{direction}",
        "ankusa_audit_dual_write_seconds{stage}",
        "ankusa_audit_group_commit_seconds",
        "ankusa_audit_group_commits_total",
        "ankusa_audit_group_rows",
        "ankusa_audit_outbox_backlog",
        "ankusa_audit_pending_abandoned_total",
        "ankusa_audit_pending_begun_total",
        "ankusa_audit_pending_refreshed_total",
        "ankusa_audit_pending_settled_total{by,result}",
        "ankusa_audit_pruned_rows_total{reason}",
        "ankusa_audit_refused_total{reason}",
        "ankusa_audit_retention_blocked_by_cursor",
        "ankusa_audit_retention_sweep_seconds",
        "ankusa_audit_rows_total{result}",
        "ankusa_audit_settlement_unreadable_total",
        "ankusa_audit_usage_bytes",
        "ankusa_audit_usage_recounts_total{reason}",
        "ankusa_audit_usage_rows",
        "ankusa_audit_write_errors_total",
        "ankusa_lifecycle_confirmed_seconds{sink}",
        "ankusa_lifecycle_dead_lettered_total{sink}",
        "ankusa_lifecycle_dead_letters{sink}",
        "ankusa_lifecycle_delivered_total{sink}",
        "ankusa_lifecycle_delivery_seconds{sink}",
        "ankusa_lifecycle_errors_total{kind,sink}",
        "ankusa_lifecycle_retries_total{sink}",
        "ankusa_lifecycle_sink_lag_seconds{sink}",
        "ankusa_lifecycle_sink_position{sink}",
        "ankusa_lifecycle_sink_state{sink,state}",
        "ankusa_lifecycle_watch_events_total",
        "ankusa_lifecycle_watch_lag_seqs",
        "ankusa_lifecycle_watch_refused_total",
        "ankusa_lifecycle_watchers",
        "ankusa_remote_drift_failures_total{kind}",
        "ankusa_remote_drift_scanned_total{kind}",
        "ankusa_remote_drift_total{kind}",
        "ankusa_remote_refresh_checked_total{kind}",
        "ankusa_remote_refresh_failures_total{kind}",
        "ankusa_remote_refresh_held_changes_total{kind}",
        "ankusa_remote_refresh_rows_total{kind}",
        "ankusa_remote_store_losses_total{kind}",
    ];

    /// A metric family as `name{label,...}`, its labels as exported (sorted).
    fn with_labels(family: &prometheus::proto::MetricFamily) -> String {
        let name = family.name();
        let labels: Vec<&str> = family.get_metric()[0]
            .get_label()
            .iter()
            .map(|l| l.name())
            .collect();
        if labels.is_empty() {
            name.to_owned()
        } else {
            format!("{name}{{{}}}", labels.join(","))
        }
    }

    #[test]
    fn every_metric_keeps_its_exported_name_and_labels() {
        super::api::touch_every_metric();
        super::audit::touch_every_metric();
        super::dual::touch_every_metric();
        super::lifecycle::touch_every_metric();
        super::remote::touch_every_metric();
        super::watch::touch_every_metric();
        let rendered = super::render();
        let mut names: Vec<&str> = rendered
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        names.sort_unstable();
        let expected: Vec<&str> = METRICS
            .iter()
            .map(|m| m.split('{').next().unwrap())
            .collect();
        assert_eq!(names, expected);
        let mut exported: Vec<String> = super::REGISTRY.gather().iter().map(with_labels).collect();
        exported.sort_unstable();
        assert_eq!(exported, METRICS);
    }
}
