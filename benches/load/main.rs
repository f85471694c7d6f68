//! Changes through the admin API of the real node over loopback, beside raw synced RocksDB
//! batches, in one run.
//!
//! 1. Throughput: for 1, 8 and 64 connections (HTTP/1.1 keep-alive, one request in flight
//!    each, closed loop), changes/s and p50/p99 of an override, a source change and a route
//!    change (memory route store, and Redis: a redis-server the bench starts on loopback),
//!    beside raw synced batches of about the same bytes from as many OS threads. Each point
//!    is a fresh node on a fresh store; every request must be a real change (its status and
//!    an `X-Audit-Seq`), and failures are counted and printed. CPU per change is the node's
//!    (the process's, apart from the load generator's threads) and, for the Redis route
//!    store, redis-server's beside it: the two share the machine's cores.
//! 2. The issue's ratios, per round and their median: route/override at 64 connections, and
//!    route at 64 / route at 1, for both route stores. Each round also measures both pairs
//!    taking turns every 250 ms on one node (`closed::interleaved`), for both
//!    stores: a slow spell of the machine then falls on both sides alike.
//! 3. Commit to Kafka-confirmed (see `kafka.rs`): route changes at 1,000/s and at half the
//!    highest route rate of part 1, `ANKUSA_BENCH_LATENCY_RUNS` runs each, with the HTTP p99
//!    of each run beside its confirmed p99, so commit and delivery tails are told apart.
//!
//! Each round measures every point once, in the same order, so the figures of a round saw
//! the same machine; the table gives medians over `ANKUSA_BENCH_ROUNDS` rounds (default 3).
//! `ANKUSA_BENCH_SECS` is the time per point (default 3); `ANKUSA_BENCH_ONLY` picks parts
//! (`throughput,latency`; without throughput, the half rate is `ANKUSA_BENCH_HALF_RATE`,
//! default 1,000); `ANKUSA_BENCH_REDIS_FSYNC` is the Redis `appendfsync` (default everysec);
//! `ANKUSA_BENCH_POINT=route:64` measures one point alone, once (for a profiler);
//! `ANKUSA_BENCH_POINT=mixed` (override and route) or `scale` (route at 64 and at 1) a pair
//! taking turns, once (`mixed-redis`, `scale-redis`: with Redis).
//! A run with a failure exits with status 1.

#[path = "../shared/changes.rs"]
mod changes;
mod closed;
#[path = "../shared/cpu.rs"]
mod cpu;
#[path = "../shared/env.rs"]
mod env;
#[path = "../shared/figures.rs"]
mod figures;
mod kafka;
#[path = "../shared/node.rs"]
mod node;
#[path = "../shared/raw.rs"]
mod raw;
#[path = "../shared/redis.rs"]
mod redis;
mod report;
#[path = "../shared/stats.rs"]
mod stats;

use std::time::Duration;

use rdkafka::mocking::MockCluster;
use serde_json::json;

use crate::changes::Kind;
use crate::env::{env, part};
use crate::node::Node;
use crate::redis::Redis;
use crate::report::{Mixed, Pair, Series, Table};
use crate::stats::{Failures, Point};

/// The prefix of the load generator's thread names (its CPU time is not the node's).
pub const GENERATOR: &str = "load";

/// Connections of the throughput points.
pub const CONNS: [usize; 3] = [1, 8, 64];

