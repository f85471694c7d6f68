//! Watching the lifecycle events over HTTP (`GET /admin/v1/lifecycle/events`), each figure
//! beside a baseline measured in the same run:
//!
//! 1. Commit to watcher (`latency.rs`): route changes at 1,000/s through the admin API of a
//!    node in this process, one SSE stream and one long-poll loop watching, and the node's
//!    Kafka sink (tansu) publishing the same changes: p50/p99 from just before each request
//!    to the moment each watcher has the event, and to Kafka-confirmed. Target: the
//!    watchers' p99 <= 5 ms.
//! 2. Fan-out (`fanout.rs`): events/s served to 1 and to 100 caught-up SSE watchers, summed
//!    over the watchers, while closed-loop connections change routes as fast as the node
//!    answers, beside a bare scan of the same store's outbox (`outbox::visit`). Target:
//!    delivered / bare >= 0.5 at 100 watchers.
//! 3. Memory (`memory.rs`): the peak RSS of the node as a process of its own with 500 SSE
//!    watchers caught up while changes flow, above the same node idle, beside a node taking
//!    the same changes with no watcher. Target: <= 64 MiB above idle.
//!
//! The node, the load generator and the watchers share the machine's cores: compare the
//! ratios within a run. Settings: `ANKUSA_BENCH_SECS` (time per run or point, default 5),
//! `ANKUSA_BENCH_ONLY` (`latency,fanout,memory`), `ANKUSA_BENCH_LATENCY_RUNS` (default 3),
//! `ANKUSA_BENCH_RATE` (part 1's rate, default 1000), `ANKUSA_BENCH_ROUNDS` (part 2's,
//! default 3), `ANKUSA_BENCH_WRITERS` (part 2's connections, default 64),
//! `ANKUSA_BENCH_MANY` (part 2's larger watcher count, default 100),
//! `ANKUSA_BENCH_RSS_WATCHERS` (default 500), `ANKUSA_BENCH_RSS_RATE` (part 3's rate,
//! default 1000). A run with a failure (a change refused, an event a watcher missed or had
//! twice) prints `FAILED` and exits with status 1.

// The load bench's node, changes and failure count, shared rather than copied.
#[allow(dead_code)]
#[path = "../shared/changes.rs"]
mod changes;
mod commits;
#[path = "../shared/cpu.rs"]
mod cpu;
#[path = "../shared/env.rs"]
mod env;
mod fanout;
#[path = "../shared/figures.rs"]
mod figures;
mod group;
mod latency;
mod memory;
#[path = "../shared/node.rs"]
mod node;
mod process;
mod report;
// Of the load bench's figures only `Failures`: the rest is unused here.
#[allow(dead_code, unused_imports)]
#[path = "../shared/stats.rs"]
mod stats;
mod traffic;
mod watcher;

use std::time::Duration;

use ankusa::api::auth::digest_hex;
use serde_json::{json, Value};

use crate::env::{env, part};
use crate::report::Round;
use crate::stats::Failures;

/// The prefix of the bench's own threads (the load generator's, the watchers'): their CPU
/// time is not the node's.
pub const CLIENT: &str = "load";

/// The bench token's scopes: changes, and watching.
pub const SCOPES: [&str; 4] = ["admin:read", "admin:write", "audit:read", "events:read"];

/// The bench's runtimes: the load generator's and the watchers', apart from the node's.
pub struct Runtimes {
    /// The load generator's (threads `load`).
    pub load: tokio::runtime::Runtime,
    /// The watchers' (threads `load-watch`).
    pub watch: tokio::runtime::Runtime,
}

/// `api.max_watchers` and `api.max_connections` (and per peer: every watcher comes from
/// 127.0.0.1) for `watchers`, with room for the writers and probes.
pub fn caps(watchers: usize) -> (usize, usize) {
    (watchers + 16, watchers + 256)
}

/// A node config of `node.rs` made ready to be watched: the bench's token with
/// `events:read`, and room for `watchers` (see [`caps`]).
pub fn room(v: &mut Value, watchers: usize) {
    let (max_watchers, connections) = caps(watchers);
    v["api"]["tokens"] =
        json!([{"name": "bench", "sha256": digest_hex(node::TOKEN), "scopes": SCOPES}]);
    v["api"]["max_watchers"] = json!(max_watchers);
    v["api"]["max_connections"] = json!(connections);
    v["api"]["max_connections_per_peer"] = json!(connections);
}

