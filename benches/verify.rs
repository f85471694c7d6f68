//! The verifiable trail on a store of a million rows (`ANKUSA_BENCH_ROWS`):
//! - `audit verify` (recompute every leaf and node, check every checkpoint) beside a bare
//!   scan of the same rows and nodes (what reading them alone costs), in rows/s;
//! - the start that adds a store's rows to the tree (the upgrade of a store written
//!   without it), in rows/s;
//! - an inclusion proof through `Trail::inclusion_proof`, p50 and p99 over 2,000 random rows.
//!
//! The rows are written straight into RocksDB as a node without the tree would have left
//! them (real rows of ~430 bytes, `m:audit_seq`), then a trail with the tree on starts on
//! them, so the bench takes seconds, not the minutes of a million commits.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ankusa::audit::tree::verify::{self, Verification};
use ankusa::audit::{SystemClock, Trail, TrailOptions};
use ankusa::store::{keys, keys::meta, Cf, Store};
use rand::Rng;

use crate::env::env;
use crate::figures::median;

#[path = "shared/env.rs"]
mod env;
#[path = "shared/figures.rs"]
mod figures;
#[path = "shared/rows.rs"]
mod rows;

/// Rounds of each measurement.
const ROUNDS: usize = 3;

fn main() {
    let rows: u64 = env("ANKUSA_BENCH_ROWS").unwrap_or(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    write_rows(dir.path(), rows);
    let started = Instant::now();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let trail = Trail::start(
        Store::open(dir.path()).unwrap(),
        TrailOptions::default(),
        Arc::new(SystemClock),
    )
    .unwrap();
    let catch_up = started.elapsed();
    runtime.block_on(trail.checkpoint_now()).unwrap();
    let proof = proof_latency(&runtime, &trail, rows);
    runtime.block_on(trail.shutdown());
    drop(trail);
    let store = Store::open(dir.path()).unwrap();
    store.quiesce().unwrap();
    println!("verifiable trail, {rows} rows, {ROUNDS} rounds");
    println!(
        "tree catch-up at start: {:.0} rows/s ({:.2} s)",
        rows as f64 / catch_up.as_secs_f64(),
        catch_up.as_secs_f64()
    );
    println!(
        "{:>8} {:>14} {:>14} {:>9}",
        "round", "verify rows/s", "scan rows/s", "ratio"
    );
    let (mut ours, mut bare) = (Vec::new(), Vec::new());
    for round in 1..=ROUNDS {
        let t = Instant::now();
        let outcome = verify::verify(&store, None, &[], &mut |_, _| {}).unwrap();
        let v = t.elapsed();
        assert!(matches!(outcome, Verification::Verified(_)), "{outcome:?}");
        let t = Instant::now();
        let scanned = scan(&store);
        let s = t.elapsed();
        assert!(scanned > rows);
        ours.push(rows as f64 / v.as_secs_f64());
        bare.push(rows as f64 / s.as_secs_f64());
        println!(
            "{round:>8} {:>14.0} {:>14.0} {:>9.2}",
            ours[round - 1],
            bare[round - 1],
            ours[round - 1] / bare[round - 1]
        );
    }
    let (ours, bare) = (median(ours), median(bare));
    println!(
        "{:>8} {ours:>14.0} {bare:>14.0} {:>9.2}",
        "median",
        ours / bare
    );
    println!(
        "inclusion proof: p50 {:.0} µs, p99 {:.0} µs",
        proof.0.as_secs_f64() * 1e6,
        proof.1.as_secs_f64() * 1e6
    );
}

/// `rows` trail rows of a source each, as a node writes them, without tree nodes.
fn write_rows(dir: &std::path::Path, rows: u64) {
    let names: Vec<&str> = Cf::ALL.iter().map(|cf| cf.name()).collect();
    let mut opts = rocksdb::Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    let db = rocksdb::DB::open_cf(&opts, dir, names).unwrap();
    let audit = db.cf_handle(Cf::Audit.name()).unwrap();
    let at = 1_700_000_000_000;
    let mut batch = rocksdb::WriteBatch::default();
    for seq in 1..=rows {
        let row = rows::source_row(seq, at, &format!("s{seq}"));
        let value = serde_json::to_vec(&row).unwrap();
        batch.put_cf(audit, keys::row_key(seq, at), value);
        if seq % 10_000 == 0 {
            db.write(std::mem::take(&mut batch)).unwrap();
        }
    }
    batch.put_cf(audit, keys::meta_key(meta::AUDIT_SEQ), rows.to_be_bytes());
    db.write(batch).unwrap();
}

/// Every row and tree node read once: what verify reads, without checking it.
fn scan(store: &Store) -> u64 {
    let mut n = 0u64;
    for prefix in [keys::ROW, keys::TILE, keys::TREE] {
        store
            .scan(Cf::Audit, &[prefix], &[prefix], |_, v| {
                n += v.len().min(1) as u64;
                true
            })
            .unwrap();
    }
    n
}

/// p50 and p99 of an inclusion proof of a random row in the newest checkpoint's tree.
fn proof_latency(
    runtime: &tokio::runtime::Runtime,
    trail: &Trail,
    rows: u64,
) -> (Duration, Duration) {
    let mut rng = rand::rng();
    let mut times: Vec<Duration> = (0..2_000)
        .map(|_| {
            let seq = rng.random_range(1..=rows);
            let t = Instant::now();
            runtime.block_on(trail.inclusion_proof(seq, None)).unwrap();
            t.elapsed()
        })
        .collect();
    times.sort();
    (times[times.len() / 2], times[times.len() * 99 / 100])
}
