//! The publisher's events (`ankusa_lifecycle_*`), per sink: deliveries, retries, dead
//! letters (made, and counted against `lifecycle.max_dead_letters`), errors by kind, delivery
//! latency, commit-to-confirmation time, and each sink's persisted position, lag and state.
//!
//! The sink's name is the only label besides a low-cardinality error kind (the sinks'
//! outcome reasons are fixed strings) or a state. The sinks crate counts nothing itself:
//! every outcome of a sink comes back to the publisher, which reports it here. The
//! publisher's log lines stay beside its loop for now; only its metrics are defined here.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{HistogramVec, IntCounterVec, IntGaugeVec};

use super::{counter_vec, exponential_buckets, gauge_vec, histogram_vec};

/// The publisher's metrics, registered at its first event.
struct Metrics {
    delivered: IntCounterVec,
    retries: IntCounterVec,
    dead_lettered: IntCounterVec,
    dead_letters: IntGaugeVec,
    errors: IntCounterVec,
    delivery_seconds: HistogramVec,
    confirmed_seconds: HistogramVec,
    sink_position: IntGaugeVec,
    sink_lag_seconds: IntGaugeVec,
    sink_state: IntGaugeVec,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    delivered: counter_vec(
        "lifecycle_delivered_total",
        "Events a sink confirmed",
        &["sink"],
    ),
    retries: counter_vec(
        "lifecycle_retries_total",
        "Delivery attempts that must be retried",
        &["sink"],
    ),
    dead_lettered: counter_vec(
        "lifecycle_dead_lettered_total",
        "Events a sink refused for good",
        &["sink"],
    ),
    dead_letters: gauge_vec(
        "lifecycle_dead_letters",
        "Dead letters a sink holds (its ceiling is lifecycle.max_dead_letters)",
        &["sink"],
    ),
    errors: counter_vec(
        "lifecycle_errors_total",
        "Failed deliveries and publisher errors, by kind",
        &["sink", "kind"],
    ),
    delivery_seconds: histogram_vec(
        "lifecycle_delivery_seconds",
        "Time of one delivery attempt of a batch to a sink",
        &["sink"],
        exponential_buckets(0.0005, 2.0, 16),
    ),
    confirmed_seconds: histogram_vec(
        "lifecycle_confirmed_seconds",
        "Time from a row's commit to its event's confirmation by a sink",
        &["sink"],
        exponential_buckets(0.001, 2.0, 18),
    ),
    sink_position: gauge_vec(
        "lifecycle_sink_position",
        "The last seq a sink confirmed (persisted)",
        &["sink"],
    ),
    sink_lag_seconds: gauge_vec(
        "lifecycle_sink_lag_seconds",
        "Age of the oldest event a sink has not confirmed (0 when caught up)",
        &["sink"],
    ),
    sink_state: gauge_vec(
        "lifecycle_sink_state",
        "A sink's state (running, retrying, disabled, stopped): 1 for its own, 0 for the others",
        &["sink", "state"],
    ),
});

/// One delivery attempt of a batch took `elapsed`.
pub fn delivery_attempted(sink: &str, elapsed: Duration) {
    METRICS
        .delivery_seconds
        .with_label_values(&[sink])
        .observe(elapsed.as_secs_f64());
}

/// A sink confirmed (or dead-lettered) the events of the rows committed at `ats` (unix ms),
/// now: one observation each of the time from its commit.
pub fn events_confirmed(sink: &str, ats: &[u64]) {
    let now = chrono::Utc::now().timestamp_millis().max(0) as u64;
    let histogram = METRICS.confirmed_seconds.with_label_values(&[sink]);
    for at in ats {
        histogram.observe(now.saturating_sub(*at) as f64 / 1000.0);
    }
}

/// A batch's outcomes were handled: `delivered` confirmed, `dead` dead-lettered.
pub fn batch_handled(sink: &str, delivered: u64, dead: u64) {
    let m = &*METRICS;
    m.delivered.with_label_values(&[sink]).inc_by(delivered);
    m.dead_lettered.with_label_values(&[sink]).inc_by(dead);
}

/// The sink holds `count` dead letters now.
pub fn dead_letters_counted(sink: &str, count: u64) {
    METRICS
        .dead_letters
        .with_label_values(&[sink])
        .set(i64::try_from(count).unwrap_or(i64::MAX));
}

/// The sink's lane failed with `kind` (a sink's outcome reason, or a publisher error kind);
/// `retry`: the attempt is retried.
pub fn sink_failed(sink: &str, kind: &str, retry: bool) {
    let m = &*METRICS;
    if retry {
        m.retries.with_label_values(&[sink]).inc();
    }
    m.errors.with_label_values(&[sink, kind]).inc();
}

/// The sink's persisted position, and the age in seconds of its oldest unconfirmed event.
pub fn position_reported(sink: &str, position: u64, lag: Duration) {
    let m = &*METRICS;
    m.sink_position
        .with_label_values(&[sink])
        .set(position as i64);
    m.sink_lag_seconds
        .with_label_values(&[sink])
        .set(lag.as_secs() as i64);
}

