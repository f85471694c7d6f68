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

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::env::env;
use crate::figures::{median, spread};
use ankusa::audit::{
    Change, CommitError, Context, Limits, SystemClock, Trail, TrailOptions, TreeOptions,
};
use ankusa::store::Cf;
use serde_json::json;

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
            let pair = bench_tree_on_off(n, run_for);
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

/// Committer `c`'s `i`th commit: a source created, with its row.
async fn commit_one(trail: &Trail, c: usize, i: u64) {
    let key = format!("c{c}-{i}");
    trail
        .commit(
            Context::new("bench", Some("127.0.0.1".into()), Some(key.clone())),
            move |tx| {
                let s = subject(&key);
                tx.put_json(Cf::Sources, key.clone().into_bytes(), &s)?;
                let change = Change::new("source.create", format!("sources/{key}"))
                    .tenant("tenant-0001")
                    .states(None, Some(s))
                    .revision(1)
                    .entity(
                        json!({"id": key, "tenant": "tenant-0001", "kind": "http", "revision": 1}),
                    );
                Ok::<_, CommitError<()>>((change, ()))
            },
        )
        .await
        .unwrap();
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
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

/// Slots of the interleaved measurement: short, so that the machine's drift (neighbours, the
/// disk) is alike for both trails.
const SLOT: Duration = Duration::from_millis(200);

/// Ours with the tree on and ours with it off, both trails open at once: the committers
/// commit to one trail for a [`SLOT`], then to the other, for `run_for` each, and each slot's
/// commits, time and process CPU count for its trail. (A commit in flight when the slot ends
/// finishes in the next one: as much for either trail.)
fn bench_tree_on_off(committers: usize, run_for: Duration) -> (Ours, Ours) {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    runtime().block_on(async {
        let trails = Arc::new([
            open_trail(dirs[0].path(), true),
            open_trail(dirs[1].path(), false),
        ]);
        let (stop, active) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
        );
        let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let mut tasks = vec![];
        for c in 0..committers {
            let (trails, stop, active, counts) =
                (trails.clone(), stop.clone(), active.clone(), counts.clone());
            tasks.push(tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let t = active.load(Ordering::Relaxed);
                    commit_one(&trails[t], c, i).await;
                    i += 1;
                    counts[t].fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        let (mut elapsed, mut cpu_us) = ([Duration::ZERO; 2], [0.0f64; 2]);
        let slots = 2 * (run_for.as_millis() / SLOT.as_millis()).max(1);
        for slot in 0..slots as usize {
            let t = slot % 2;
            active.store(t, Ordering::Relaxed);
            let (started, cpu) = (Instant::now(), cpu::Cpu::now(None));
            tokio::time::sleep(SLOT).await;
            elapsed[t] += started.elapsed();
            cpu_us[t] += cpu::Cpu::now(None).map_or(f64::NAN, |c| c.per_change_since(cpu, 1));
        }
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.unwrap();
        }
        let trails = Arc::into_inner(trails).expect("the committers are done");
        for trail in trails {
            trail.shutdown().await;
        }
        let ours = |t: usize| {
            let done = counts[t].load(Ordering::Relaxed);
            Ours {
                rate: done as f64 / elapsed[t].as_secs_f64(),
                cpu_us: cpu_us[t] / done.max(1) as f64,
            }
        };
        (ours(0), ours(1))
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
