//! The sinks' named log events, in one place (vector's `internal_events`).
//!
//! Each function is one event with a fixed name and low-cardinality fields, so that log
//! queries and alerts stay stable and no payload, secret or URL with credentials can slip into
//! a field: callers pass kinds and reasons, never bodies or config values.
//!
//! The crate defines no metrics: every outcome goes back to the publisher, which counts it
//! in `ankusa::telemetry::lifecycle` (dependencies point one way, so this crate cannot reach
//! that registry, and it does not need to).

use std::path::Path;

/// A delivery attempt did not end in `Delivered`; `reason` is the outcome's reason.
pub(crate) fn attempt_failed(sink: &'static str, reason: &str, events: usize) {
    tracing::debug!(
        event = "sink_attempt_failed",
        sink,
        reason,
        events,
        "sink delivery attempt failed"
    );
}

/// The Kafka producer hit a fatal error and was replaced by a new one.
pub(crate) fn producer_recreated(code: &str) {
    tracing::warn!(
        event = "kafka_producer_recreated",
        sink = "kafka",
        code,
        "fatal kafka producer error; producer recreated"
    );
}

/// An event could not be encoded (it goes back to the publisher as `Rejected`).
pub(crate) fn encode_failed(sink: &'static str, seq: u64) {
    tracing::warn!(
        event = "sink_encode_failed",
        sink,
        seq,
        "event could not be encoded"
    );
}

/// The file sink's file was moved or deleted: it is opened again.
pub(crate) fn file_reopened(path: &Path) {
    tracing::info!(
        event = "file_sink_reopened",
        sink = "file",
        path = %path.display(),
        "lifecycle event file was moved or deleted; opening it again"
    );
}

/// The file sink cut `bytes` of an unfinished last line (a write a crash interrupted; its
/// events are sent again).
pub(crate) fn unfinished_line_cut(path: &Path, bytes: u64) {
    tracing::warn!(
        event = "file_sink_line_cut",
        sink = "file",
        path = %path.display(),
        bytes,
        "cut off an unfinished last line (a write a crash interrupted; its events are sent again)"
    );
}

/// Purging the Kafka producer's queue failed.
pub(crate) fn purge_failed(error: &dyn std::fmt::Display) {
    tracing::error!(
        event = "kafka_purge_failed",
        sink = "kafka",
        error = %error,
        "purging the kafka producer's queue failed"
    );
}
