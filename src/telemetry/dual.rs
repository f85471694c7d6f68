//! The telemetry of dual writes (`ankusa_audit_pending_*`, `ankusa_audit_settlement_*`,
//! `ankusa_audit_dual_write_seconds`): pending rows begun, finished by their caller, abandoned
//! (a `Pending` dropped unfinished) and settled by reconcile, the retries of a subject store
//! that settlement cannot read, and the time a dual write spends in each of its stages.
//!
//! Their metrics are registered at the first dual write. Labels are fixed strings (how it
//! was settled, the row's result); a log line names a resource, never a state or an entity.

use std::fmt::Display;
use std::future::Future;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use prometheus::{Histogram, IntCounter, IntCounterVec};

use super::{counter, counter_vec, exponential_buckets, histogram_vec};
use crate::audit::Settled;

/// Dual writes' metrics, registered at the first dual write.
struct Metrics {
    pending_begun: IntCounter,
    pending_settled: IntCounterVec,
    pending_refreshed: IntCounter,
    pending_abandoned: IntCounter,
    settlement_unreadable: IntCounter,
    /// `ankusa_audit_dual_write_seconds`, one child per [`Stage`], in [`Stage::ALL`]'s order.
    stage_seconds: [Histogram; 4],
}

/// The stages of a dual write, in the order a change goes through them. Each is a wait: the
/// rate of a client with one change in flight is one over their sum (and what comes around
/// them: the request, the answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The subject store's read the change starts from (its state before).
    Read,
    /// The pending row: from asking the writer for it to its being synced.
    Begin,
    /// The subject store's write (its compare-and-set).
    Store,
    /// The row: from asking the writer for it to its being synced.
    Finish,
}

impl Stage {
    /// Every stage, in order.
    pub const ALL: [Stage; 4] = [Stage::Read, Stage::Begin, Stage::Store, Stage::Finish];

    /// Its `stage` label.
    pub fn label(self) -> &'static str {
        match self {
            Stage::Read => "read",
            Stage::Begin => "begin",
            Stage::Store => "store",
            Stage::Finish => "finish",
        }
    }
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
    stage_seconds: {
        let seconds = histogram_vec(
            "audit_dual_write_seconds",
            "Time dual writes spend in each stage: the subject store's read and write, and the waits for the pending row and the row to be synced",
            &["stage"],
            exponential_buckets(0.00005, 2.0, 16),
        );
        // Resolved once: a change observes four of them.
        Stage::ALL.map(|stage| seconds.with_label_values(&[stage.label()]))
    },
});

/// Run `work`, the part of a dual write that is `stage`, and count the time it took.
pub(crate) async fn timed<T>(stage: Stage, work: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let out = work.await;
    METRICS.stage_seconds[stage as usize].observe(started.elapsed().as_secs_f64());
    out
}

/// The time dual writes have spent in `stage` since the node started, in seconds, and how many
/// did: `ankusa_audit_dual_write_seconds`'s sum and count, read without rendering the registry.
pub fn stage_total(stage: Stage) -> (f64, u64) {
    let h = &METRICS.stage_seconds[stage as usize];
    (h.get_sample_sum(), h.get_sample_count())
}

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
    d.stage_seconds[0].observe(0.001);
}

/// A dual write's finish could not be written: settlement records the change.
pub fn finish_failed(error: &dyn std::fmt::Display) {
    tracing::error!(target: "ankusa::audit", error = %error, "finishing a dual write failed; settlement will record it");
}

/// A dual write's task failed: settlement records the change.
pub fn task_failed(error: &dyn std::fmt::Display) {
    tracing::error!(target: "ankusa::audit", error = %error, "a dual write's task failed; settlement records it");
}

/// The subject store's write of `resource` failed: it may or may not have landed, and
/// settlement reads the subject back.
pub fn store_write_failed(resource: &str, error: &dyn std::fmt::Display) {
    tracing::warn!(target: "ankusa::audit", error = %error, resource, "remote store write failed; settling by reconcile");
}
