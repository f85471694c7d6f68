//! The audit trail's events (`ankusa_audit_*`, dual writes aside: [`super::dual`]): the
//! spec's `[:ankusa, :audit]` per committed row, the writer's group commits and failures,
//! the trail's usage, ceilings and refusals, the retention sweep (and the clock jumps it
//! finds) and the boot-time usage recount.
//!
//! These metrics are served from the start, before the first commit ([`register_trail`]).
//! Labels are fixed strings (a result, a reason, a ceiling's key); a log line names a seq,
//! an action, an actor or a resource, never a state or an entity.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{Gauge, Histogram, IntCounter, IntCounterVec, IntGauge, IntGaugeVec};

use super::{counter, counter_vec, exponential_buckets, float_gauge, gauge, gauge_vec, histogram};
use crate::audit::{Ceilings, Pruned, Row, SweepReport, Usage};
use crate::store::StoreError;

/// The writer's and the trail's metrics, served from the start ([`register_trail`]).
struct Metrics {
    rows: IntCounterVec,
    group_commits: IntCounter,
    group_rows: Histogram,
    group_commit_seconds: Histogram,
    write_errors: IntCounter,
    usage_rows: IntGauge,
    usage_bytes: IntGauge,
    outbox_backlog: IntGauge,
    ceiling: IntGaugeVec,
    pruned_rows: IntCounterVec,
    refused: IntCounterVec,
    retention_blocked_by_cursor: IntGauge,
    retention_sweep_seconds: Gauge,
    usage_recounts: IntCounterVec,
    clock_jumps: IntCounterVec,
    checkpoints: IntCounter,
    checkpoint_size: IntGauge,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    rows: counter_vec(
        "audit_rows_total",
        "Audit rows committed, by result",
        &["result"],
    ),
    group_commits: counter(
        "audit_group_commits_total",
        "Synced batches written by the audit writer",
    ),
    group_rows: histogram(
        "audit_group_rows",
        "Rows per group commit",
        vec![
            1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
        ],
    ),
    group_commit_seconds: histogram(
        "audit_group_commit_seconds",
        "Time to validate and sync one group",
        exponential_buckets(0.0001, 2.0, 16),
    ),
    write_errors: counter(
        "audit_write_errors_total",
        "Group commits that could not be written (their changes were not made)",
    ),
    usage_rows: gauge(
        "audit_usage_rows",
        "Rows in the audit trail (m:audit_usage)",
    ),
    usage_bytes: gauge(
        "audit_usage_bytes",
        "Bytes of the audit trail's rows and outbox entities (m:audit_usage)",
    ),
    outbox_backlog: gauge(
        "audit_outbox_backlog",
        "Rows committed after the lifecycle cursor (m:audit_seq minus it)",
    ),
    ceiling: gauge_vec(
        "audit_ceiling",
        "Configured ceilings of the audit trail",
        &["ceiling"],
    ),
    pruned_rows: counter_vec(
        "audit_pruned_rows_total",
        "Audit rows deleted, by reason (retention, ceiling)",
        &["reason"],
    ),
    refused: counter_vec(
        "audit_refused_total",
        "Changes refused with audit_backlog, by limit (backlog, ceiling)",
        &["reason"],
    ),
    retention_blocked_by_cursor: gauge(
        "audit_retention_blocked_by_cursor",
        "Expired rows the last sweep kept because a lifecycle sink has not confirmed them",
    ),
    retention_sweep_seconds: float_gauge(
        "audit_retention_sweep_seconds",
        "Duration of the last retention sweep",
    ),
    usage_recounts: counter_vec(
        "audit_usage_recounts_total",
        "Boot-time recounts of m:audit_usage, by why it was not believed",
        &["reason"],
    ),
    clock_jumps: counter_vec(
        "audit_clock_jumps_total",
        "Retention sweeps that found the clock far ahead of the trail's time or behind it",
        &["direction"],
    ),
    checkpoints: counter(
        "audit_checkpoints_total",
        "Checkpoints of the audit trail's Merkle tree signed",
    ),
    checkpoint_size: gauge(
        "audit_checkpoint_size",
        "Rows (tree leaves) the newest signed checkpoint covers",
    ),
});

