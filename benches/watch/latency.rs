//! Part 1: commit to watcher beside commit to Kafka-confirmed, on the same changes.
//!
//! A node in this process publishes to one Kafka sink (tansu on loopback, or rdkafka's
//! MockCluster where tansu is not installed) and is watched by one server-sent-events
//! stream and one long-poll loop. Route changes go at a steady rate (open loop, 64
//! connections). Each change's times are taken from just before its request (the commit
//! lies after it: the figure the target is judged by) and from its answer (the commit lies
//! before it; a watcher may have the event first, so that figure can be negative):
//!
//! - to a watcher: when it read the event;
//! - to Kafka: when the sink's persisted position covered the row, read in process from the
//!   gauge `/metrics` serves every [`POLL`], as `benches/load/kafka.rs` reads it (late by at
//!   most a poll; Kafka acknowledged every event up to it with `acks=all`, and the position
//!   was written).
//!
//! One node carries all three, so they see the same commits and the same machine.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ankusa::telemetry::lifecycle::sink_position;
use ankusa_sinks::test_support::broker;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use serde_json::json;

use crate::commits;
use crate::figures::percentile;
use crate::group::Group;
use crate::node::Node;
use crate::stats::Failures;
use crate::traffic::{self, Sent};
use crate::watcher::Mode;

/// How often the sink's position is read.
const POLL: Duration = Duration::from_micros(250);
/// How long the events of a run may take to reach everyone after its last change.
const DRAIN: Duration = Duration::from_secs(30);
/// Connections of the paced load, as the load bench's Kafka latency.
const CONNS: usize = 64;

/// Milliseconds to one consumer (or to the answer), over a run's changes.
#[derive(Clone, Copy, Default)]
pub struct Times {
    /// From the commit (the node's own instant): p50, p99, max.
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    /// From just before the request (the commit's own time in it): p50, p99.
    pub sent_p50: f64,
    pub sent_p99: f64,
}

/// One run.
pub struct Run {
    pub answered_rate: f64,
    /// The change's answer.
    pub http: Times,
    pub stream: Times,
    pub long_poll: Times,
    pub kafka: Times,
}

/// A run at `rate`/s for `run_for` on a fresh node publishing to `topic` on `brokers`
/// through a sink of its own name (the gauge is the process's; an earlier run's would stay).
pub fn run(
    runtimes: &crate::Runtimes,
    (brokers, topic, sink): (&str, &str, &str),
    rate: f64,
    run_for: Duration,
    failures: &mut Failures,
) -> Option<Run> {
    let node = Node::start(|v| {
        crate::room(v, 2);
        v["lifecycle"]["sinks"] = json!([sink]);
        v["lifecycle"]["sink"][sink] = json!({"kind": "kafka", "brokers": brokers, "topic": topic});
    });
    let load = &runtimes.load;
    let (conns, created) = load.block_on(traffic::connect(&node.base, CONNS, failures));
    let group = Group::start(
        &runtimes.watch,
        &node.base,
        &[Mode::Stream, Mode::LongPoll],
        created,
        true,
    );
    // The first change, confirmed and watched, warms the producer and shows both watchers
    // are there.
    let warm = match load.block_on(traffic::warm_up(&conns[0], 0)) {
        Ok(seq) => seq,
        Err(e) => {
            failures.add(e);
            return None;
        }
    };
    if let Err(e) = group
        .reached(warm, DRAIN)
        .and_then(|_| confirmed(sink, warm))
    {
        failures.add(e);
        return None;
    }
    group.count_after(warm);
    commits::arm();
    let done = Arc::new(AtomicBool::new(false));
    let poller = poll(sink.to_owned(), done.clone());
    let latest = Arc::new(AtomicU64::new(0));
    let (sent, f) = load.block_on(traffic::paced(&conns, rate, run_for, &latest));
    failures.merge(f);
    let last = sent.last().map_or(warm, |s| s.seq);
    if let Err(e) = group
        .reached(last, DRAIN)
        .and_then(|_| confirmed(sink, last))
    {
        failures.add(e);
    }
    let committed = commits::disarm();
    done.store(true, Ordering::Relaxed);
    let advances = poller.join().expect("the position poller");
    let mut had = Vec::new();
    for ended in group.stop(&runtimes.watch) {
        match ended {
            Ok(times) => had.push(times.into_iter().collect::<HashMap<u64, Instant>>()),
            Err(e) => failures.add(e),
        }
    }
    node.stop();
    if had.len() < 2 || sent.is_empty() {
        return None;
    }
    let first = sent.iter().map(|s| s.sent).min().expect("a change");
    let took = sent.iter().map(|s| s.answered).max().expect("a change") - first;
    let kafka = |seq: u64| {
        let i = advances.partition_point(|(at, _)| *at < seq);
        advances.get(i).map(|(_, t)| *t)
    };
    let mut times = |had: &dyn Fn(&Sent) -> Option<Instant>, what: &str| {
        times(&sent, &committed, had, failures, what)
    };
    Some(Run {
        answered_rate: sent.len() as f64 / took.as_secs_f64(),
        http: times(&|s| Some(s.answered), "the answer"),
        stream: times(&|s| had[0].get(&s.seq).copied(), "SSE"),
        long_poll: times(&|s| had[1].get(&s.seq).copied(), "long-poll"),
        kafka: times(&|s| kafka(s.seq), "Kafka"),
    })
}

