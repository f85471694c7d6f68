//! Commit throughput: the audit writer's group commit beside raw synced RocksDB batches.
//!
//! For 1, 8 and 64 concurrent committers it measures, for a fixed time each:
//! - ours: `Trail::commit` of a source write plus its row (the real path: validation on the
//!   writer thread, hashing, one synced batch per group);
//! - raw: the same number of OS threads each writing a `WriteBatch` of the same bytes (the
//!   subject value, a row of the same size and the meta counters) with `sync = true`;
//! - ours with the Merkle tree on and off (`audit.tree = false`), interleaved: two trails
//!   open at once, the committers switching between them every 200 ms, so that what the
//!   machine does meanwhile falls on both alike. `on/off` is what the tree costs in commits/s,
//!   `cpu off/on` in the process's CPU per commit.
//!
//! Synced writes on a shared machine vary a lot from second to second, so each concurrency
//! runs [`ROUNDS`] rounds; it prints every round, the medians of ours, raw, ours/raw, on/off
//! and cpu off/on (with the range of the last two), and ours at 64 over ours at 1. With
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

use crate::committers::{commit_one, interleaved, runtime, subject, Ours};
use crate::env::env;
use crate::figures::{median, spread};
use ankusa::audit::{Limits, SystemClock, Trail, TrailOptions, TreeOptions};

#[path = "shared/committers.rs"]
mod committers;
#[path = "shared/cpu.rs"]
mod cpu;
#[path = "shared/env.rs"]
mod env;
#[path = "shared/figures.rs"]
mod figures;
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
        "{:>11} {:>10} {:>10} {:>9} {:>10} {:>10} {:>7} {:>7} {:>7} {:>10}",
        "committers",
        "ours/s",
        "raw/s",
        "ours/raw",
        "tree on/s",
        "off/s",
        "on/off",
        "on us",
        "off us",
        "cpu off/on"
    );
    let mut ours_at = vec![];
    for n in [1usize, 8, 64] {
        let mut rounds = Vec::with_capacity(ROUNDS);
        for round in 1..=ROUNDS {
            let ours = bench_ours(n, run_for, true);
            let raw = bench_raw(n, run_for);
            let pair = interleaved(n, run_for, |dir, side| open_trail(dir, side == 0));
            let row = Round { ours, raw, pair };
            row.print(n, &format!("round {round}"));
            rounds.push(row);
        }
        let figure = |f: fn(&Round) -> f64| median(rounds.iter().map(f).collect());
        let range = |f: fn(&Round) -> f64| spread(&rounds.iter().map(f).collect::<Vec<_>>());
        let (ours, raw) = (figure(|r| r.ours.rate), figure(|r| r.raw));
        let (on_off, cpu) = (
            |r: &Round| r.pair.0.rate / r.pair.1.rate,
            |r: &Round| r.pair.1.cpu_us / r.pair.0.cpu_us,
        );
        let ((lo, hi), (cpu_lo, cpu_hi)) = (range(on_off), range(cpu));
        println!(
            "{n:>11} median: ours {ours:.0}/s, raw {raw:.0}/s, ours/raw {:.2}; tree on/off {:.2} \
             ({lo:.2}-{hi:.2}), cpu off/on {:.2} ({cpu_lo:.2}-{cpu_hi:.2})",
            figure(|r| r.ours.rate / r.raw),
            figure(on_off),
            figure(cpu),
        );
        ours_at.push(ours);
    }
    println!(
        "group commit: ours at 64 / ours at 1 = {:.1}x (medians)",
        ours_at[2] / ours_at[0]
    );
}

/// One round at one concurrency: ours alone, raw, and ours with the tree on and off
/// interleaved.
struct Round {
    ours: Ours,
    raw: f64,
    pair: (Ours, Ours),
}

impl Round {
    fn print(&self, n: usize, what: &str) {
        let (on, off) = self.pair;
        println!(
            "{n:>11} {:>10.0} {:>10.0} {:>9.2} {:>10.0} {:>10.0} {:>7.2} {:>7.1} {:>7.1} {:>10.2}   {what}",
            self.ours.rate,
            self.raw,
            self.ours.rate / self.raw,
            on.rate,
            off.rate,
            on.rate / off.rate,
            on.cpu_us,
            off.cpu_us,
            off.cpu_us / on.cpu_us
        );
    }
}

/// A trail on a store in `dir`, with the tree on or off.
fn open_trail(dir: &std::path::Path, tree: bool) -> Trail {
    let store = ankusa::store::Store::open(dir).unwrap();
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
    Trail::start(store, options, Arc::new(SystemClock)).unwrap()
}

fn bench_ours(committers: usize, run_for: Duration, tree: bool) -> Ours {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let trail = open_trail(dir.path(), tree);
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));
        let mut tasks = vec![];
        for c in 0..committers {
            let (trail, stop, count) = (trail.clone(), stop.clone(), count.clone());
            tasks.push(tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    commit_one(&trail, c, i).await;
                    i += 1;
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        let (started, cpu) = (Instant::now(), cpu::Cpu::now(None));
        tokio::time::sleep(run_for).await;
        let done = count.load(Ordering::Relaxed);
        let elapsed = started.elapsed();
        let cpu_us =
            cpu::Cpu::now(None).map_or(f64::NAN, |c| c.per_change_since(cpu, done as usize));
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
