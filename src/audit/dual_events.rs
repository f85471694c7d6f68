//! The telemetry of dual writes, defined once: pending rows begun, finished by their caller,
//! abandoned (a `Pending` dropped unfinished) and settled by reconcile, and the retries of a
//! subject store that settlement cannot read. Labels are fixed strings (how it was settled,
//! the row's result); a log line names a resource, never a state or an entity.

use std::sync::OnceLock;

use prometheus::{IntCounter, IntCounterVec, Opts};

use crate::audit::Settled;
use crate::telemetry;

struct Metrics {
    begun: IntCounter,
    settled: IntCounterVec,
    refreshed: IntCounter,
    abandoned: IntCounter,
    unreadable: IntCounter,
}

fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let counter = |name: &str, help: &str| {
            let c = IntCounter::new(name, help).expect("valid metric");
            telemetry::register(Box::new(c.clone()));
            c
        };
        let settled = IntCounterVec::new(
            Opts::new(
                "audit_pending_settled_total",
                "Pending rows moved into the trail, by how (finish, reconcile) and result",
            ),
            &["by", "result"],
        )
        .expect("valid metric");
        telemetry::register(Box::new(settled.clone()));
        Metrics {
            begun: counter(
                "audit_pending_begun_total",
                "Dual writes begun (pending rows written)",
            ),
            settled,
            refreshed: counter(
                "audit_pending_refreshed_total",
                "Pending rows settled interrupted with a state-refresh event",
            ),
            abandoned: counter(
                "audit_pending_abandoned_total",
                "Dual writes dropped unfinished by their caller (settled by reconcile)",
            ),
            unreadable: counter(
                "audit_settlement_unreadable_total",
                "Attempts to read a subject's store for settlement that failed",
            ),
        }
    })
}

/// A pending row was written.
pub(crate) fn begun() {
    metrics().begun.inc();
}

/// Its caller finished a dual write.
pub(crate) fn finished(s: &Settled) {
    metrics()
        .settled
        .with_label_values(&["finish", s.result.as_str()])
        .inc();
}

/// A dual write was dropped unfinished; settlement takes it.
pub(crate) fn abandoned(id: u64, resource: &str) {
    metrics().abandoned.inc();
    tracing::warn!(target: "ankusa::audit", pending = id, resource = %resource, "dual write dropped unfinished; settling it");
}

/// Settlement found pending rows a crash left.
pub(crate) fn left_by_crash(rows: usize) {
    tracing::info!(target: "ankusa::audit", rows, "settling pending rows left by a crash");
}

/// Settlement moved pending row `id` into the trail.
pub(crate) fn reconciled(id: u64, s: &Settled) {
    let m = metrics();
    m.settled
        .with_label_values(&["reconcile", s.result.as_str()])
        .inc();
    if s.refresh {
        m.refreshed.inc();
    }
    tracing::info!(target: "ankusa::audit", pending = id, seq = s.seq, result = s.result.as_str(), refresh = s.refresh, "pending row settled");
}

/// The subject store of pending row `id` could not be read (`last`: the window is over and
/// the row settles `interrupted`).
pub(crate) fn unreadable(id: u64, why: &str, last: bool) {
    metrics().unreadable.inc();
    if last {
        tracing::warn!(target: "ankusa::audit", pending = id, reason = %why, "subject store unreadable for the whole settlement window; settling interrupted");
    } else {
        tracing::debug!(target: "ankusa::audit", pending = id, reason = %why, "subject store unreadable; retrying");
    }
}

/// Pending row `id` (or the scan for them) could not be read or settled now: it is tried
/// again after `retry`, or (`None`) left for the next boot.
pub(crate) fn settle_failed(
    id: Option<u64>,
    error: &dyn std::fmt::Display,
    retry: Option<std::time::Duration>,
) {
    match retry {
        Some(after) => {
            tracing::warn!(target: "ankusa::audit", pending = id, error = %error, retry_in = ?after, "settling a pending row failed; trying again")
        }
        None => {
            tracing::error!(target: "ankusa::audit", pending = id, error = %error, "settling pending rows failed; they are settled at the next boot")
        }
    }
}
