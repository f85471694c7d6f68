//! The node's own log lines: starting, serving, stopping, and the store's files around a
//! backup or a restore. Target `ankusa::node` (`ankusa::store` for the store's files).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// The admin API is bound and the node takes requests; the trail's last seq is `seq`.
pub fn serving(addr: SocketAddr, seq: u64) {
    tracing::info!(target: "ankusa::node", %addr, seq, "node serving");
}

/// A stop signal (`SIGINT`, `SIGTERM`) was received.
pub fn signalled(signal: &'static str) {
    tracing::info!(target: "ankusa::node", signal, "{signal} received");
}

/// The server stopped accepting: the publisher stops and the audit writer flushes.
pub fn stopping() {
    tracing::info!(target: "ankusa::node", "stopped accepting; stopping the publisher and flushing the audit writer");
}

/// `tasks` requests the API started (a backup, a sink's enable) are still to be recorded.
pub fn waiting_for_work(tasks: usize) {
    tracing::info!(target: "ankusa::node", tasks, "waiting for work requests started (a backup, a sink's enable) to be recorded");
}

/// The store closed at the stop.
pub fn store_closed() {
    tracing::info!(target: "ankusa::node", "store closed");
}

/// The store was still open after `waited`: a read on the blocking pool holds it.
pub fn store_still_open(waited: Duration) {
    tracing::warn!(target: "ankusa::node", ?waited, "the store is still open in this process; it closes when its last reader ends");
}

/// jemalloc's background purging could not be turned on.
pub fn purging_not_enabled(error: &dyn std::fmt::Display) {
    tracing::warn!(target: "ankusa::node", error = %error, "jemalloc background purging not enabled");
}

/// The frozen copy a backup was made from could not be removed.
pub fn backup_copy_left(error: &dyn std::fmt::Display) {
    tracing::warn!(target: "ankusa::store", error = %error, "removing the backup's frozen copy failed; the next backup removes it");
}

/// A restore is in place, and something was left at `path`, as `what` says (`error`: why it
/// was not moved or removed).
pub fn restore_left(what: &'static str, path: &Path, error: &dyn std::fmt::Display) {
    tracing::warn!(target: "ankusa::store", path = %path.display(), error = %error, "{what}");
}

/// A restore is in place, but its directory could not be synced: a crash may undo it.
pub fn restore_unsynced(dir: &Path, error: &dyn std::fmt::Display) {
    tracing::error!(target: "ankusa::store", dir = %dir.display(), error = %error, "the restore is in place, but syncing its directory failed: a crash now may undo it");
}
