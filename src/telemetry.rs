//! Named telemetry events: every log line and metric the node emits about its trail is
//! defined here, once, so that names stay consistent and no secret can slip into a field.
//!
//! Metrics live in one process-wide Prometheus registry and are served at `/metrics`.
//! Labels are low-cardinality (a result, a reason), never a tenant or a resource.

use std::sync::OnceLock;
use std::time::Duration;

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, Opts, Registry, TextEncoder,
};

use crate::audit::Row;
use crate::store::StoreError;

/// The node's metrics.
struct Metrics {
    registry: Registry,
    rows: IntCounterVec,
    groups: IntCounter,
    group_rows: Histogram,
    commit_seconds: Histogram,
    write_errors: IntCounter,
}

fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let registry = Registry::new_custom(Some("ankusa".into()), None).expect("valid prefix");
        let rows = IntCounterVec::new(
            Opts::new("audit_rows_total", "Audit rows committed, by result"),
            &["result"],
        )
        .expect("valid metric");
        let groups = IntCounter::new(
            "audit_group_commits_total",
            "Synced batches written by the audit writer",
        )
        .expect("valid metric");
        let group_rows = Histogram::with_opts(
            HistogramOpts::new("audit_group_rows", "Rows per group commit").buckets(vec![
                1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
            ]),
        )
        .expect("valid metric");
        let commit_seconds = Histogram::with_opts(
            HistogramOpts::new(
                "audit_group_commit_seconds",
                "Time to validate and sync one group",
            )
            .buckets(prometheus::exponential_buckets(0.0001, 2.0, 16).expect("valid buckets")),
        )
        .expect("valid metric");
        let write_errors = IntCounter::new(
            "audit_write_errors_total",
            "Group commits that could not be written (their changes were not made)",
        )
        .expect("valid metric");
        for m in [
            Box::new(rows.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(groups.clone()),
            Box::new(group_rows.clone()),
            Box::new(commit_seconds.clone()),
            Box::new(write_errors.clone()),
        ] {
            registry.register(m).expect("metric names are unique");
        }
        Metrics {
            registry,
            rows,
            groups,
            group_rows,
            commit_seconds,
            write_errors,
        }
    })
}

/// The spec's `[:ankusa, :audit]`: one event per committed row.
pub fn row_committed(row: &Row) {
    metrics()
        .rows
        .with_label_values(&[row.result.as_str()])
        .inc();
    tracing::info!(
        target: "ankusa::audit",
        seq = row.seq,
        action = %row.action,
        actor = %row.actor,
        resource = %row.resource,
        result = row.result.as_str(),
        publish = row.publish,
        "audit row committed"
    );
}

/// One synced group commit of `rows` rows took `elapsed`.
pub fn group_committed(rows: u64, elapsed: Duration) {
    let m = metrics();
    m.groups.inc();
    m.group_rows.observe(rows as f64);
    m.commit_seconds.observe(elapsed.as_secs_f64());
}

/// A group commit of `rows` rows could not be written; none of its changes were made.
pub fn write_failed(error: &StoreError, rows: u64) {
    metrics().write_errors.inc();
    tracing::error!(target: "ankusa::audit", error = %error, rows, "audit batch not written; changes refused");
}

/// The metrics in Prometheus text format.
pub fn render() -> String {
    let mut out = Vec::new();
    let families = metrics().registry.gather();
    if TextEncoder::new().encode(&families, &mut out).is_err() {
        return String::new();
    }
    String::from_utf8(out).unwrap_or_default()
}

/// Install the `tracing` subscriber: `level` is an env-filter directive (`RUST_LOG`
/// overrides it), `json` picks JSON lines over text. Logs go to stderr.
pub fn init_logging(level: &str, json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// Register a component's own collector (the lifecycle publisher keeps its metrics beside
/// it, in `lifecycle::metrics`) in the node's registry, so `/metrics` serves it too.
pub fn register(collector: Box<dyn prometheus::core::Collector>) {
    if let Err(e) = metrics().registry.register(collector) {
        tracing::warn!(error = %e, "metric not registered");
    }
}
