//! The auditor's view (issue 51): questions about a big trail answered through the rows'
//! index entries beside a full scan, and what writing the entries costs the commits.
//!
//! - **queries**: a trail of `ANKUSA_BENCH_ROWS` rows (default 1,000,000; `spread.rs` says
//!   how they are spread) built straight into a store as a node writes one (rows and index
//!   entries, `shared/trail.rs`), a trail started on it, then one actor's 1,000 rows, one
//!   subject's history and one hour's rows, each answered through the indexes
//!   (`Trail::page`, paged as `GET /admin/v1/audit` pages) and by a full scan with the same
//!   filter, taking turns (`queries.rs`): p50, p99 and scan/index (target >= 100x, index
//!   p99 <= 20 ms);
//! - **commits**: commits/s with the index entries beside without, interleaved, at 1, 8 and
//!   64 committers (`commits.rs`; target >= 0.9);
//! - **console**: a real node on the same store serving the console's Trail page (by the
//!   actor, by the hour) and Subject page, timed by its own `Server-Timing` and to the last
//!   byte (`console.rs`; target p99 <= 50 ms).
//!
//! `ANKUSA_BENCH_ONLY` picks parts (`queries,commits,console`), `ANKUSA_BENCH_ROUNDS` the
//! queries' rounds (default 5: a scan and 40 index answers per question each),
//! `ANKUSA_BENCH_SECS` the seconds per commit measurement (default 2).

use std::sync::Arc;
use std::time::{Duration, Instant};

use ankusa::audit::{Clock, Limits, SystemClock, Trail, TrailOptions};
use ankusa::store::Store;

use crate::env::{env, part};

mod commits;
#[path = "../shared/committers.rs"]
mod committers;
mod console;
#[path = "../shared/cpu.rs"]
mod cpu;
#[path = "../shared/env.rs"]
mod env;
#[path = "../shared/figures.rs"]
mod figures;
#[path = "../shared/node.rs"]
mod node;
mod queries;
#[path = "../shared/rows.rs"]
mod rows;
mod spread;
#[path = "../shared/trail.rs"]
mod trail;

/// Index answers per question and round: enough for a p99 over the rounds.
const PER_ROUND: usize = 40;

fn main() {
    let (queries, console) = (part("queries"), part("console"));
    let built = (queries || console).then(|| build(env("ANKUSA_BENCH_ROWS").unwrap_or(1_000_000)));
    if let (true, Some((dir, spread))) = (queries, &built) {
        let rounds = env("ANKUSA_BENCH_ROUNDS").unwrap_or(5);
        queries_part(dir.path(), spread, rounds);
    }
    if part("commits") {
        commits::run(Duration::from_secs(env("ANKUSA_BENCH_SECS").unwrap_or(2)));
    }
    if let (true, Some((dir, spread))) = (console, &built) {
        console::print(&console::run(dir.path(), &spread.questions()));
    }
}

/// A trail of `n` rows, spread as `spread.rs` says, built in a directory of its own.
fn build(n: u64) -> (tempfile::TempDir, spread::Spread) {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut spread = spread::Spread::new(n, SystemClock.now_ms());
    trail::build(dir.path(), n, |seq| (spread.row(seq), None), None);
    println!(
        "built a trail of {n} rows with their index entries in {:.1} s ({} MiB on disk)",
        started.elapsed().as_secs_f64(),
        disk_bytes(dir.path()) >> 20
    );
    (dir, spread)
}

/// Start a node's trail on the store at `dir` and answer the questions both ways.
fn queries_part(dir: &std::path::Path, spread: &spread::Spread, rounds: usize) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let trail = runtime.block_on(async { open(dir) });
    let questions = spread.questions();
    let answered = queries::answer(&runtime, &trail, &questions, (rounds, PER_ROUND));
    queries::print(&answered);
    runtime.block_on(trail.shutdown());
}

/// A node's trail on the built store; retention long enough that no row of even a 10M-row
/// trail (some 420 days) is swept while the questions run.
fn open(dir: &std::path::Path) -> Trail {
    let options = TrailOptions {
        limits: Limits {
            retention: Duration::from_secs(10 * 365 * 86_400),
            ..Limits::default()
        },
        ..TrailOptions::default()
    };
    Trail::start(Store::open(dir).unwrap(), options, Arc::new(SystemClock)).unwrap()
}

/// The bytes of the files under `dir`.
fn disk_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}