/// Register the trail's metrics, so `/metrics` serves them before the first commit. The
/// counters alerts watch start at 0 for each of their labels' values: a series first seen
/// at 1 has no increase, so its first event would go unnoticed.
pub(super) fn register_trail() {
    let m = LazyLock::force(&METRICS);
    for result in ["ok", "failed", "interrupted"] {
        m.rows.with_label_values(&[result]);
    }
    for reason in ["retention", "ceiling"] {
        m.pruned_rows.with_label_values(&[reason]);
    }
    for reason in ["backlog", "ceiling"] {
        m.refused.with_label_values(&[reason]);
    }
    for direction in ["ahead", "behind"] {
        m.clock_jumps.with_label_values(&[direction]);
    }
}

/// The spec's `[:ankusa, :audit]`: one event per committed row.
pub fn row_committed(row: &Row) {
    METRICS.rows.with_label_values(&[row.result.as_str()]).inc();
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
    METRICS.group_commits.inc();
    METRICS.group_rows.observe(rows as f64);
    METRICS.group_commit_seconds.observe(elapsed.as_secs_f64());
}

/// A group commit of `rows` rows could not be written; none of its changes were made.
pub fn write_failed(error: &StoreError, rows: u64) {
    METRICS.write_errors.inc();
    tracing::error!(target: "ankusa::audit", error = %error, rows, "audit batch not written; changes refused");
}

/// The trail's usage and outbox backlog after a group commit.
pub fn usage_updated(usage: &Usage, backlog: u64) {
    METRICS.usage_rows.set(gauge_value(usage.rows));
    METRICS.usage_bytes.set(gauge_value(usage.bytes));
    METRICS.outbox_backlog.set(gauge_value(backlog));
}

/// The configured ceilings, at start.
pub fn ceilings_configured(c: &Ceilings) {
    let m = &METRICS.ceiling;
    m.with_label_values(&["max_rows"])
        .set(gauge_value(c.max_rows));
    m.with_label_values(&["max_bytes"])
        .set(gauge_value(c.max_bytes));
    m.with_label_values(&["outbox_max_backlog"])
        .set(gauge_value(c.outbox_max_backlog));
}

/// A checkpoint row `seq`, of the tree of `size` leaves, was written.
pub fn checkpoint_signed(seq: u64, size: u64) {
    METRICS.checkpoints.inc();
    METRICS.checkpoint_size.set(size as i64);
    tracing::debug!(target: "ankusa::audit", seq, size, "audit checkpoint signed");
}

/// Rows one group commit deleted. Ceiling prunes happen in the commit path, so their event
/// (the spec's `[:ankusa, :audit, :pruned]`, reason "ceiling") is at debug level; the
/// retention sweep reports its own once per sweep ([`retention_swept`]).
pub fn rows_pruned(pruned: &Pruned) {
    let m = &METRICS.pruned_rows;
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
    METRICS.refused.with_label_values(&[reason]).inc();
    tracing::debug!(target: "ankusa::audit", reason, "change refused: audit_backlog");
}

