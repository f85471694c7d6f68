//! Commit to Kafka-confirmed: route changes at a steady rate (open loop) to a node whose
//! one sink is Kafka (rdkafka's in-process MockCluster), and for each change the time from
//! its HTTP 200 to the node's confirmation of its event.
//!
//! Confirmation is the node's own: the sink's persisted position (`ankusa_lifecycle_sink_position`,
//! set once Kafka acknowledged every event up to it, idempotent with `acks=all`, and the
//! position is written) covers the change's row, whose seq is the response's `X-Audit-Seq`.
//! It is read in process, from the gauge `/metrics` serves
//! (`telemetry::lifecycle::sink_position`; rendering the whole registry 4,000 times a second
//! would take a tenth of the machine), on a thread of its own every [`POLL`]: the figure
//! includes the position write, and is late by at most one poll. A consumer would instead
//! add its own fetch wait and leave out the position write.
//!
//! The load is open loop: n connections (64, or `ANKUSA_BENCH_KAFKA_CONNS`), connection k
//! sending change j at `t0 + (j * n + k) / rate` whether or not the previous one answered
//! (to tokio's timer, 1 ms). The HTTP latency is counted from that scheduled time, so a node
//! that falls behind shows it there and is not hidden by a generator that waits.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ankusa::telemetry::lifecycle::sink_position;
use serde_json::json;

use crate::changes::{Conn, Kind, Paced};
use crate::env::env;
use crate::node::Node;
use crate::stats::{percentile, Failures, Stages};

/// How often the position is read.
const POLL: Duration = Duration::from_micros(250);
/// Connections of the paced load: `ANKUSA_BENCH_KAFKA_CONNS`, 64 when unset. Each has one
/// change in flight, so a node that answers slower than 64 / rate falls behind however much
/// CPU it has left.
pub fn conns() -> usize {
    env("ANKUSA_BENCH_KAFKA_CONNS")
        .filter(|n| *n > 0)
        .unwrap_or(64)
}
/// How long the events of a run may take to be confirmed after its last change.
const DRAIN: Duration = Duration::from_secs(30);

/// One run at one rate.
pub struct Run {
    /// The rate the changes were scheduled at.
    pub rate: f64,
    /// The rate they were answered at: changes made over the time from the first scheduled
    /// send to the last answer (under `rate` when the node did not keep up).
    pub answered_rate: f64,
    /// HTTP 200 to confirmed, ms.
    pub confirmed_p50: f64,
    pub confirmed_p99: f64,
    pub confirmed_max: f64,
    /// Scheduled send to HTTP 200, ms.
    pub http_p50: f64,
    pub http_p99: f64,
    /// A route change's mean time in each dual-write stage, ms (see `stats::Stages`).
    pub stages: [f64; 4],
    /// Failed changes, and changes whose event was not confirmed within [`DRAIN`].
    pub failures: Failures,
}

/// The confirmations the position watcher is waiting for: seq to the instant of its 200.
type Waiting = Arc<Mutex<BTreeMap<u64, Instant>>>;

/// Route changes at `rate`/s for `run_for` to a fresh node publishing to `topic` on
/// `brokers` through a sink named `sink` (a name of its own per run: the registry is the
/// process's, and an earlier node's gauge would otherwise still be there).
pub fn run(
    load: &tokio::runtime::Runtime,
    brokers: &str,
    topic: &str,
    sink: &str,
    rate: f64,
    run_for: Duration,
) -> Run {
    let node = Node::start(|v| {
        v["lifecycle"]["sinks"] = json!([sink]);
        v["lifecycle"]["sink"][sink] = json!({"kind": "kafka", "brokers": brokers, "topic": topic});
    });
    let conns: Vec<Arc<Conn>> = (0..conns())
        .map(|c| Arc::new(Conn::new(&node.base, Kind::Route, c)))
        .collect();
    let mut failures = Failures::default();
    // The routes, whose events also warm the producer up: the load starts once all are
    // confirmed.
    let created = load.block_on(futures::future::join_all(conns.iter().map(|c| c.create())));
    let mut last = 0;
    for c in created {
        match c {
            Ok(seq) => last = last.max(seq),
            Err(e) => failures.add(e),
        }
    }
    let deadline = Instant::now() + DRAIN;
    while sink_position(sink) < last && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let waiting: Waiting = Arc::default();
    let done = Arc::new(AtomicBool::new(false));
    let watcher = watch(sink.to_owned(), waiting.clone(), done.clone());
    let stages = Stages::now();
    let (http, answered_rate) =
        load.block_on(paced(&conns, rate, run_for, &waiting, &mut failures));
    let stages = stages.means_since();
    let sent = http.len();
    done.store(true, Ordering::Relaxed);
    let mut confirmed = watcher.join().expect("the position watcher");
    let unconfirmed = waiting.lock().unwrap().len();
    if unconfirmed > 0 {
        failures.add(format!(
            "{unconfirmed} of {sent} events not confirmed within {DRAIN:?}"
        ));
        failures.count += unconfirmed as u64 - 1;
    }
    node.stop();
    confirmed.sort_unstable();
    Run {
        rate,
        answered_rate,
        confirmed_p50: percentile(&confirmed, 0.50),
        confirmed_p99: percentile(&confirmed, 0.99),
        confirmed_max: percentile(&confirmed, 1.0),
        http_p50: percentile(&http, 0.50),
        http_p99: percentile(&http, 0.99),
        stages,
        failures,
    }
}

/// Send the changes, paced; hand back the HTTP latencies (sorted) and the rate they were
/// answered at.
async fn paced(
    conns: &[Arc<Conn>],
    rate: f64,
    run_for: Duration,
    waiting: &Waiting,
    failures: &mut Failures,
) -> (Vec<Duration>, f64) {
    let waiting = waiting.clone();
    let track = move |p: &Paced| {
        waiting.lock().unwrap().insert(p.seq, p.answered);
    };
    let (answered, began, f) = crate::changes::paced(conns, rate, run_for, track).await;
    failures.merge(f);
    let took = tokio::time::Instant::now() - began;
    let mut http: Vec<Duration> = answered
        .iter()
        .map(|p| tokio::time::Instant::from_std(p.answered) - p.due)
        .collect();
    http.sort_unstable();
    let answered = http.len() as f64 / took.as_secs_f64();
    (http, answered)
}

/// A thread that reads the position every [`POLL`] and moves every waiting change it
/// covers to the latencies it hands back, until `done` and nothing waits (or [`DRAIN`]
/// after `done`).
fn watch(
    sink: String,
    waiting: Waiting,
    done: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<Duration>> {
    std::thread::spawn(move || {
        let mut latencies = Vec::new();
        let mut drain_until = None;
        loop {
            let at = sink_position(&sink);
            let now = Instant::now();
            {
                let mut waiting = waiting.lock().unwrap();
                let later = waiting.split_off(&(at + 1));
                for answered in std::mem::replace(&mut *waiting, later).into_values() {
                    latencies.push(now.saturating_duration_since(answered));
                }
                if done.load(Ordering::Relaxed) {
                    let until = *drain_until.get_or_insert(now + DRAIN);
                    if waiting.is_empty() || now >= until {
                        return latencies;
                    }
                }
            }
            std::thread::sleep(POLL);
        }
    })
}