fn main() {
    let run_for = Duration::from_secs_f64(env("ANKUSA_BENCH_SECS").unwrap_or(3.0));
    let rounds: usize = env("ANKUSA_BENCH_ROUNDS").unwrap_or(3);
    let load = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name(GENERATOR)
        .build()
        .expect("the load generator's runtime");
    if let Ok(one) = std::env::var("ANKUSA_BENCH_POINT") {
        // A pair taking turns, once: `mixed`, `scale` (`-redis`: with Redis).
        if let Some((pair, store)) = Pair::parse(&one) {
            let redis = Redis::start();
            let [a, b] = interleaved(&load, &redis, pair, store, 1, run_for);
            let [an, bn] = pair.names();
            println!(
                "{one}: {an} {:.0}/s (p99 {:.2} ms), {bn} {:.0}/s (p99 {:.2} ms), {} {:.2}, {} failed",
                a.rate,
                a.p99,
                b.rate,
                b.p99,
                pair.ratio_name(),
                pair.ratio([a.rate, b.rate]),
                a.failures.count + b.failures.count
            );
            return;
        }
        // One point alone, once, for a profiler: `<series>:<connections>`.
        let Some((series, n)) = one
            .split_once(':')
            .and_then(|(s, n)| Some((Series::parse(s)?, n.parse().ok()?)))
        else {
            eprintln!(
                "ANKUSA_BENCH_POINT: expected <series>:<connections>, a series one of {}, or a pair taking turns: mixed, scale, mixed-redis, scale-redis",
                Series::names()
            );
            std::process::exit(2);
        };
        let redis = Redis::start();
        let point = measure(&load, &redis, series, n, 1, run_for);
        println!(
            "{one}: {:.0}/s, p50 {:.2} ms, p99 {:.2} ms, {:.0} us CPU a change{} (the load generator {} us){}, {} failed",
            point.rate,
            point.p50,
            point.p99,
            point.cpu_us,
            report::redis_cpu(point.redis_us),
            report::micros(point.load_us),
            report::stages(&point.stages),
            point.failures.count
        );
        return;
    }
    let mut failures = Failures::default();
    let mut half_rate = env("ANKUSA_BENCH_HALF_RATE").unwrap_or(1000.0);
    if part("throughput") {
        let redis = Redis::start();
        println!(
            "load bench: the node over loopback, {rounds} rounds of {:.1} s per point; Redis appendfsync {}",
            run_for.as_secs_f64(),
            redis.fsync
        );
        let mut table = Table::default();
        let mut mixed = Mixed::default();
        for round in 1..=rounds {
            for n in CONNS {
                for series in Series::ALL {
                    let point = measure(&load, &redis, series, n, round, run_for);
                    table.add(round, series, n, point);
                }
            }
            for pair in Pair::ALL {
                for store in ["memory", "redis"] {
                    let points = interleaved(&load, &redis, pair, store, round, run_for);
                    mixed.add(round, pair, store, points);
                }
            }
        }
        table.print();
        mixed.print();
        half_rate = table.max_route_rate() / 2.0;
        failures.merge(table.failures());
        failures.merge(mixed.failures());
    }
    if part("latency") {
        failures.merge(latency(&load, half_rate, run_for));
    }
    if failures.count > 0 {
        println!("FAILED: {} failed requests; the first:", failures.count);
        for f in &failures.samples {
            println!("  {f}");
        }
        std::process::exit(1);
    }
}

/// `pair` taking turns on a fresh node whose route store is `store` (`memory` or `redis`).
fn interleaved(
    load: &tokio::runtime::Runtime,
    redis: &Redis,
    pair: Pair,
    store: &str,
    round: usize,
    run_for: Duration,
) -> [Point; 2] {
    let node = Node::start(|v| {
        if store == "redis" {
            routes_on(v, redis, &format!("bench-{round}-{pair:?}:"));
        }
    });
    let points = closed::interleaved(load, &node.base, pair.sides(), run_for);
    node.stop();
    points
}

/// A node config's routes in `redis` under `prefix`: one of its own per measurement, so
/// that each starts with no routes.
fn routes_on(v: &mut serde_json::Value, redis: &Redis, prefix: &str) {
    v["routes"]["store"] = json!("redis");
    v["routes"]["redis_url"] = json!(redis.url);
    v["routes"]["key_prefix"] = json!(prefix);
}

