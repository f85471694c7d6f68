//! Named telemetry events: every log line and metric the node emits about its trail is
//! defined here, once, so that names stay consistent and no secret can slip into a field.
//!
//! Metrics live in one process-wide Prometheus registry and are served at `/metrics`.
//! Labels are low-cardinality (a result, a reason), never a tenant or a resource.

use std::sync::OnceLock;
use std::time::Duration;

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry, TextEncoder,
};

use crate::audit::{Ceilings, Pruned, Row, SweepReport, Usage};
use crate::store::StoreError;

/// The node's metrics.
struct Metrics {
    registry: Registry,
    rows: IntCounterVec,
    groups: IntCounter,
    group_rows: Histogram,
    commit_seconds: Histogram,
    write_errors: IntCounter,
    trail: TrailMetrics,
}

/// Usage, ceilings, pruning and refusals of the trail.
struct TrailMetrics {
    usage_rows: IntGauge,
    usage_bytes: IntGauge,
    backlog: IntGauge,
    ceilings: IntGaugeVec,
    pruned: IntCounterVec,
    refused: IntCounterVec,
    blocked_by_cursor: IntGauge,
    sweep_seconds: Gauge,
    recounts: IntCounterVec,
}

impl TrailMetrics {
    fn new() -> TrailMetrics {
        let gauge = |name: &str, help: &str| IntGauge::new(name, help).expect("valid metric");
        let counters = |name: &str, help: &str, label: &str| {
            IntCounterVec::new(Opts::new(name, help), &[label]).expect("valid metric")
        };
        TrailMetrics {
            usage_rows: gauge(
                "audit_usage_rows",
                "Rows in the audit trail (m:audit_usage)",
            ),
            usage_bytes: gauge(
                "audit_usage_bytes",
                "Bytes of the audit trail's rows and outbox entities (m:audit_usage)",
            ),
            backlog: gauge(
                "audit_outbox_backlog",
                "Rows committed after the lifecycle cursor (m:audit_seq minus it)",
            ),
            ceilings: IntGaugeVec::new(
                Opts::new("audit_ceiling", "Configured ceilings of the audit trail"),
                &["ceiling"],
            )
            .expect("valid metric"),
            pruned: counters(
                "audit_pruned_rows_total",
                "Audit rows deleted, by reason (retention, ceiling)",
                "reason",
            ),
            refused: counters(
                "audit_refused_total",
                "Changes refused with audit_backlog, by limit (backlog, ceiling)",
                "reason",
            ),
            blocked_by_cursor: gauge(
                "audit_retention_blocked_by_cursor",
                "Expired rows the last sweep kept because a lifecycle sink has not confirmed them",
            ),
            sweep_seconds: Gauge::new(
                "audit_retention_sweep_seconds",
                "Duration of the last retention sweep",
            )
            .expect("valid metric"),
            recounts: counters(
                "audit_usage_recounts_total",
                "Boot-time recounts of m:audit_usage, by why it was not believed",
                "reason",
            ),
        }
    }

    fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.usage_rows.clone()),
            Box::new(self.usage_bytes.clone()),
            Box::new(self.backlog.clone()),
            Box::new(self.ceilings.clone()),
            Box::new(self.pruned.clone()),
            Box::new(self.refused.clone()),
            Box::new(self.blocked_by_cursor.clone()),
            Box::new(self.sweep_seconds.clone()),
            Box::new(self.recounts.clone()),
        ]
    }
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
        let trail = TrailMetrics::new();
        for m in trail.collectors() {
            registry.register(m).expect("metric names are unique");
        }
        Metrics {
            registry,
            rows,
            groups,
            group_rows,
            commit_seconds,
            write_errors,
            trail,
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

/// The trail's usage and outbox backlog after a group commit.
pub fn trail_usage(usage: &Usage, backlog: u64) {
    let m = &metrics().trail;
    m.usage_rows.set(gauge_value(usage.rows));
    m.usage_bytes.set(gauge_value(usage.bytes));
    m.backlog.set(gauge_value(backlog));
}

/// The configured ceilings, at start.
pub fn ceilings(c: &Ceilings) {
    let m = &metrics().trail.ceilings;
    m.with_label_values(&["max_rows"])
        .set(gauge_value(c.max_rows));
    m.with_label_values(&["max_bytes"])
        .set(gauge_value(c.max_bytes));
    m.with_label_values(&["outbox_max_backlog"])
        .set(gauge_value(c.outbox_max_backlog));
}

/// Rows one group commit deleted. Ceiling prunes happen in the commit path, so their event
/// (the spec's `[:ankusa, :audit, :pruned]`, reason "ceiling") is at debug level; the
/// retention sweep reports its own once per sweep ([`retention_swept`]).
pub fn rows_pruned(pruned: &Pruned) {
    let m = &metrics().trail.pruned;
    if pruned.ceiling > 0 {
        m.with_label_values(&["ceiling"]).inc_by(pruned.ceiling);
        tracing::debug!(
            target: "ankusa::audit",
            event = "[:ankusa, :audit, :pruned]",
            reason = "ceiling",
            pruned = pruned.ceiling,
            "audit rows pruned to make room under the ceilings"
        );
    }
    if pruned.retention > 0 {
        m.with_label_values(&["retention"]).inc_by(pruned.retention);
    }
}

/// A change was refused with `AuditBacklog`: `reason` is "backlog" or "ceiling".
pub fn change_refused(reason: &'static str) {
    metrics().trail.refused.with_label_values(&[reason]).inc();
    tracing::debug!(target: "ankusa::audit", reason, "change refused: audit_backlog");
}

/// A whole retention sweep finished: the spec's `[:ankusa, :audit, :pruned]` (reason
/// "retention") and `[:ankusa, :audit, :retention]` (`blocked_by_cursor`).
pub fn retention_swept(report: &SweepReport) {
    let m = &metrics().trail;
    m.blocked_by_cursor
        .set(gauge_value(report.blocked_by_cursor));
    m.sweep_seconds.set(report.elapsed.as_secs_f64());
    tracing::info!(
        target: "ankusa::audit",
        event = "[:ankusa, :audit, :pruned]",
        reason = "retention",
        pruned = report.pruned,
        bytes = report.bytes,
        batches = report.batches,
        elapsed_ms = report.elapsed.as_millis() as u64,
        compaction_ms = report.compaction.as_millis() as u64,
        "audit retention sweep pruned rows"
    );
    tracing::info!(
        target: "ankusa::audit",
        event = "[:ankusa, :audit, :retention]",
        blocked_by_cursor = report.blocked_by_cursor,
        cursor = report.cursor,
        cutoff = report.cutoff,
        "audit retention sweep done"
    );
}

/// A retention sweep failed; the next interval tries again.
pub fn retention_failed(error: &StoreError) {
    tracing::warn!(target: "ankusa::audit", error = %error, "audit retention sweep failed; retrying at the next interval");
}

/// At boot, `m:audit_usage` was not believed (`reason`): the trail is being recounted.
pub fn usage_recount_started(reason: &'static str, seq: u64) {
    tracing::warn!(target: "ankusa::audit", reason, seq, "m:audit_usage does not match the trail; recounting");
}

/// The recount finished.
pub fn usage_recounted(reason: &'static str, usage: &Usage, elapsed: Duration) {
    metrics().trail.recounts.with_label_values(&[reason]).inc();
    tracing::warn!(
        target: "ankusa::audit",
        reason,
        rows = usage.rows,
        bytes = usage.bytes,
        elapsed_ms = elapsed.as_millis() as u64,
        "m:audit_usage recounted"
    );
}

/// A u64 figure as an integer gauge value (saturating: gauges are i64).
fn gauge_value(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
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
/// overrides it), `json` picks JSON lines over text. Logs go to stderr, coloured only when
/// it is a terminal: a file, a pipe or journald gets plain text.
pub fn init_logging(level: &str, json: bool) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
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
