//! The telemetry of the refresh after a restore, defined once: its progress (rows scanned,
//! subjects checked, refresh rows written), the store failures it retries, and the changes
//! held back meanwhile. Labels are the subject kind (`route`, `source`); a log line names a
//! kind, a count or a resource, never a state or an entity.

use std::sync::OnceLock;
use std::time::Duration;

use prometheus::{IntCounterVec, Opts};

use crate::telemetry;

struct Metrics {
    checked: IntCounterVec,
    refreshed: IntCounterVec,
    failures: IntCounterVec,
    held: IntCounterVec,
}

fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let counter = |name: &str, help: &str| {
            let c = IntCounterVec::new(Opts::new(name, help), &["kind"]).expect("valid metric");
            telemetry::register(Box::new(c.clone()));
            c
        };
        Metrics {
            checked: counter(
                "remote_refresh_checked_total",
                "Remote subjects (present, or known to the trail) compared after a restore",
            ),
            refreshed: counter(
                "remote_refresh_rows_total",
                "State-refresh rows written after a restore, for subjects the trail no longer described",
            ),
            failures: counter(
                "remote_refresh_failures_total",
                "Refresh attempts after a restore that could not read a store or write a row (retried)",
            ),
            held: counter(
                "remote_refresh_held_changes_total",
                "Changes refused (503) because they waited too long for a refresh after a restore",
            ),
        }
    })
}

/// A restored store's remote subjects are to be refreshed; changes of `kinds` are held.
pub(crate) fn started(restored_from: u64, kinds: &[&str]) {
    tracing::info!(target: "ankusa::audit", incarnation_from = restored_from, kinds = ?kinds, "restored store: refreshing the subjects kept outside it; their changes wait until done");
}

/// The trail was scanned: `rows` rows, `subjects` remote subjects it describes.
pub(crate) fn scanned(rows: u64, subjects: usize, elapsed: Duration) {
    tracing::info!(target: "ankusa::audit", rows, subjects, elapsed_ms = elapsed.as_millis() as u64, "trail scanned for the refresh");
}

/// One kind is refreshed: `checked` subjects compared, `refreshed` rows written.
pub(crate) fn kind_done(kind: &str, checked: u64, refreshed: u64) {
    let m = metrics();
    m.checked.with_label_values(&[kind]).inc_by(checked);
    m.refreshed.with_label_values(&[kind]).inc_by(refreshed);
    tracing::info!(target: "ankusa::audit", kind, checked, refreshed, "subjects refreshed; their changes are taken again");
}

/// An attempt failed (the store or the trail); retried after `retry`.
pub(crate) fn failed(kind: &str, error: &dyn std::fmt::Display, retry: Duration) {
    metrics().failures.with_label_values(&[kind]).inc();
    tracing::warn!(target: "ankusa::audit", kind, error = %error, retry_ms = retry.as_millis() as u64, "refresh after the restore failed; retrying (changes of this kind wait)");
}

/// Every kind is refreshed and `m:refresh_pending` is gone.
pub(crate) fn done() {
    tracing::info!(target: "ankusa::audit", "refresh after the restore finished");
}

/// A change of `kind` was refused: it waited too long for the refresh.
pub(crate) fn held(kind: &str, resource: &str) {
    metrics().held.with_label_values(&[kind]).inc();
    tracing::warn!(target: "ankusa::audit", kind, resource = %resource, "change refused: the refresh after a restore is still running");
}
