//! Commit throughput: the audit writer's group commit beside raw synced RocksDB batches.
//!
//! For 1, 8 and 64 concurrent committers it measures, for a fixed time each:
//! - ours: `Trail::commit` of a source write plus its row (the real path: validation on the
//!   writer thread, hashing, one synced batch per group);
//! - raw: the same number of OS threads each writing a `WriteBatch` of the same bytes (the
//!   subject value, a row of the same size and the meta counters) with `sync = true`;
//! - ours without the Merkle tree (`audit.tree = false`): what the tree costs (on/off).
//!
//! Synced writes on a shared machine vary a lot from second to second, so each concurrency
//! runs [`ROUNDS`] rounds of ours and raw back to back; it prints every round, the median of
//! ours and of raw and their ratio, and ours at 64 over ours at 1 (medians).
//! `ANKUSA_BENCH_SECS` sets the time per measurement (default 2); `ANKUSA_BENCH_OURS_ONLY=N`
//! measures only ours at N committers, once (for a profiler). `ANKUSA_BENCH_MAX_ROWS=N` sets
//! `audit.max_rows`: with a small N (10000) the trail reaches it within the first round, and
//! from then on every change prunes the oldest row in its own batch (ours at a ceiling).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::env::env;
use ankusa::audit::{
    Change, CommitError, Context, Limits, SystemClock, Trail, TrailOptions, TreeOptions,
};
use ankusa::store::Cf;
use serde_json::json;

#[path = "shared/env.rs"]
mod env;
#[path = "shared/raw.rs"]
mod raw;

/// Rounds of ours and raw per concurrency.
const ROUNDS: usize = 3;

fn main() {
    let secs: u64 = env("ANKUSA_BENCH_SECS").unwrap_or(2);
    let run_for = Duration::from_secs(secs);
    println!("commit throughput, synced writes, {ROUNDS} rounds of {secs} s per measurement");
    if let Some(n) = env("ANKUSA_BENCH_OURS_ONLY") {
        // One measurement of ours alone, for a profiler.
        println!(
            "{n:>11} committers: ours {:.0}/s",
            bench_ours(n, run_for, true)
        );
        return;
    }
    println!(
        "{:>11} {:>14} {:>14} {:>9} {:>14} {:>9}",
        "committers", "ours/s", "raw/s", "ours/raw", "tree off/s", "on/off"
    );
    let mut ours_at = vec![];
    for n in [1usize, 8, 64] {
        let mut ours = Vec::with_capacity(ROUNDS);
        let mut raw = Vec::with_capacity(ROUNDS);
        let mut off = Vec::with_capacity(ROUNDS);
        for round in 1..=ROUNDS {
            ours.push(bench_ours(n, run_for, true));
            raw.push(bench_raw(n, run_for));
            off.push(bench_ours(n, run_for, false));
            let (o, r, f) = (ours[round - 1], raw[round - 1], off[round - 1]);
            println!(
                "{n:>11} {o:>14.0} {r:>14.0} {:>9.2} {f:>14.0} {:>9.2}   round {round}",
                o / r,
                o / f
            );
        }
        let (ours, raw, off) = (median(ours), median(raw), median(off));
        println!(
            "{n:>11} {ours:>14.0} {raw:>14.0} {:>9.2} {off:>14.0} {:>9.2}   median",
            ours / raw,
            ours / off
        );
        ours_at.push(ours);
    }
    println!(
        "group commit: ours at 64 / ours at 1 = {:.1}x (medians)",
        ours_at[2] / ours_at[0]
    );
}

fn median(mut figures: Vec<f64>) -> f64 {
    figures.sort_by(f64::total_cmp);
    figures[figures.len() / 2]
}

/// A subject of about the size of a real source (~300 bytes of JSON).
fn subject(key: &str) -> serde_json::Value {
    json!({
        "id": key, "tenant": "tenant-0001", "kind": "http", "revision": 1,
        "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "config": {"url": "https://example.invalid/hooks/ingest", "timeout_ms": 5000, "headers": {"x-env": "prod"}}
    })
}

fn bench_ours(committers: usize, run_for: Duration, tree: bool) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = ankusa::store::Store::open(dir.path()).unwrap();
        let options = TrailOptions {
            limits: Limits {
                max_rows: env("ANKUSA_BENCH_MAX_ROWS").unwrap_or(Limits::default().max_rows),
                ..Limits::default()
            },
            tree: TreeOptions {
                enabled: tree,
                ..TreeOptions::default()
            },
            ..TrailOptions::default()
        };
        let trail = Trail::start(store, options, Arc::new(SystemClock)).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));
        let mut tasks = vec![];
        for c in 0..committers {
            let (trail, stop, count) = (trail.clone(), stop.clone(), count.clone());
            tasks.push(tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("c{c}-{i}");
                    i += 1;
                    trail
                        .commit(Context::new("bench", Some("127.0.0.1".into()), Some(key.clone())), move |tx| {
                            let s = subject(&key);
                            tx.put_json(Cf::Sources, key.clone().into_bytes(), &s)?;
                            let change = Change::new("source.create", format!("sources/{key}"))
                                .tenant("tenant-0001")
                                .states(None, Some(s))
                                .revision(1)
                                .entity(json!({"id": key, "tenant": "tenant-0001", "kind": "http", "revision": 1}));
                            Ok::<_, CommitError<()>>((change, ()))
                        })
                        .await
                        .unwrap();
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        let started = Instant::now();
        tokio::time::sleep(run_for).await;
        let done = count.load(Ordering::Relaxed);
        let elapsed = started.elapsed();
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.unwrap();
        }
        trail.shutdown().await;
        done as f64 / elapsed.as_secs_f64()
    })
}

fn bench_raw(threads: usize, run_for: Duration) -> f64 {
    // The bytes one commit of ours writes: subject, row, outbox entity, two meta counters.
    let value = serde_json::to_vec(&subject("c0-0")).unwrap();
    let row = vec![b'r'; 430];
    let entity = vec![b'e'; 70];
    raw::synced_batches(threads, run_for, move |t, i, b| {
        b.put(format!("s/t{t}-{i}"), &value);
        b.put(format!("a/t{t}-{i}"), &row);
        b.put(format!("o/t{t}-{i}"), &entity);
        b.put(b"m:audit_seq", i.to_be_bytes());
        b.put(b"m:audit_usage", br#"{"rows":1,"bytes":1,"seq":1}"#);
    })
    .rate
}
