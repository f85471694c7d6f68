//! The telemetry of dual writes (`ankusa_audit_pending_*`, `ankusa_audit_settlement_*`):
//! pending rows begun, finished by their caller, abandoned (a `Pending` dropped unfinished)
//! and settled by reconcile, and the retries of a subject store that settlement cannot read.
//!
//! Their metrics are registered at the first dual write. Labels are fixed strings (how it
//! was settled, the row's result); a log line names a resource, never a state or an entity.

use std::fmt::Display;
use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{IntCounter, IntCounterVec};

use super::{counter, counter_vec};
use crate::audit::Settled;

/// Dual writes' metrics, registered at the first dual write.
struct Metrics {
    pending_begun: IntCounter,
    pending_settled: IntCounterVec,
    pending_refreshed: IntCounter,
    pending_abandoned: IntCounter,
    settlement_unreadable: IntCounter,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    pending_begun: counter(
        "audit_pending_begun_total",
        "Dual writes begun (pending rows written)",
    ),
    pending_settled: counter_vec(
        "audit_pending_settled_total",
        "Pending rows moved into the trail, by how (finish, reconcile) and result",
        &["by", "result"],
    ),
    pending_refreshed: counter(
        "audit_pending_refreshed_total",
        "Pending rows settled interrupted with a state-refresh event",
    ),
    pending_abandoned: counter(
        "audit_pending_abandoned_total",
        "Dual writes dropped unfinished by their caller (settled by reconcile)",
    ),
    settlement_unreadable: counter(
        "audit_settlement_unreadable_total",
        "Attempts to read a subject's store for settlement that failed",
    ),
});

/// A pending row was written.
pub(crate) fn pending_begun() {
    METRICS.pending_begun.inc();
}

/// Its caller finished a dual write.
pub(crate) fn pending_finished(s: &Settled) {
    METRICS
        .pending_settled
        .with_label_values(&["finish", s.result.as_str()])
        .inc();
}

/// A dual write was dropped unfinished; settlement takes it.
pub(crate) fn pending_abandoned(id: u64, resource: &str) {
    METRICS.pending_abandoned.inc();
    tracing::warn!(target: "ankusa::audit", pending = id, resource = %resource, "dual write dropped unfinished; settling it");
}

/// Settlement found pending rows a crash left.
pub(crate) fn pending_left_by_crash(rows: usize) {
    tracing::info!(target: "ankusa::audit", rows, "settling pending rows left by a crash");
}

/// Settlement moved pending row `id` into the trail.
pub(crate) fn pending_reconciled(id: u64, s: &Settled) {
    let m = &*METRICS;
    m.pending_settled
        .with_label_values(&["reconcile", s.result.as_str()])
        .inc();
    if s.refresh {
        m.pending_refreshed.inc();
    }
    tracing::info!(target: "ankusa::audit", pending = id, seq = s.seq, result = s.result.as_str(), refresh = s.refresh, "pending row settled");
}

/// The subject store of pending row `id` could not be read (`last`: the window is over and
/// the row settles `interrupted`).
pub(crate) fn settlement_unreadable(id: u64, why: &str, last: bool) {
    METRICS.settlement_unreadable.inc();
    if last {
        tracing::warn!(target: "ankusa::audit", pending = id, reason = %why, "subject store unreadable for the whole settlement window; settling interrupted");
    } else {
        tracing::debug!(target: "ankusa::audit", pending = id, reason = %why, "subject store unreadable; retrying");
    }
}

/// Pending row `id` (or the scan for them) could not be read or settled now: it is tried
/// again after `retry`, or (`None`) left for the next boot.
pub(crate) fn settlement_failed(id: Option<u64>, error: &dyn Display, retry: Option<Duration>) {
    match retry {
        Some(after) => {
            tracing::warn!(target: "ankusa::audit", pending = id, error = %error, retry_in = ?after, "settling a pending row failed; trying again")
        }
        None => {
            tracing::error!(target: "ankusa::audit", pending = id, error = %error, "settling pending rows failed; they are settled at the next boot")
        }
    }
}

/// Give every metric of the area a value, so the registry renders each.
#[cfg(test)]
pub(super) fn touch_every_metric() {
    let d = &*METRICS;
    d.pending_begun.inc();
    d.pending_settled.with_label_values(&["finish", "ok"]).inc();
    d.pending_refreshed.inc();
    d.pending_abandoned.inc();
    d.settlement_unreadable.inc();
}