/// One throughput point of `series` at `n` connections, on a fresh node (or raw store).
fn measure(
    load: &tokio::runtime::Runtime,
    redis: &Redis,
    series: Series,
    n: usize,
    round: usize,
    run_for: Duration,
) -> Point {
    let node = match series {
        Series::Raw => return raw_point(n, run_for),
        Series::RouteRedis => Node::start(|v| routes_on(v, redis, &format!("bench-{round}-{n}:"))),
        _ => Node::start(|_| {}),
    };
    let kind = match series {
        Series::Override => Kind::Override,
        Series::Source => Kind::Source,
        _ => Kind::Route,
    };
    let server = (series == Series::RouteRedis).then_some(redis);
    let point = closed::measure(load, &node.base, kind, n, run_for, server);
    node.stop();
    point
}

/// Raw synced batches from `n` threads, each of about a change's bytes: a source-sized
/// value, a row, an outbox entity and the two meta counters (as `benches/commit.rs`).
fn raw_point(n: usize, run_for: Duration) -> Point {
    let value = vec![b's'; 300];
    let (row, entity) = (vec![b'r'; 430], vec![b'e'; 70]);
    let before = cpu::Cpu::now(Some(GENERATOR));
    let raw = raw::synced_batches(n, run_for, move |t, i, b| {
        b.put(format!("s/t{t}-{i}"), &value);
        b.put(format!("a/t{t}-{i}"), &row);
        b.put(format!("o/t{t}-{i}"), &entity);
        b.put(b"m:audit_seq", i.to_be_bytes());
        b.put(b"m:audit_usage", br#"{"rows":1,"bytes":1,"seq":1}"#);
    });
    let cpu_us = cpu::Cpu::now(Some(GENERATOR)).map_or(f64::NAN, |c| {
        c.per_change_since(before, raw.latencies.len())
    });
    Point {
        rate: raw.rate,
        p50: stats::percentile(&raw.latencies, 0.50),
        p99: stats::percentile(&raw.latencies, 0.99),
        cpu_us,
        redis_us: f64::NAN,
        load_us: f64::NAN,
        stages: [f64::NAN; 4],
        failures: Failures::default(),
    }
}

/// Part 3: the commit-to-confirmed runs at 1,000/s and at `half_rate`, to a MockCluster.
fn latency(load: &tokio::runtime::Runtime, half_rate: f64, run_for: Duration) -> Failures {
    let runs: usize = env("ANKUSA_BENCH_LATENCY_RUNS").unwrap_or(3);
    let cluster = MockCluster::new(1).expect("a Kafka MockCluster");
    let brokers = cluster.bootstrap_servers();
    println!(
        "commit to Kafka-confirmed (MockCluster), route changes (memory store), open loop on {} connections, {:.1} s per run; latencies in ms",
        kafka::conns(),
        run_for.as_secs_f64()
    );
    println!(
        "{:>8} {:>4} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "rate/s", "run", "answered/s", "http p50", "http p99", "conf p50", "conf p99", "conf max"
    );
    let mut failures = Failures::default();
    for (r, rate) in [1000.0, half_rate].into_iter().enumerate() {
        let mut p99s = vec![];
        for run in 1..=runs {
            let topic = format!("lifecycle-{r}-{run}");
            cluster.create_topic(&topic, 8, 1).expect("a topic");
            let sink = format!("kafka{r}x{run}");
            let k = kafka::run(load, &brokers, &topic, &sink, rate, run_for);
            println!(
                "{:>8.0} {run:>4} {:>10.0} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2}{}{}",
                k.rate,
                k.answered_rate,
                k.http_p50,
                k.http_p99,
                k.confirmed_p50,
                k.confirmed_p99,
                k.confirmed_max,
                report::stages(&k.stages),
                report::failed(&k.failures)
            );
            p99s.push(k.confirmed_p99);
            failures.merge(k.failures);
        }
        let (lo, hi) = figures::spread(&p99s);
        println!(
            "{rate:>8.0} confirmed p99 over {runs} runs: {lo:.2}-{hi:.2} ms (median {:.2})",
            stats::median(p99s.clone())
        );
    }
    failures
}
