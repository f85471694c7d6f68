//! Commit throughput: the audit writer's group commit beside raw synced RocksDB batches.
//!
//! For 1, 8 and 64 concurrent committers it measures, for a fixed time each:
//! - ours: `Trail::commit` of a source write plus its row (the real path: validation on the
//!   writer thread, hashing, one synced batch per group);
//! - raw: the same number of OS threads each writing a `WriteBatch` of the same bytes (the
//!   subject value, a row of the same size and the meta counters) with `sync = true`;
//! - ours without the Merkle tree (`audit.tree = false`): what the tree costs (on/off), in
//!   commits/s and in the process's CPU per commit (`cpu off/on`: the CPU a commit takes
//!   without the tree over with it). Where the commits are CPU-bound (64 committers on 2
//!   cores) the rate follows the CPU, and the CPU moves far less from round to round.
//!
//! Synced writes on a shared machine vary a lot from second to second, so each concurrency
//! runs [`ROUNDS`] rounds of ours (tree on and off back to back, in turns first) and raw; it
//! prints every round, the median of ours and of raw and their ratio, the median of the
//! rounds' on/off ratios with their range, and ours at 64 over ours at 1 (medians). With
//! `TMPDIR` on a tmpfs (`TMPDIR=/dev/shm`) a sync costs next to nothing, so every
//! concurrency is CPU-bound: on/off is then the tree's whole cost, with no disk to hide it.
//! `ANKUSA_BENCH_SECS` sets the time per measurement (default 2); `ANKUSA_BENCH_OURS_ONLY=N`
//! measures only ours at N committers, once (for a profiler; `ANKUSA_BENCH_TREE=off` without
//! the tree). `ANKUSA_BENCH_MAX_ROWS=N` sets
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

#[path = "shared/cpu.rs"]
mod cpu;
#[path = "shared/env.rs"]
mod env;
#[path = "shared/raw.rs"]
mod raw;

/// Rounds of ours and raw per concurrency.
const ROUNDS: usize = 5;

fn main() {
    let secs: u64 = env("ANKUSA_BENCH_SECS").unwrap_or(2);
    let run_for = Duration::from_secs(secs);
    println!("commit throughput, synced writes, {ROUNDS} rounds of {secs} s per measurement");
    if let Some(n) = env("ANKUSA_BENCH_OURS_ONLY") {
        // One measurement of ours alone, for a profiler.
        let tree = env::<String>("ANKUSA_BENCH_TREE").as_deref() != Some("off");
        let ours = bench_ours(n, run_for, tree);
        println!(
            "{n:>11} committers: ours {:.0}/s, {:.1} us CPU a commit",
            ours.rate, ours.cpu_us
        );
        return;
    }
    println!(
        "{:>11} {:>14} {:>14} {:>9} {:>14} {:>9} {:>8} {:>8} {:>11}",
        "committers",
        "ours/s",
        "raw/s",
        "ours/raw",
        "tree off/s",
        "on/off",
        "cpu us",
        "off us",
        "cpu off/on"
    );
    let mut ours_at = vec![];
    for n in [1usize, 8, 64] {
        let mut rounds = Vec::with_capacity(ROUNDS);
        for round in 1..=ROUNDS {
            // Tree on and off back to back, in turns first, so that the disk's drift over a
            // round falls on both alike.
            let (on, off) = if round % 2 == 1 {
                let on = bench_ours(n, run_for, true);
                (on, bench_ours(n, run_for, false))
            } else {
                let off = bench_ours(n, run_for, false);
                (bench_ours(n, run_for, true), off)
            };
            let raw = bench_raw(n, run_for);
            print_row(n, (on, raw, off), &format!("round {round}"));
            rounds.push((on, raw, off));
        }
        let on = Ours::median(rounds.iter().map(|r| r.0));
        let raw = median(rounds.iter().map(|r| r.1).collect());
        let off = Ours::median(rounds.iter().map(|r| r.2));
        print_row(n, (on, raw, off), "median");
        let paired = |f: fn(&(Ours, f64, Ours)) -> f64| {
            let mut ratios: Vec<f64> = rounds.iter().map(f).collect();
            ratios.sort_by(f64::total_cmp);
            (ratios[0], ratios[ratios.len() / 2], ratios[ratios.len() - 1])
        };
        let (lo, mid, hi) = paired(|r| r.0.rate / r.2.rate);
        let (cpu_lo, cpu_mid, cpu_hi) = paired(|r| r.2.cpu_us / r.0.cpu_us);
        println!(
            "{n:>11} tree on/off, median of the rounds' ratios: {mid:.2} ({lo:.2}-{hi:.2}); \
             cpu off/on {cpu_mid:.2} ({cpu_lo:.2}-{cpu_hi:.2})"
        );
        ours_at.push(on.rate);
    }
    println!(
        "group commit: ours at 64 / ours at 1 = {:.1}x (medians)",
        ours_at[2] / ours_at[0]
    );
}

/// One line of the table: ours, raw and ours without the tree at `n` committers.
fn print_row(n: usize, (on, raw, off): (Ours, f64, Ours), what: &str) {
    println!(
        "{n:>11} {:>14.0} {raw:>14.0} {:>9.2} {:>14.0} {:>9.2} {:>8.1} {:>8.1} {:>11.2}   {what}",
        on.rate,
        on.rate / raw,
        off.rate,
        on.rate / off.rate,
        on.cpu_us,
        off.cpu_us,
        off.cpu_us / on.cpu_us
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

/// One measurement of ours: commits/s and the process's CPU per commit.
#[derive(Clone, Copy)]
struct Ours {
    rate: f64,
    cpu_us: f64,
}

impl Ours {
    /// The median rate and the median CPU of `rounds` (each apart).
    fn median(rounds: impl Iterator<Item = Ours> + Clone) -> Ours {
        Ours {
            rate: median(rounds.clone().map(|o| o.rate).collect()),
            cpu_us: median(rounds.map(|o| o.cpu_us).collect()),
        }
    }
}

fn bench_ours(committers: usize, run_for: Duration, tree: bool) -> Ours {
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
        let (started, cpu) = (Instant::now(), cpu::Cpu::now(None));
        tokio::time::sleep(run_for).await;
        let done = count.load(Ordering::Relaxed);
        let elapsed = started.elapsed();
        let cpu_us = cpu::Cpu::now(None).map_or(f64::NAN, |c| {
            c.per_change_since(cpu, done as usize)
        });
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.unwrap();
        }
        trail.shutdown().await;
        Ours {
            rate: done as f64 / elapsed.as_secs_f64(),
            cpu_us,
        }
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
