//! Publisher throughput, latency and memory, beside bare baselines, in one run.
//!
//! - Kafka: drain a backlog of `ANKUSA_BENCH_EVENTS` (default 100,000) flagged rows through the
//!   Kafka sink to rdkafka's in-process MockCluster, beside a bare rdkafka producer (same
//!   settings: idempotent, acks=all, linger.ms=1) sending the same records, pre-encoded, and awaiting every
//!   delivery report.
//! - Kafka on a real broker: the same against tansu (a Kafka-compatible broker, started here on a
//!   loopback port with in-memory storage; `scripts/tansu` installs it).
//! - Webhook: drain 20,000 events to an axum receiver on loopback, beside a bare reqwest loop
//!   sending the same requests (same headers and bodies, pre-built) with the same concurrency.
//! - Latency: commit-to-confirmed (the sink's persisted position covers the row) p50/p99 at a
//!   steady 1,000 changes/s for 5 s, Kafka MockCluster sink.
//! - Memory: peak RSS of a process draining a 500,000-event backlog to a file sink (the store
//!   is filled by another process first, so only the drain counts), and its RSS once the store
//!   is open, before the drain (with the part of it that is mapped code).
//!
//! Throughput rounds also print the process's CPU time per event, ours beside the baseline's,
//! and the median of their ratio: on a busy two-core machine, where the rates swing with the
//! neighbours, it is the steadier figure, and the ratio the rates tend to when both cores are
//! busy (a real broker's own CPU, in another process, is not in it).
//!
//! Run with `cargo bench --bench publish` (release). `ANKUSA_BENCH_EVENTS` scales the backlog;
//! `ANKUSA_BENCH_BATCH` sets the publisher's batch (default 1000); `ANKUSA_BENCH_IN_FLIGHT`
//! its attempts in flight (default 4); `ANKUSA_BENCH_ONLY` picks parts
//! (`kafka,broker,webhook,latency,rss`; all by default). The process modes (`--fill`,
//! `--drain`, `--drain-kafka`, `--read`, `--drain-webhook`, `--bare-webhook`) run one part in
//! a process of its own: see `--help`.

#[path = "../shared/backlog.rs"]
mod backlog;
#[path = "../shared/clock.rs"]
mod clock;
#[path = "../shared/env.rs"]
mod env;
#[path = "../shared/figures.rs"]
mod figures;
mod kafka;
mod latency;
mod memory;
mod profile;
#[path = "../shared/report.rs"]
mod report;
mod webhook;

use std::path::PathBuf;

use ankusa_sinks::test_support::broker;
use clap::{ArgGroup, Parser};
use rdkafka::mocking::MockCluster;

use crate::env::part;
use crate::report::report;

const TOPIC: &str = "lifecycle";
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The whole comparison, or one process mode.
#[derive(Parser)]
#[command(name = "publish", about = "Publisher throughput, latency and memory")]
#[command(group(ArgGroup::new("mode").multiple(false)))]
struct Cli {
    /// Fill the store at DIR with N rows, then exit (the memory figure's first process).
    #[arg(long, group = "mode", num_args = 2, value_names = ["DIR", "N"])]
    fill: Option<Vec<String>>,
    /// Drain the N rows of the store at DIR to a file sink and print its memory figures, KiB:
    /// peak, RSS before the drain, mapped files before the drain.
    #[arg(long, group = "mode", num_args = 2, value_names = ["DIR", "N"])]
    drain: Option<Vec<String>>,
    /// Drain the store at DIR to a Kafka MockCluster and print the rate.
    #[arg(long, group = "mode", value_name = "DIR")]
    drain_kafka: Option<PathBuf>,
    /// Read the store at DIR and build its events, and print the time per event.
    #[arg(long, group = "mode", value_name = "DIR")]
    read: Option<PathBuf>,
    /// Drain the store at DIR to a webhook receiver on loopback and print the rate.
    #[arg(long, group = "mode", value_name = "DIR")]
    drain_webhook: Option<PathBuf>,
    /// Send the requests of the store at DIR with the bare reqwest loop and print the rate.
    #[arg(long, group = "mode", value_name = "DIR")]
    bare_webhook: Option<PathBuf>,
    /// Passed by `cargo bench`.
    #[arg(long, hide = true)]
    bench: bool,
    /// A filter `cargo bench` may pass on: there is one benchmark, so it is ignored.
    #[arg(hide = true)]
    filter: Vec<String>,
}