/// A whole retention sweep finished: the spec's `[:ankusa, :audit, :pruned]` (reason
/// "retention") and `[:ankusa, :audit, :retention]` (`blocked_by_cursor`).
pub fn retention_swept(report: &SweepReport) {
    METRICS
        .retention_blocked_by_cursor
        .set(gauge_value(report.blocked_by_cursor));
    METRICS
        .retention_sweep_seconds
        .set(report.elapsed.as_secs_f64());
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

/// A retention sweep found the clock (`now`) far from the trail's time (`trail_at`: its
/// newest row or its last sweep): `direction` "ahead" or "behind", by `jump_ms`. The sweep
/// expires nothing within the retention of the newest row either way.
pub fn clock_jumped(direction: &'static str, jump_ms: u64, now: u64, trail_at: u64) {
    METRICS.clock_jumps.with_label_values(&[direction]).inc();
    tracing::warn!(
        target: "ankusa::audit",
        direction,
        jump_ms,
        now,
        trail_at,
        "audit clock jump: the clock is far from the trail's time; retention keeps every row \
         within the retention of the newest one"
    );
}

/// At boot, `m:audit_usage` was not believed (`reason`): the trail is being recounted.
pub fn usage_recount_started(reason: &'static str, seq: u64) {
    tracing::warn!(target: "ankusa::audit", reason, seq, "m:audit_usage does not match the trail; recounting");
}

/// The recount finished.
pub fn usage_recounted(reason: &'static str, usage: &Usage, elapsed: Duration) {
    METRICS.usage_recounts.with_label_values(&[reason]).inc();
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

/// Give every metric of the area a value, so the registry renders each.
#[cfg(test)]
pub(super) fn touch_every_metric() {
    let t = &*METRICS;
    t.rows.with_label_values(&["ok"]).inc();
    t.group_commits.inc();
    t.group_rows.observe(1.0);
    t.group_commit_seconds.observe(0.001);
    t.write_errors.inc();
    t.usage_rows.set(1);
    t.usage_bytes.set(1);
    t.outbox_backlog.set(1);
    t.ceiling.with_label_values(&["max_rows"]).set(1);
    t.pruned_rows.with_label_values(&["ceiling"]).inc();
    t.refused.with_label_values(&["backlog"]).inc();
    t.retention_blocked_by_cursor.set(1);
    t.retention_sweep_seconds.set(0.001);
    t.usage_recounts.with_label_values(&["missing"]).inc();
    t.clock_jumps.with_label_values(&["ahead"]).inc();
}

/// The audit syncer thread panicked.
pub fn syncer_panicked() {
    tracing::error!(target: "ankusa::audit", "the audit syncer thread panicked");
}

/// The audit syncer thread is gone: the writer stops too.
pub fn syncer_stopped() {
    tracing::error!(target: "ankusa::audit", "the audit syncer thread stopped; the writer stops too");
}

/// Flushing the memtables at shutdown failed (the WAL has every commit).
pub fn flush_failed(error: &StoreError) {
    tracing::warn!(target: "ankusa::audit", error = %error, "flushing the store at shutdown failed; the WAL has every commit");
}

/// A change's own code panicked while it was validated: nothing of it is written.
pub fn change_panicked() {
    tracing::error!(target: "ankusa::audit", "a change panicked while being validated; not written");
}

/// A change's own code met a store error while it was validated.
pub fn validation_failed(error: &StoreError) {
    tracing::error!(target: "ankusa::audit", error = %error, "store error while validating a change");
}

/// The oldest rows could not be read to make room for a row: a bounded change is not
/// taken; any other is recorded `over` the ceiling.
pub fn room_unreadable(error: &StoreError, over: bool) {
    if over {
        tracing::warn!(target: "ankusa::audit", error = %error, "reading the oldest rows failed; recording over the ceiling");
    } else {
        tracing::error!(target: "ankusa::audit", error = %error, "reading the oldest rows failed; change not taken");
    }
}

/// A restored store opened its new incarnation `id` from seq `from`.
pub fn incarnation_opened(id: uuid::Uuid, from: u64, restored_seq: u64, backup_id: Option<u32>) {
    tracing::warn!(target: "ankusa::audit", incarnation = %id, from, restored_seq, backup_id, "restored store: opened a new incarnation");
}

/// The audit tree lacks rows retention pruned: it starts again at row `from`.
pub fn tree_restarted(from: u64) {
    tracing::warn!(target: "ankusa::audit", from, "the audit tree lacks pruned rows: it starts again at the oldest retained row");
}

/// The tree's inner nodes below 16 rows were deleted (`deleted` keys).
pub fn tree_thinned(deleted: u64, elapsed: Duration) {
    tracing::info!(target: "ankusa::audit", deleted, elapsed_ms = elapsed.as_millis() as u64, "the audit tree keeps its leaves and its subtrees of 16 rows or more");
}

/// The tree's leaves were put into `tiles` tiles.
pub fn tree_tiled(tiles: u64, elapsed: Duration) {
    tracing::info!(target: "ankusa::audit", tiles, elapsed_ms = elapsed.as_millis() as u64, "the audit tree keeps its leaves in tiles of 16");
}

/// The tree is catching up with the trail's rows `from..=to`.
pub fn tree_catching_up(from: u64, to: u64) {
    tracing::info!(target: "ankusa::audit", from, to, "adding the trail's rows to the audit tree");
}

/// The tree caught up: `rows` added.
pub fn tree_caught_up(rows: u64, elapsed: Duration) {
    tracing::info!(target: "ankusa::audit", rows, elapsed_ms = elapsed.as_millis() as u64, "the audit tree holds every row");
}

/// The checkpoint timer's checkpoint could not be signed.
pub fn checkpoint_failed(error: &dyn std::fmt::Display) {
    tracing::warn!(target: "ankusa::audit", error = %error, "checkpoint not signed");
}

/// A boot building the rows' index entries has read `rows` rows so far.
pub fn index_building(rows: u64) {
    tracing::info!(target: "ankusa::audit", rows, "building the trail's index entries (a store written before them)");
}

/// The rows' index entries are built: `rows` rows.
pub fn index_built(rows: u64, elapsed: Duration) {
    tracing::info!(target: "ankusa::audit", rows, elapsed_ms = elapsed.as_millis() as u64, "the trail's index entries are built");
}
