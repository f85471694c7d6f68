//! The log lines of `ankusa follow`, the reference consumer (its metrics are its own:
//! `replica::metrics`, served by the follower's `--metrics` listener). Target `ankusa::follow`.

use std::fmt::Display;
use std::net::SocketAddr;

use crate::replica::progress::Status;

/// The webhook receiver is bound.
pub fn listening(listen: SocketAddr) {
    tracing::info!(target: "ankusa::follow", listen = %listen, "follow webhook listening");
}

/// The follower's `--metrics` listener stopped.
pub fn metrics_failed(error: &dyn Display) {
    tracing::error!(target: "ankusa::follow", error = %error, "metrics listener failed");
}

/// Where the follower stands (logged every `--progress` interval when stderr is no terminal).
pub fn progress(status: &Status) {
    tracing::info!(
        target: "ankusa::follow",
        applied = status.applied,
        stale = status.stale,
        subjects = status.subjects,
        behind_events = status.behind_events,
        behind_seconds = status.behind_seconds,
        "follow progress"
    );
}

/// The follower reads every partition of `topic`.
pub fn following(topic: &str, partitions: usize) {
    tracing::info!(target: "ankusa::follow", %topic, partitions, "following every partition");
}

/// Looking for new partitions failed (the ones assigned go on).
pub fn metadata_failed(error: &dyn Display) {
    tracing::warn!(target: "ankusa::follow", error = %error, "kafka metadata refresh failed");
}

/// The consumer reported an error that librdkafka retries.
pub fn consumer_error(error: &dyn Display) {
    tracing::warn!(target: "ankusa::follow", error = %error, "kafka consumer error");
}

/// Committing offsets to the group failed (the replica file holds them; the next commit
/// carries them).
pub fn commit_failed(error: &dyn Display) {
    tracing::warn!(target: "ankusa::follow", error = %error, "committing offsets to the consumer group failed");
}

/// A record that is no event of the contract was skipped.
pub fn record_skipped(partition: i32, offset: i64, error: &dyn Display) {
    tracing::error!(target: "ankusa::follow", partition, offset, %error, "record skipped: not an event of the contract");
}

/// A webhook request was refused: its signature does not hold.
pub fn request_refused(reason: &str) {
    tracing::warn!(target: "ankusa::follow", %reason, "follow webhook request refused");
}

/// A signed webhook request holds no event of the contract.
pub fn request_invalid(error: &str) {
    tracing::warn!(target: "ankusa::follow", %error, "follow webhook request is not an event of the contract");
}

/// The replica file could not be written (the request is answered with an error and sent
/// again).
pub fn file_write_failed(error: &dyn Display) {
    tracing::error!(target: "ankusa::follow", error = %error, "replica file write failed");
}