/// A `DIR N` pair of `--fill` or `--drain`.
fn dir_and_count(pair: &[String]) -> (String, u64) {
    (
        pair[0].clone(),
        pair[1].parse().expect("N is a number of rows"),
    )
}

fn main() {
    // As the node does, so that the memory figures are the node's.
    ankusa::purge_idle_memory();
    let cli = Cli::parse();
    if let Some(pair) = &cli.fill {
        let (store, n) = dir_and_count(pair);
        return memory::fill_process(&store, n);
    }
    if let Some(pair) = &cli.drain {
        let (store, n) = dir_and_count(pair);
        return memory::drain_process(&store, n);
    }
    let path = |p: &PathBuf| p.to_str().expect("a UTF-8 path").to_owned();
    if let Some(store) = &cli.drain_kafka {
        return profile::drain_kafka_process(&path(store));
    }
    if let Some(store) = &cli.read {
        return profile::read_process(&path(store));
    }
    if let Some(store) = &cli.drain_webhook {
        return profile::drain_webhook_process(&path(store));
    }
    if let Some(store) = &cli.bare_webhook {
        return profile::bare_webhook_process(&path(store));
    }
    compare();
}

/// Runs of the latency part (`ANKUSA_BENCH_LATENCY_RUNS`, default 3).
fn latency_runs() -> usize {
    std::env::var("ANKUSA_BENCH_LATENCY_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(3)
}

/// Every part `ANKUSA_BENCH_ONLY` picks, ours beside its baseline.
fn compare() {
    let events: u64 = std::env::var("ANKUSA_BENCH_EVENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let runtime = runtime();
    println!("publisher benchmark ({events} events for Kafka, 20000 for webhooks)");
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, 8, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    runtime.block_on(async {
        if part("kafka") {
            report("kafka (mock)", "bare producer", &kafka::kafka(&brokers, events).await);
        }
        if part("broker") && !broker::installed() {
            println!("kafka (tansu) skipped: tansu is not installed (scripts/tansu installs it)");
        } else if part("broker") {
            let broker = broker::Broker::start();
            broker.create_topic(TOPIC, 8).await;
            report("kafka (tansu)", "bare producer", &kafka::kafka(&broker.address, events).await);
        }
        if part("webhook") {
            report("webhook", "bare reqwest ", &webhook::webhook(20_000).await);
        }
        if part("latency") {
            // A p99 holds only if it holds in repeated runs: three, each printed.
            let runs = latency_runs();
            let mut p99s = Vec::with_capacity(runs);
            for run in 1..=runs {
                let s = latency::latency(&brokers).await;
                for (stage, l) in [
                    ("committed", s.committed),
                    ("delivered", s.delivered),
                    ("confirmed", s.confirmed),
                ] {
                    println!(
                        "latency run {run} at 1000 changes/s, commit->{stage}: p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
                        l.p50, l.p99, l.max
                    );
                }
                p99s.push(s.confirmed.p99);
            }
            let (min, max) = figures::spread(&p99s);
            println!(
                "latency commit->confirmed p99 over {runs} runs: min {min:.2} ms  median {:.2} ms  max {max:.2} ms",
                figures::median(p99s)
            );
        }
    });
    if part("rss") {
        let rss = memory::rss_drain(500_000);
        let mib = |kib: u64| kib as f64 / 1024.0;
        println!(
            "peak RSS draining 500000 events to a file sink: {:.1} MiB (before the drain, store open: {:.1} MiB, of which {:.1} MiB mapped files)",
            mib(rss.peak),
            mib(rss.before),
            mib(rss.before_files)
        );
    }
}

/// A multi-threaded runtime with every driver on.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}