fn runtime(name: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name(name)
        .build()
        .expect("a runtime")
}

fn main() {
    commits::install();
    let secs: f64 = env("ANKUSA_BENCH_SECS").unwrap_or(5.0);
    let run_for = Duration::from_secs_f64(secs);
    let runtimes = Runtimes {
        load: runtime(CLIENT),
        watch: runtime("load-watch"),
    };
    let mut failures = Failures::default();
    let mut rows = Vec::new();
    if part("latency") {
        rows.extend(latency(&runtimes, run_for, &mut failures));
    }
    if part("fanout") {
        rows.extend(fanout(&runtimes, run_for, &mut failures));
    }
    if part("memory") {
        rows.extend(memory(&runtimes, run_for, &mut failures));
    }
    report::table(&rows);
    if failures.count > 0 {
        println!("FAILED: {} failures; the first:", failures.count);
        for f in &failures.samples {
            println!("  {f}");
        }
        std::process::exit(1);
    }
}

/// Part 1: its runs, and its rows.
fn latency(runtimes: &Runtimes, run_for: Duration, failures: &mut Failures) -> Vec<report::Row> {
    let runs: usize = env("ANKUSA_BENCH_LATENCY_RUNS").unwrap_or(3);
    let rate: f64 = env("ANKUSA_BENCH_RATE").unwrap_or(1000.0);
    let kafka = latency::Kafka::start();
    report::latency_header(rate, kafka.name(), runs, run_for.as_secs_f64());
    let mut done = Vec::new();
    for n in 1..=runs {
        let (topic, sink) = (format!("lifecycle-{n}"), format!("kafka{n}"));
        kafka.create_topic(&runtimes.load, &topic);
        let kafka = (kafka.brokers(), topic, sink);
        let target = (kafka.0.as_str(), kafka.1.as_str(), kafka.2.as_str());
        if let Some(run) = latency::run(runtimes, target, rate, run_for, failures) {
            report::latency_run(n, &run);
            done.push(run);
        }
    }
    match done.is_empty() {
        true => vec![],
        false => report::latency_rows(&done, rate),
    }
}

/// Part 2: its rounds (no watcher, one, many), each with a bare scan, and its rows.
fn fanout(runtimes: &Runtimes, run_for: Duration, failures: &mut Failures) -> Vec<report::Row> {
    let rounds: usize = env("ANKUSA_BENCH_ROUNDS").unwrap_or(3);
    let writers: usize = env("ANKUSA_BENCH_WRITERS").unwrap_or(64);
    let many: usize = env("ANKUSA_BENCH_MANY").unwrap_or(100);
    report::fanout_header(rounds, writers, run_for.as_secs_f64());
    let mut done = Vec::new();
    for round in 1..=rounds {
        let mut points = Vec::new();
        let mut scan = None;
        for watchers in [0, 1, many] {
            let dir = tempfile::tempdir().expect("tempdir");
            let store = dir.path().join("data");
            let point = fanout::point(runtimes, watchers, writers, run_for, &store, failures);
            let Some(point) = point else { continue };
            report::fanout_point(round, &point);
            points.push(point);
            if watchers == many {
                scan = Some(fanout::bare_scan(&store));
            }
        }
        if let (Some((events, scan)), 3) = (scan, points.len()) {
            let round_figures = Round { points, scan };
            report::fanout_scan(round, events, &round_figures);
            done.push(round_figures);
        }
    }
    match done.is_empty() {
        true => vec![],
        false => report::fanout_rows(&done, many),
    }
}

/// Part 3: a phase with no watcher, then one with many, and its row.
fn memory(runtimes: &Runtimes, run_for: Duration, failures: &mut Failures) -> Vec<report::Row> {
    let watchers: usize = env("ANKUSA_BENCH_RSS_WATCHERS").unwrap_or(500);
    let rate: f64 = env("ANKUSA_BENCH_RSS_RATE").unwrap_or(100.0);
    report::memory_header(rate, run_for.as_secs_f64());
    let alone = memory::phase(runtimes, 0, rate, run_for, failures);
    alone.iter().for_each(report::memory_phase);
    let Some(watched) = memory::phase(runtimes, watchers, rate, run_for, failures) else {
        return vec![];
    };
    report::memory_phase(&watched);
    vec![report::memory_row(alone.as_ref(), &watched)]
}
