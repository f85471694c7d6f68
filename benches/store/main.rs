//! The shared store as a distributed engine, against Redis itself, in one run:
//!
//! 1. `drift`: the drift check's subjects/s over `ANKUSA_BENCH_ROUTES` routes (default
//!    100,000) in one Redis, beside a bare `SCAN` + pipelined `HGETALL` of the same keys in
//!    pages of the same size: the ratio is what signing and checking each subject costs.
//! 2. `replicas`: route changes/s on the Redis store with `min_replicas = 1` (a replica
//!    attached, `WAIT` after each write) beside `min_replicas = 0` on the same servers, 16
//!    writers in a closed loop for `ANKUSA_BENCH_SECS` (default 3) each.
//! 3. `failover`: a primary, its replica and a sentinel (`down-after-milliseconds` 1,000); a
//!    writer changes a route without pause; the primary is killed (SIGKILL), and the time from
//!    the kill to the first change acknowledged again is measured, `ANKUSA_BENCH_RUNS`
//!    (default 3) times, each on fresh servers, beside the sentinel's `down-after`.
//!
//! The store is measured directly (`RedisStore`), without the node's HTTP and trail in front:
//! these are the shared store's own costs. `ANKUSA_BENCH_ONLY` picks parts.

#[path = "../shared/cpu.rs"]
mod cpu;
#[path = "../shared/env.rs"]
mod env;
#[path = "../shared/figures.rs"]
mod figures;
#[path = "../shared/redis.rs"]
mod redis;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ankusa::audit::{SystemClock, Trail, TrailOptions};
use ankusa::config::RedisSettings;
use ankusa::store::Store;
use ankusa::subjects::remote::drift::Verifiable;
use ankusa::subjects::remote::redis::RedisStore;
use ankusa::subjects::remote::{Cas, Remote};
use ankusa::subjects::routes::{Route, RouteStore};

use crate::env::{env, part};
use crate::figures::median;
use crate::redis::Redis;

/// Routes per page of the bare scan: the drift check's own page.
const PAGE: usize = ankusa::subjects::remote::drift::PAGE;
/// The sentinel's `down-after-milliseconds`.
const DOWN_AFTER_MS: u64 = 1000;

fn route(id: String, revision: u64) -> Route {
    Route {
        id,
        tenant: "t1".into(),
        source: "s1".into(),
        destination: "https://example.test/bench".into(),
        filter: Default::default(),
        enabled: true,
        revision,
    }
}

fn settings<'a>(url: &'a str, sentinels: &'a [String], replicas: u32) -> RedisSettings<'a> {
    RedisSettings {
        url,
        prefix: "ankusa:",
        timeout: Duration::from_millis(500),
        sentinels,
        master: "ankusa",
        sentinel_password: None,
        min_replicas: replicas,
        min_replicas_timeout: Duration::from_millis(400),
        fleet_secret: "bench secret",
    }
}

fn store(settings: &RedisSettings<'_>) -> Arc<RouteStore> {
    Arc::new(RedisStore::<Route>::open(settings).expect("a Redis store"))
}

/// Create `count` routes, 64 at a time.
async fn fill(store: &Arc<RouteStore>, count: usize) {
    let next = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (store, next) = (store.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= count as u64 {
                        return;
                    }
                    let put = store.put(route(format!("r{n:06}"), 1), None, None).await;
                    assert!(matches!(put, Ok(Cas::Written(_))), "{put:?}");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("filler");
    }
}

/// Subjects/s of a bare `SCAN` and pipelined `HGETALL` of every route hash.
async fn bare_scan(url: &str) -> (u64, Duration) {
    let client = ::redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let started = Instant::now();
    let (mut cursor, mut count) = (0u64, 0u64);
    loop {
        let (next, keys): (u64, Vec<String>) = ::redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("ankusa:route:{*")
            .arg("COUNT")
            .arg(PAGE)
            .arg("TYPE")
            .arg("hash")
            .query_async(&mut conn)
            .await
            .unwrap();
        let mut pipe = ::redis::pipe();
        for key in &keys {
            pipe.cmd("HGETALL").arg(key);
        }
        let hashes: Vec<std::collections::HashMap<String, String>> =
            pipe.query_async(&mut conn).await.unwrap();
        count += hashes.len() as u64;
        cursor = next;
        if cursor == 0 {
            return (count, started.elapsed());
        }
    }
}

async fn drift(rounds: usize) {
    let routes: usize = env("ANKUSA_BENCH_ROUTES").unwrap_or(100_000);
    let server = Redis::start();
    let store = store(&settings(&server.url, &[], 0));
    let filled = Instant::now();
    fill(&store, routes).await;
    eprintln!("drift: {routes} routes written in {:?}", filled.elapsed());
    let dir = tempfile::tempdir().unwrap();
    let trail = Trail::start(
        Store::open(dir.path()).unwrap(),
        TrailOptions::default(),
        Arc::new(SystemClock),
    )
    .unwrap();
    let remote = Remote::new(store, trail.clone());
    let (mut checks, mut bares) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let report = remote.verify().await.expect("a drift check");
        assert_eq!((report.scanned, report.drifted), (routes as u64, 0));
        checks.push(report.scanned as f64 / (report.elapsed_ms.max(1) as f64 / 1000.0));
        let (count, took) = bare_scan(&server.url).await;
        assert_eq!(count, routes as u64);
        bares.push(count as f64 / took.as_secs_f64());
    }
    let (check, bare) = (median(checks), median(bares));
    println!("| drift check, {routes} routes | {check:.0} subjects/s | bare SCAN + HGETALL {bare:.0}/s | {:.2} (target >= 0.5) |", check / bare);
    trail.shutdown().await;
}