/// The persisted position of `sink` as `ankusa_lifecycle_sink_position` shows it (0 before its
/// first report), read without rendering the registry.
pub fn sink_position(sink: &str) -> u64 {
    METRICS
        .sink_position
        .get_metric_with_label_values(&[sink])
        .map_or(0, |g| u64::try_from(g.get()).unwrap_or(0))
}

/// The sink is in `state`, one of `states`: 1 for it and 0 for the others, so that an alert
/// can say how long a sink has been in a state.
pub fn state_reported(sink: &str, state: &str, states: &[&str]) {
    for s in states {
        METRICS
            .sink_state
            .with_label_values(&[sink, s])
            .set(i64::from(*s == state));
    }
}

/// Give every metric of the area a value, so the registry renders each.
#[cfg(test)]
pub(super) fn touch_every_metric() {
    delivery_attempted("file", Duration::from_millis(1));
    events_confirmed("file", &[1]);
    batch_handled("file", 1, 1);
    dead_letters_counted("file", 1);
    sink_failed("file", "publisher", true);
    position_reported("file", 1, Duration::from_secs(1));
    state_reported("file", "running", &["running", "retrying"]);
}

/// A delivery to `sink` failed for `reason`; it is tried again after `delay`.
pub fn retrying(sink: &str, reason: &str, delay: Duration) {
    tracing::warn!(target: "ankusa::lifecycle", sink, reason, delay_ms = delay.as_millis() as u64, "lifecycle delivery failed; will retry");
}

/// `sink`'s destination disabled it (`reason`): its position is kept until an operator
/// enables it.
pub fn disabled_by_destination(sink: &str, reason: &str) {
    tracing::error!(target: "ankusa::lifecycle", sink, reason, "lifecycle sink disabled by its destination; keeping its position until an operator enables it");
}

/// The `sink.disable` row could not be written.
pub fn disable_row_failed(sink: &str, error: &dyn std::fmt::Debug) {
    tracing::error!(target: "ankusa::lifecycle", sink, error = ?error, "the sink.disable row could not be written");
}

/// An operator enabled `sink` again: it resumes from `position`.
pub fn enabled_again(sink: &str, position: u64) {
    tracing::info!(target: "ankusa::lifecycle", sink, position, "lifecycle sink enabled again; resuming from its position");
}

/// `sink`'s healthcheck at start: `Ok`, or why it failed (delivery goes on with retries).
pub fn healthchecked(sink: &str, kind: &str, result: Result<(), &dyn std::fmt::Display>) {
    match result {
        Ok(()) => tracing::info!(target: "ankusa::lifecycle", sink, kind, "lifecycle sink healthy"),
        Err(error) => {
            tracing::warn!(target: "ankusa::lifecycle", sink, kind, error = %error, "lifecycle sink healthcheck failed; delivering with retries");
        }
    }
}

/// `sink` refused the event of row `seq` for good (`reason`): `dead_lettered`, or not, since
/// its dead letters are full (the sink stops before it).
pub fn refused_for_good(sink: &str, seq: u64, reason: &str, dead_lettered: bool) {
    if dead_lettered {
        tracing::error!(target: "ankusa::lifecycle", sink, seq, reason, "lifecycle event refused for good; dead-lettered");
    } else {
        tracing::error!(target: "ankusa::lifecycle", sink, seq, reason, "lifecycle event refused for good, and the sink's dead letters are full; stopping before it until an operator drops or redrives some");
    }
}

/// The publisher failed for `sink` (`error`), apart from a delivery's outcome.
pub fn publisher_failed(sink: &str, error: &str) {
    tracing::error!(target: "ankusa::lifecycle", sink, error, "lifecycle publisher error");
}

/// A sink's position writer task ended abnormally.
pub fn position_writer_failed(error: &dyn std::fmt::Display) {
    tracing::error!(target: "ankusa::lifecycle", error = %error, "lifecycle position writer failed");
}

/// The event of a flagged row could not be built; the row is passed over.
pub fn event_not_built(error: &dyn std::fmt::Display) {
    tracing::error!(target: "ankusa::lifecycle", error = %error, "lifecycle event not built; passed over");
}

/// The outbox holds a damaged entry at `seq` (`what`: an entity of an unflagged row, or
/// without its row, or a row that does not decode); skipped rather than stop every sink.
pub fn outbox_damaged(seq: u64, what: &'static str, error: Option<&dyn std::fmt::Display>) {
    match error {
        Some(error) => {
            tracing::error!(target: "ankusa::lifecycle", seq, error = %error, "{what}; skipped")
        }
        None => tracing::warn!(target: "ankusa::lifecycle", seq, "{what}; skipped"),
    }
}

/// `sink`'s position `to` is on disk.
pub fn position_persisted(sink: &str, to: u64) {
    tracing::debug!(target: "ankusa::lifecycle", sink, to, "lifecycle sink position persisted");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sinks_position_reads_back_as_reported_and_zero_before() {
        assert_eq!(sink_position("position-read-back"), 0);
        position_reported("position-read-back", 42, Duration::ZERO);
        assert_eq!(sink_position("position-read-back"), 42);
        let rendered = super::super::render();
        assert!(rendered.contains("ankusa_lifecycle_sink_position{sink=\"position-read-back\"} 42"));
    }
}
