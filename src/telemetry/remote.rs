//! The events of the remote subject stores (`ankusa_remote_*`: routes, and sources kept in
//! Redis): the refresh after a restore, its progress (rows scanned, subjects checked,
//! refresh rows written), the store failures it retries, and the changes held back meanwhile.
//!
//! Labels are the subject kind (`route`, `source`); a log line names a kind, a count or a
//! resource, never a state or an entity.

use std::fmt::Display;
use std::sync::LazyLock;
use std::time::Duration;

use prometheus::IntCounterVec;

use super::counter_vec;

/// The refresh's metrics, registered at its first event.
struct Metrics {
    refresh_checked: IntCounterVec,
    refresh_rows: IntCounterVec,
    refresh_failures: IntCounterVec,
    refresh_held_changes: IntCounterVec,
    store_losses: IntCounterVec,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    refresh_checked: counter_vec(
        "remote_refresh_checked_total",
        "Remote subjects (present, or known to the trail) compared after a restore",
        &["kind"],
    ),
    refresh_rows: counter_vec(
        "remote_refresh_rows_total",
        "State-refresh rows written after a restore, for subjects the trail no longer described",
        &["kind"],
    ),
    refresh_failures: counter_vec(
        "remote_refresh_failures_total",
        "Refresh attempts after a restore that could not read a store or write a row (retried)",
        &["kind"],
    ),
    refresh_held_changes: counter_vec(
        "remote_refresh_held_changes_total",
        "Changes refused (503) because they waited too long for a refresh after a restore",
        &["kind"],
    ),
    store_losses: counter_vec(
        "remote_store_losses_total",
        "Times a shared store was found to have lost data (its counter below what was seen)",
        &["kind"],
    ),
});

/// A shared store of `kind` named `store` was found with its counter at `counter`, below the
/// `seen` value this process saw in it: it lost data.
pub(crate) fn store_lost(kind: &str, store: &str, counter: u64, seen: u64) {
    METRICS.store_losses.with_label_values(&[kind]).inc();
    tracing::error!(target: "ankusa::audit", kind, store, counter, seen, "shared store lost data: its version counter went back; recording it and taking a snapshot of the kind");
}

/// A restored store's remote subjects are to be refreshed; changes of `kinds` are held.
pub(crate) fn refresh_started(restored_from: u64, kinds: &[&str]) {
    tracing::info!(target: "ankusa::audit", incarnation_from = restored_from, kinds = ?kinds, "restored store: refreshing the subjects kept outside it; their changes wait until done");
}

/// The trail was scanned: `rows` rows, `subjects` remote subjects it describes.
pub(crate) fn refresh_scanned(rows: u64, subjects: usize, elapsed: Duration) {
    tracing::info!(target: "ankusa::audit", rows, subjects, elapsed_ms = elapsed.as_millis() as u64, "trail scanned for the refresh");
}

/// One kind is refreshed: `checked` subjects compared, `refreshed` rows written.
pub(crate) fn refresh_kind_done(kind: &str, checked: u64, refreshed: u64) {
    let m = &*METRICS;
    m.refresh_checked.with_label_values(&[kind]).inc_by(checked);
    m.refresh_rows.with_label_values(&[kind]).inc_by(refreshed);
    tracing::info!(target: "ankusa::audit", kind, checked, refreshed, "subjects refreshed; their changes are taken again");
}

/// An attempt failed (the store or the trail); retried after `retry`.
pub(crate) fn refresh_failed(kind: &str, error: &dyn Display, retry: Duration) {
    METRICS.refresh_failures.with_label_values(&[kind]).inc();
    tracing::warn!(target: "ankusa::audit", kind, error = %error, retry_ms = retry.as_millis() as u64, "refresh after the restore failed; retrying (changes of this kind wait)");
}

/// Every kind is refreshed and `m:refresh_pending` is gone.
pub(crate) fn refresh_done() {
    tracing::info!(target: "ankusa::audit", "refresh after the restore finished");
}

/// A change of `kind` was refused: it waited too long for the refresh.
pub(crate) fn change_held(kind: &str, resource: &str) {
    METRICS
        .refresh_held_changes
        .with_label_values(&[kind])
        .inc();
    tracing::warn!(target: "ankusa::audit", kind, resource = %resource, "change refused: the refresh after a restore is still running");
}

/// Give every metric of the area a value, so the registry renders each.
#[cfg(test)]
pub(super) fn touch_every_metric() {
    refresh_kind_done("route", 1, 1);
    refresh_failed("route", &"unreachable", Duration::from_millis(1));
    change_held("route", "routes/r1");
    store_lost("route", "redis:x", 1, 2);
}

/// A snapshot of `kinds` began (its start marker is next).
pub(crate) fn snapshot_started(id: &str, kinds: &[&str]) {
    tracing::info!(target: "ankusa::lifecycle", snapshot = id, kinds = ?kinds, "snapshot started");
}

/// A snapshot's finish marker is written, after `items` items.
pub(crate) fn snapshot_finished(id: &str, items: u64) {
    tracing::info!(target: "ankusa::lifecycle", snapshot = id, items, "snapshot finished");
}

/// A snapshot stopped before its finish marker; consumers prune nothing for it.
pub(crate) fn snapshot_failed(reason: &str, error: &str) {
    tracing::warn!(target: "ankusa::lifecycle", reason, error, "snapshot failed before its finished marker");
}