/// Changes/s of 16 writers on `store` for `secs`.
async fn rate(store: &Arc<RouteStore>, secs: u64, tag: &str) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..16)
        .map(|w| {
            let (store, stop, done) = (store.clone(), stop.clone(), done.clone());
            let id = format!("{tag}-{w}");
            tokio::spawn(async move {
                let mut at = None;
                let mut revision = 1;
                while !stop.load(Ordering::Relaxed) {
                    match store.put(route(id.clone(), revision), None, at).await {
                        Ok(Cas::Written(stamp)) => {
                            at = Some(stamp.version);
                            revision += 1;
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        other => panic!("a change refused: {other:?}"),
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("writer");
    }
    done.load(Ordering::Relaxed) as f64 / secs as f64
}

async fn replicas(rounds: usize) {
    let secs: u64 = env("ANKUSA_BENCH_SECS").unwrap_or(3);
    let primary = Redis::start();
    let _replica = Redis::replica_of(primary.port);
    let (none, one) = (
        store(&settings(&primary.url, &[], 0)),
        store(&settings(&primary.url, &[], 1)),
    );
    // The replica must be attached before WAIT can be answered in time.
    let attached = Instant::now();
    let mut warm = 0;
    // A write WAIT gave up on is still on the primary: each try writes a route of its own.
    while !matches!(
        one.put(route(format!("warm{warm}"), 1), None, None).await,
        Ok(Cas::Written(_))
    ) {
        warm += 1;
        assert!(
            attached.elapsed() < Duration::from_secs(20),
            "no replica attached"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (mut zeros, mut ones) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        zeros.push(rate(&none, secs, &format!("zero{round}")).await);
        ones.push(rate(&one, secs, &format!("one{round}")).await);
    }
    let (zero, one) = (median(zeros), median(ones));
    println!("| route changes, 16 writers | min_replicas = 1: {one:.0}/s | min_replicas = 0: {zero:.0}/s | {:.2} |", one / zero);
}

/// One failover: the time from the primary's kill to the sentinel naming the new primary,
/// and to the first change acknowledged again.
async fn failover_once() -> (Duration, Duration) {
    let mut primary = Redis::start();
    let _replica = Redis::replica_of(primary.port);
    let sentinel = Redis::sentinel("ankusa", primary.port, DOWN_AFTER_MS);
    let sentinels = [format!("127.0.0.1:{}", sentinel.port)];
    let store = store(&settings("redis://127.0.0.1:1/0", &sentinels, 0));
    // The sentinel must know the replica, and the replica hold the primary's data.
    let ready = Instant::now();
    let sentinel_conn = ::redis::Client::open(sentinel.url.as_str()).unwrap();
    let mut sentinel_conn = sentinel_conn
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    loop {
        let known: Vec<::redis::Value> = ::redis::cmd("SENTINEL")
            .arg("replicas")
            .arg("ankusa")
            .query_async(&mut sentinel_conn)
            .await
            .unwrap_or_default();
        if !known.is_empty() {
            break;
        }
        assert!(
            ready.elapsed() < Duration::from_secs(30),
            "no replica known to the sentinel"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let first = store.put(route("before".into(), 1), None, None).await;
    assert!(matches!(first, Ok(Cas::Written(_))), "{first:?}");
    let old_port = primary.port;
    primary.kill();
    let killed = Instant::now();
    // When the sentinel names another primary: its own part of the failover.
    let switched = tokio::spawn(async move {
        loop {
            let addr: Vec<String> = ::redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg("ankusa")
                .query_async(&mut sentinel_conn)
                .await
                .unwrap_or_default();
            if addr.get(1).is_some_and(|p| *p != old_port.to_string()) {
                return killed.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let mut n = 0u64;
    loop {
        n += 1;
        let put = store.put(route(format!("after{n}"), 1), None, None).await;
        if matches!(put, Ok(Cas::Written(_))) {
            let taken = killed.elapsed();
            return (switched.await.expect("the sentinel's switch"), taken);
        }
        assert!(
            killed.elapsed() < Duration::from_secs(60),
            "no change taken again"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn failover() {
    let runs: usize = env("ANKUSA_BENCH_RUNS").unwrap_or(3);
    let (mut switched, mut taken) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (switch, take) = failover_once().await;
        switched.push(switch.as_secs_f64() * 1000.0);
        taken.push(take.as_secs_f64() * 1000.0);
    }
    let (lo, hi) = figures::spread(&taken);
    let (switch, take) = (median(switched), median(taken));
    println!(
        "| failover, kill to the first change taken | {take:.0} ms (runs {lo:.0}-{hi:.0}) | \
         down-after {DOWN_AFTER_MS} ms; the sentinel names the new primary at {switch:.0} ms | \
         +{:.0} ms over down-after (target <= +2000), +{:.0} ms over the sentinel |",
        take - DOWN_AFTER_MS as f64,
        take - switch
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let rounds: usize = env("ANKUSA_BENCH_ROUNDS").unwrap_or(3);
    println!("| part | figure | baseline | ratio |");
    println!("|---|---|---|---|");
    runtime.block_on(async {
        if part("drift") {
            drift(rounds).await;
        }
        if part("replicas") {
            replicas(rounds).await;
        }
        if part("failover") {
            failover().await;
        }
    });
}
