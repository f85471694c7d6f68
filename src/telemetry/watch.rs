//! The watchers of `GET /admin/v1/lifecycle/events` (`ankusa_lifecycle_watch*`): how many
//! watch now, the events served, each answer's lag, the watchers refused at
//! `api.max_watchers`, and the tail's failed reads.
//!
//! No label: a watcher is anonymous here (`GET /admin/v1/lifecycle` lists each one's lag).

use std::fmt::Display;
use std::sync::LazyLock;

use prometheus::{Histogram, IntCounter, IntGauge};

use super::{counter, exponential_buckets, gauge, histogram};

struct Metrics {
    watchers: IntGauge,
    served: IntCounter,
    lag: Histogram,
    refused: IntCounter,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    watchers: gauge(
        "lifecycle_watchers",
        "Watchers of /admin/v1/lifecycle/events now (long-polls and streams)",
    ),
    served: counter("lifecycle_watch_events_total", "Events served to watchers"),
    lag: histogram(
        "lifecycle_watch_lag_seqs",
        "Seqs between the trail's last and a watcher's position, at each answer",
        exponential_buckets(1.0, 4.0, 12),
    ),
    refused: counter(
        "lifecycle_watch_refused_total",
        "Watchers refused because api.max_watchers watched already",
    ),
});

/// A watcher came.
pub fn joined() {
    METRICS.watchers.inc();
}

/// A watcher went.
pub fn left() {
    METRICS.watchers.dec();
}

/// A watcher was refused (`api.max_watchers`).
pub fn refused() {
    METRICS.refused.inc();
}

/// A watcher was answered `events` events, `lag` seqs behind the trail's last.
pub fn served(events: usize, lag: u64) {
    let m = &*METRICS;
    m.served.inc_by(events as u64);
    m.lag.observe(lag as f64);
}

/// The watchers' tail could not read the outbox; watchers read it themselves meanwhile.
pub fn tail_unread(error: &dyn Display) {
    tracing::warn!(target: "ankusa::lifecycle", error = %error, "the watchers' tail could not read the outbox; retrying at the next commit");
}

/// Touch every metric, so that a test sees them all exported.
#[cfg(test)]
pub(super) fn touch_every_metric() {
    LazyLock::force(&METRICS);
}
