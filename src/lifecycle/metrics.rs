//! The publisher's metrics, per sink: deliveries, retries, dead letters, errors by kind,
//! delivery latency and backlog. Defined once here; the sink's name is the only label
//! besides a low-cardinality error kind (the sinks' outcome reasons are fixed strings).

use std::sync::OnceLock;
use std::time::Duration;

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts};

use crate::telemetry;

struct Metrics {
    delivered: IntCounterVec,
    retries: IntCounterVec,
    dead_lettered: IntCounterVec,
    errors: IntCounterVec,
    latency: HistogramVec,
    position: IntGaugeVec,
    lag_seconds: IntGaugeVec,
}

fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
            telemetry::register(Box::new(c.clone()));
            c
        };
        let gauge = |name: &str, help: &str| {
            let g = IntGaugeVec::new(Opts::new(name, help), &["sink"]).expect("valid metric");
            telemetry::register(Box::new(g.clone()));
            g
        };
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "lifecycle_delivery_seconds",
                "Time of one delivery attempt of a batch to a sink",
            )
            .buckets(prometheus::exponential_buckets(0.0005, 2.0, 16).expect("valid buckets")),
            &["sink"],
        )
        .expect("valid metric");
        telemetry::register(Box::new(latency.clone()));
        Metrics {
            delivered: counter(
                "lifecycle_delivered_total",
                "Events a sink confirmed",
                &["sink"],
            ),
            retries: counter(
                "lifecycle_retries_total",
                "Delivery attempts that must be retried",
                &["sink"],
            ),
            dead_lettered: counter(
                "lifecycle_dead_lettered_total",
                "Events a sink refused for good",
                &["sink"],
            ),
            errors: counter(
                "lifecycle_errors_total",
                "Failed deliveries and publisher errors, by kind",
                &["sink", "kind"],
            ),
            latency,
            position: gauge(
                "lifecycle_sink_position",
                "The last seq a sink confirmed (persisted)",
            ),
            lag_seconds: gauge(
                "lifecycle_sink_lag_seconds",
                "Age of the oldest event a sink has not confirmed (0 when caught up)",
            ),
        }
    })
}

/// One delivery attempt of a batch took `elapsed`.
pub fn attempted(sink: &str, elapsed: Duration) {
    metrics()
        .latency
        .with_label_values(&[sink])
        .observe(elapsed.as_secs_f64());
}

/// An attempt's tally: `delivered` confirmed, `dead` dead-lettered.
pub fn tallied(sink: &str, delivered: u64, dead: u64) {
    let m = metrics();
    m.delivered.with_label_values(&[sink]).inc_by(delivered);
    m.dead_lettered.with_label_values(&[sink]).inc_by(dead);
}

/// An attempt failed with `kind` (a sink's outcome reason, or a publisher error kind).
pub fn failed(sink: &str, kind: &str, retry: bool) {
    let m = metrics();
    if retry {
        m.retries.with_label_values(&[sink]).inc();
    }
    m.errors.with_label_values(&[sink, kind]).inc();
}

/// The sink's persisted position, and the age in seconds of its oldest unconfirmed event.
pub fn position(sink: &str, position: u64, lag: Duration) {
    let m = metrics();
    m.position.with_label_values(&[sink]).set(position as i64);
    m.lag_seconds
        .with_label_values(&[sink])
        .set(lag.as_secs() as i64);
}