/// Wait until the sink's position covers `seq`.
fn confirmed(sink: &str, seq: u64) -> Result<(), String> {
    let deadline = Instant::now() + DRAIN;
    while sink_position(sink) < seq {
        if Instant::now() >= deadline {
            return Err(format!(
                "the Kafka sink did not confirm seq {seq} within {DRAIN:?}"
            ));
        }
        std::thread::sleep(POLL);
    }
    Ok(())
}

/// A thread that reads the sink's position every [`POLL`] until `done`: each new position
/// and when it was first seen.
fn poll(sink: String, done: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<(u64, Instant)>> {
    std::thread::spawn(move || {
        let mut advances: Vec<(u64, Instant)> = Vec::new();
        loop {
            // Read once more after `done`: the position the wait saw is then noted too.
            let finish = done.load(Ordering::Relaxed);
            let at = sink_position(&sink);
            if advances.last().is_none_or(|(last, _)| at > *last) {
                advances.push((at, Instant::now()));
            }
            if finish {
                return advances;
            }
            std::thread::sleep(POLL);
        }
    })
}

/// The times of `sent` to what `had` says, from each one's commit in `committed` and from
/// just before its request (`None`: never had, a failure).
fn times(
    sent: &[Sent],
    committed: &HashMap<u64, Instant>,
    had: &dyn Fn(&Sent) -> Option<Instant>,
    failures: &mut Failures,
    what: &str,
) -> Times {
    let (mut from_commit, mut from_send) = (Vec::new(), Vec::new());
    let mut missing = 0;
    for s in sent {
        let (Some(at), Some(commit)) = (had(s), committed.get(&s.seq)) else {
            missing += 1;
            continue;
        };
        from_commit.push(ms(at, *commit));
        from_send.push(ms(at, s.sent));
    }
    if missing > 0 {
        failures.add(format!(
            "{what}: {missing} of {} changes without a commit time or never had",
            sent.len()
        ));
    }
    from_commit.sort_by(f64::total_cmp);
    from_send.sort_by(f64::total_cmp);
    let pct = |v: &[f64], p| percentile(v, p).unwrap_or(f64::NAN);
    Times {
        p50: pct(&from_commit, 0.50),
        p99: pct(&from_commit, 0.99),
        max: pct(&from_commit, 1.0),
        sent_p50: pct(&from_send, 0.50),
        sent_p99: pct(&from_send, 0.99),
    }
}

/// `at - since` in milliseconds, negative when `at` came first.
fn ms(at: Instant, since: Instant) -> f64 {
    match at.checked_duration_since(since) {
        Some(d) => d.as_secs_f64() * 1000.0,
        None => -(since - at).as_secs_f64() * 1000.0,
    }
}

/// The Kafka the sink publishes to: tansu on loopback (a broker in another process, as in
/// production), or rdkafka's in-process MockCluster where tansu is not installed.
pub enum Kafka {
    Tansu(broker::Broker),
    Mock(MockCluster<'static, DefaultProducerContext>),
}

impl Kafka {
    pub fn start() -> Kafka {
        if broker::installed() {
            Kafka::Tansu(broker::Broker::start())
        } else {
            Kafka::Mock(MockCluster::new(1).expect("a Kafka MockCluster"))
        }
    }

    /// How the report names it.
    pub fn name(&self) -> &'static str {
        match self {
            Kafka::Tansu(_) => "tansu",
            Kafka::Mock(_) => "MockCluster (tansu is not installed: scripts/tansu)",
        }
    }

    pub fn brokers(&self) -> String {
        match self {
            Kafka::Tansu(b) => b.address.clone(),
            Kafka::Mock(c) => c.bootstrap_servers(),
        }
    }

    /// A topic of 8 partitions, as the other benches' (one per run).
    pub fn create_topic(&self, runtime: &tokio::runtime::Runtime, topic: &str) {
        match self {
            Kafka::Tansu(b) => runtime.block_on(b.create_topic(topic, 8)),
            Kafka::Mock(c) => c.create_topic(topic, 8, 1).expect("a topic"),
        }
    }
}
