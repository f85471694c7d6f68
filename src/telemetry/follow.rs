//! The log lines of `ankusa follow`, the reference consumer (its metrics are its own:
//! `replica::metrics`, served by the follower's `--metrics` listener). Target `ankusa::follow`.

use std::fmt::Display;
use std::net::SocketAddr;

use crate::replica::file::WatchPosition;
use crate::replica::http::Retry;
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

/// `follow http` watches `node`, resuming at `at` (from the oldest event when `None`).
pub fn watching(node: &dyn Display, at: Option<&WatchPosition>) {
    let position = at.map(|a| a.position);
    let incarnation = at.map(|a| a.incarnation.as_str());
    tracing::info!(target: "ankusa::follow", %node, position, incarnation, "follow http watching");
}

/// A request for `node`'s events after `position` failed; it is asked again after a pause.
pub fn watch_failed(node: &str, position: u64, retry: &Retry) {
    tracing::warn!(
        target: "ankusa::follow",
        node,
        position,
        error = %retry.detail,
        failures = retry.failures,
        retry_in_ms = retry.pause.as_millis() as u64,
        "follow http request failed; asking again from the same position"
    );
}

/// `node` answers again after `failures` failed requests.
pub fn watch_recovered(node: &str, position: u64, failures: u32) {
    tracing::info!(target: "ankusa::follow", node, position, failures, "follow http: the node answers again");
}

/// `node` no longer serves what follows `from` (410): the replica relists from `oldest` of
/// `incarnation`, with a snapshot (`snapshot` says whether one was started or was running).
pub fn relisted(node: &str, from: u64, oldest: u64, incarnation: &str, snapshot: &str) {
    tracing::warn!(
        target: "ankusa::follow",
        node,
        position = from,
        oldest,
        incarnation,
        snapshot,
        "follow http: position gone (410); relisting from the oldest position with a snapshot"
    );
}

/// Asking `node` for a snapshot after a 410 failed; asked again after a pause.
pub fn snapshot_request_failed(node: &str, retry: &Retry) {
    tracing::warn!(
        target: "ankusa::follow",
        node,
        error = %retry.detail,
        failures = retry.failures,
        retry_in_ms = retry.pause.as_millis() as u64,
        "follow http: the snapshot request of a relist failed; asking again"
    );
}

/// An event `node` served is no event of the contract; skipped.
pub fn event_skipped(node: &str, error: &dyn Display) {
    tracing::error!(target: "ankusa::follow", node, %error, "follow http: event skipped: not an event of the contract");
}
