//! A follower's metrics, in a registry of its own (prefix `ankusa_follow_`): a follower is
//! not a node, and a test running several in one process keeps them apart. The progress
//! line reads the same values, so what the terminal shows and what Prometheus scrapes agree.
//!
//! Labels are low-cardinality: an outcome, a state. Never a key or a tenant.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use prometheus::core::Collector;
use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry, TextEncoder,
};

use super::rule::{Disposition, Effect, Replica};

/// A follower's counters and gauges.
pub struct Metrics {
    registry: Registry,
    /// Events read, by outcome (`applied`, `stale`, `marker`, `ignored`, `invalid`, and for
    /// Kafka `tombstone`: a null-valued record).
    pub events: IntCounterVec,
    /// Snapshots completed.
    pub snapshots: IntCounter,
    /// Subjects marked deleted by completed snapshots.
    pub pruned: IntCounter,
    /// Subjects kept, by state (`present`, `deleted`), as of the last file write.
    pub subjects: IntGaugeVec,
    /// Kafka: records between the position and the high watermark, all partitions; http:
    /// seqs between each node's position and its latest, all nodes.
    pub behind_events: IntGauge,
    /// Now minus the time of the newest event applied.
    pub behind_seconds: Gauge,
    /// Replica file writes.
    pub writes: IntCounter,
    /// How long a replica file write takes, fsyncs included.
    pub write_seconds: Histogram,
    /// The size of the replica file last written.
    pub file_bytes: IntGauge,
    /// http: relists after a 410 (a snapshot asked for, the position moved to the oldest).
    pub relists: IntCounter,
    /// http: requests to a node that failed (down, hung, 5xx, garbage) and are retried.
    pub request_failures: IntCounter,
    /// The `time` of the newest event applied, in unix ms (0: none yet).
    newest_ms: AtomicI64,
}

impl Metrics {
    /// A new set of metrics in its own registry.
    pub fn new() -> Arc<Metrics> {
        let registry =
            Registry::new_custom(Some("ankusa_follow".into()), None).expect("a valid prefix");
        let r = |c: Box<dyn Collector>| registry.register(c).expect("names are unique");
        let events = IntCounterVec::new(
            Opts::new("events_total", "Events read, by outcome."),
            &["outcome"],
        )
        .expect("valid");
        r(Box::new(events.clone()));
        let snapshots = counter(&r, "snapshots_completed_total", "Snapshots completed.");
        let pruned = counter(
            &r,
            "subjects_pruned_total",
            "Subjects deleted by snapshots.",
        );
        let subjects = IntGaugeVec::new(
            Opts::new("subjects", "Subjects kept, by state."),
            &["state"],
        )
        .expect("valid");
        r(Box::new(subjects.clone()));
        let behind_events =
            IntGauge::new("behind_events", "Events not yet read (Kafka, http).").expect("valid");
        r(Box::new(behind_events.clone()));
        let behind_seconds =
            Gauge::new("behind_seconds", "Now minus the newest event's time.").expect("valid");
        r(Box::new(behind_seconds.clone()));
        let writes = counter(&r, "file_writes_total", "Replica file writes.");
        let write_seconds = Histogram::with_opts(HistogramOpts::new(
            "file_write_seconds",
            "Replica file write time, fsyncs included.",
        ))
        .expect("valid");
        r(Box::new(write_seconds.clone()));
        let file_bytes = IntGauge::new("file_bytes", "Size of the replica file.").expect("valid");
        r(Box::new(file_bytes.clone()));
        let relists = counter(&r, "relists_total", "Relists after a position gone (http).");
        let request_failures = counter(
            &r,
            "request_failures_total",
            "Requests to a node that failed and are retried (http).",
        );
        Arc::new(Metrics {
            registry,
            events,
            snapshots,
            pruned,
            subjects,
            behind_events,
            behind_seconds,
            writes,
            write_seconds,
            file_bytes,
            relists,
            request_failures,
            newest_ms: AtomicI64::new(0),
        })
    }

    /// Count what applying an event did; `time_ms` is the event's `time`.
    pub fn applied(&self, effect: &Effect, time_ms: Option<i64>) {
        let outcome = match effect.disposition {
            Disposition::Applied => "applied",
            Disposition::Stale => "stale",
            Disposition::Marker => "marker",
            Disposition::Ignored => "ignored",
        };
        self.events.with_label_values(&[outcome]).inc();
        if effect.completed {
            self.snapshots.inc();
            self.pruned.inc_by(effect.pruned as u64);
        }
        if let (Disposition::Applied, Some(ms)) = (effect.disposition, time_ms) {
            self.newest_ms.fetch_max(ms, Ordering::Relaxed);
        }
    }

    /// Count a record or request not applied: `invalid` (not an event of the contract) or
    /// `tombstone` (Kafka).
    pub fn skipped(&self, outcome: &'static str) {
        self.events.with_label_values(&[outcome]).inc();
    }

    /// Record a replica file write of `bytes` that took `seconds`, holding `replica`.
    pub fn written(&self, bytes: usize, seconds: f64, counts: (usize, usize)) {
        self.writes.inc();
        self.write_seconds.observe(seconds);
        self.file_bytes.set(bytes as i64);
        self.subjects
            .with_label_values(&["present"])
            .set(counts.0 as i64);
        self.subjects
            .with_label_values(&["deleted"])
            .set(counts.1 as i64);
    }

    /// Set the subject gauges from `replica` (at start, before any write).
    pub fn count_subjects(&self, replica: &Replica) {
        let (present, deleted) = replica.counts();
        self.subjects
            .with_label_values(&["present"])
            .set(present as i64);
        self.subjects
            .with_label_values(&["deleted"])
            .set(deleted as i64);
    }

    /// Events with an outcome of `outcome` so far.
    pub fn count(&self, outcome: &str) -> u64 {
        self.events.with_label_values(&[outcome]).get()
    }

    /// Update `behind_seconds` for `now_ms`; `None` before any event was applied.
    pub fn seconds_behind(&self, now_ms: i64) -> Option<f64> {
        let newest = self.newest_ms.load(Ordering::Relaxed);
        if newest == 0 {
            return None;
        }
        let behind = ((now_ms - newest) as f64 / 1000.0).max(0.0);
        self.behind_seconds.set(behind);
        Some(behind)
    }

    /// The metrics in Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        if TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .is_err()
        {
            return String::new();
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

fn counter(register: &impl Fn(Box<dyn Collector>), name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("valid");
    register(Box::new(c.clone()));
    c
}

/// Serve `metrics` as Prometheus text at `GET /metrics` on `listener` until `shutdown`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let metrics = metrics.clone();
            async move { metrics.render() }
        }),
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_counted_and_rendered_with_the_prefix() {
        let m = Metrics::new();
        let applied = Effect {
            disposition: Disposition::Applied,
            completed: true,
            pruned: 2,
        };
        m.applied(&applied, Some(10_000));
        m.skipped("tombstone");
        m.written(5, 0.01, (3, 1));
        assert_eq!(m.count("applied"), 1);
        assert_eq!(m.seconds_behind(12_500), Some(2.5));
        let text = m.render();
        for line in [
            "ankusa_follow_events_total{outcome=\"applied\"} 1",
            "ankusa_follow_events_total{outcome=\"tombstone\"} 1",
            "ankusa_follow_snapshots_completed_total 1",
            "ankusa_follow_subjects_pruned_total 2",
            "ankusa_follow_subjects{state=\"present\"} 3",
            "ankusa_follow_behind_seconds 2.5",
            "ankusa_follow_file_bytes 5",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
    }
}
