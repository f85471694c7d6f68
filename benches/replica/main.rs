//! Replica benchmarks (issue 16), in one run:
//!
//! - Snapshot: `ANKUSA_BENCH_ROUTES` (default 100,000) routes created in Redis through
//!   `Routes` from 64 tasks, each change published through the Kafka sink to rdkafka's
//!   MockCluster, timed from the first change's start until the sink has confirmed the last
//!   one; then a snapshot of those routes (`Snapshots::take`), timed from its start until the
//!   sink has confirmed its finished marker. Events/s of both and their ratio (target: the
//!   snapshot at least as fast per event as the changes).
//! - Follow: `ANKUSA_BENCH_EVENTS` (default 100,000) route events published by the real
//!   publisher into tansu, then read in rounds, back to back: a bare rdkafka consumer reading
//!   every partition until it has every record (parsing nothing), and `ankusa follow kafka`
//!   (`replica::kafka::follow`, until caught up) applying them into a replica file. Records/s
//!   of both, their ratio, medians (target >= 0.8).
//!
//! Run with `cargo bench --bench replica` (release). `ANKUSA_BENCH_ONLY` picks parts
//! (`snapshot,follow`; both by default); `ANKUSA_BENCH_IN_FLIGHT` sets the publisher's
//! attempts in flight (default 4). redis-server (`scripts/deps`) and tansu (`scripts/tansu`)
//! must be installed; a part whose server is missing is skipped with a line saying so.

#[allow(dead_code)]
#[path = "../shared/backlog.rs"]
mod backlog;
#[allow(dead_code)]
#[path = "../shared/clock.rs"]
mod clock;
#[path = "../shared/cpu.rs"]
mod cpu;
#[path = "../shared/env.rs"]
mod env;
#[path = "../shared/figures.rs"]
mod figures;
mod follow;
mod publishing;
#[path = "../shared/redis.rs"]
mod redis;
#[allow(dead_code)]
#[path = "../shared/report.rs"]
mod report;
mod snapshot;

const TOPIC: &str = "lifecycle";
/// Partitions of the topic, as the publish benchmark's.
const PARTITIONS: i32 = 8;

use crate::env::part;

fn main() {
    // As the node does, so that the figures are the node's.
    ankusa::purge_idle_memory();
    let routes = env_count("ANKUSA_BENCH_ROUTES", 100_000);
    let events = env_count("ANKUSA_BENCH_EVENTS", 100_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        if part("snapshot") {
            if installed("redis-server") {
                snapshot::snapshot(routes).await;
            } else {
                println!(
                    "snapshot skipped: redis-server is not installed (scripts/deps installs it)"
                );
            }
        }
        if part("follow") {
            if ankusa_sinks::test_support::broker::installed() {
                follow::follow(events).await;
            } else {
                println!("follow skipped: tansu is not installed (scripts/tansu installs it)");
            }
        }
    });
}

/// A positive count from `var`, `default` when unset.
fn env_count(var: &str, default: u64) -> u64 {
    match std::env::var(var) {
        Err(_) => default,
        Ok(v) => match v.parse::<u64>() {
            Ok(n) if n > 0 => n,
            _ => {
                eprintln!("{var}={v:?} is not a positive number");
                std::process::exit(2);
            }
        },
    }
}

/// Whether `program` is on `PATH`.
fn installed(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}
