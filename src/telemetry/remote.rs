//! The events of the remote subject stores (`ankusa_remote_*`: routes, and sources kept in
//! Redis): the refresh after a restore, its progress (rows scanned, subjects checked,
//! refresh rows written), the store failures it retries, and the changes that wait meanwhile.
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
    drift_found: IntCounterVec,
    drift_scanned: IntCounterVec,
    drift_failures: IntCounterVec,
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
    drift_found: counter_vec(
        "remote_drift_total",
        "Subjects the drift check found in a shared store otherwise than the fleet wrote them",
        &["kind"],
    ),
    drift_scanned: counter_vec(
        "remote_drift_scanned_total",
        "Subjects the drift check scanned in a shared store",
        &["kind"],
    ),
    drift_failures: counter_vec(
        "remote_drift_failures_total",
        "Drift check passes that could not read the store or write a row (tried again)",
        &["kind"],
    ),
});

/// Subject `id` of `tenant` of `kind` was found in its shared store otherwise than the fleet
/// wrote it (at version `version`).
pub(crate) fn drift_found(kind: &str, tenant: &str, id: &str, version: u64) {
    METRICS.drift_found.with_label_values(&[kind]).inc();
    tracing::warn!(target: "ankusa::audit", kind, tenant, id, version, "shared store drift: a subject no node of the fleet wrote as it is; recording it and publishing its state");
}

/// A drift check pass is done.
pub(crate) fn drift_checked(report: &crate::subjects::remote::drift::Report) {
    let kind = report.kind;
    METRICS
        .drift_scanned
        .with_label_values(&[kind])
        .inc_by(report.scanned);
    tracing::info!(target: "ankusa::audit", kind, scanned = report.scanned, drifted = report.drifted, published = report.published, elapsed_ms = report.elapsed_ms, "drift check done");
}

/// A drift check pass failed; the next one is in `retry`.
pub(crate) fn drift_failed(kind: &str, error: &impl Display, retry: Duration) {
    METRICS.drift_failures.with_label_values(&[kind]).inc();
    tracing::warn!(target: "ankusa::audit", kind, error = %error, retry_ms = retry.as_millis() as u64, "drift check failed; trying again at the next interval");
}

/// A shared store of `kind` named `store` was found with its counter at `counter`, below the
/// `seen` value this process saw in it: it lost data.
pub(crate) fn store_lost(kind: &str, store: &str, counter: u64, seen: u64, found: &str) {
    METRICS.store_losses.with_label_values(&[kind]).inc();
    tracing::error!(target: "ankusa::audit", kind, store, counter, seen, found, "shared store lost data; recording it and taking a snapshot of the kind");
}

/// The shared store of `kind` answers with another id than the one this node knew: it is
/// another store (the configuration names another Redis), whose name events carry from now.
pub(crate) fn store_renamed(kind: &str, known: &str, found: &str) {
    tracing::warn!(target: "ankusa::audit", kind, known, found, "the shared store is not the one this node knew: events name it by its own id from now on");
}

/// A restored store's remote subjects are to be refreshed; changes of `kinds` wait.
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
    store_lost("route", "redis:x", 1, 2, "gone");
    drift_found("route", "t1", "r1", 1);
    drift_checked(&crate::subjects::remote::drift::Report {
        kind: "route",
        ..Default::default()
    });
    drift_failed("route", &"unreachable", Duration::from_millis(1));
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

/// A trail row did not decode while the trail was read for the refresh: every subject is
/// refreshed.
pub fn refresh_row_undecodable(error: &dyn std::fmt::Display) {
    tracing::error!(target: "ankusa::audit", error = %error, "a trail row does not decode; every subject is refreshed");
}
