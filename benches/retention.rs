//! Retention: what a sweep of a million expired rows costs the commits running beside it, and
//! what a million-row trail costs a boot.
//!
//! It builds a store of `ANKUSA_BENCH_ROWS` (default 1,000,000) expired rows shaped like real
//! ones (a serialized row of ~430 bytes and an outbox entity each), written straight into
//! RocksDB with matching `m:audit_seq` / `m:audit_usage` and a sink that confirmed them all,
//! then prints:
//! - boot time of that store with matching counters (median of 3), and with a forced
//!   recount (`m:audit_usage` deleted);
//! - commit latency (p50, p99, max) of committers at a steady rate, without a sweep for
//!   `ANKUSA_BENCH_SECS` seconds (default 10), then while a sweep deletes every expired row;
//!   the p99 ratio (target <= 2) and the sweep's rate;
//! - boot time after the sweep (the deleted rows are tombstones until compaction).
//!
//! `ANKUSA_BENCH_SWEEP_BATCH` sets `audit.sweep_batch` (default: the node's default).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ankusa::audit::{
    Change, Clock, CommitError, Context, Limits, SystemClock, Trail, TrailOptions, Usage,
};
use ankusa::store::{keys, keys::meta, Cf, Store};
use serde_json::json;

#[path = "shared/figures.rs"]
mod figures;
#[path = "shared/rows.rs"]
mod rows;
#[path = "shared/trail.rs"]
mod trail;

const DAY_MS: u64 = 86_400_000;
const SINK: &str = "bench";
/// Committers running beside the sweep, each pausing this long between commits.
const COMMITTERS: usize = 4;
const PAUSE: Duration = Duration::from_millis(2);

fn main() {
    let rows: u64 = env("ANKUSA_BENCH_ROWS", 1_000_000);
    let secs: u64 = env("ANKUSA_BENCH_SECS", 10);
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let usage = build(dir.path(), rows);
    println!(
        "built a store of {rows} expired rows ({} MB of keys and values) in {:.1} s",
        usage.bytes >> 20,
        started.elapsed().as_secs_f64()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut boots: Vec<Duration> = vec![];
        for _ in 0..3 {
            let (trail, took) = boot(dir.path());
            assert_eq!(trail.usage().rows, rows, "counters matched: no recount");
            boots.push(took);
            trail.shutdown().await;
        }
        boots.sort();
        println!(
            "boot, {rows} rows, matching counters: {:.3} s (median of 3; target <= 1 s)",
            boots[1].as_secs_f64()
        );
        delete_usage(dir.path());
        let (trail, took) = boot(dir.path());
        assert_eq!(trail.usage(), usage, "the recount found the truth");
        println!(
            "boot, {rows} rows, forced recount:   {:.3} s",
            took.as_secs_f64()
        );

        let quiet = committing(&trail, async {
            tokio::time::sleep(Duration::from_secs(secs)).await;
        })
        .await;
        let sweeping = committing(&trail, async {
            let report = trail.sweep_now().await.unwrap();
            // The sink confirmed every row: all go but the one at the cursor.
            assert_eq!(
                report.pruned,
                rows - 1,
                "every expired row below the cursor"
            );
            let deleting = report.elapsed - report.compaction;
            println!(
                "sweep: {} rows in {} batches of {}, {:.1} s ({:.0} rows/s), then {:.1} s \
                 compacting the emptied range",
                report.pruned,
                report.batches,
                trail.limits().sweep_batch,
                deleting.as_secs_f64(),
                report.pruned as f64 / deleting.as_secs_f64(),
                report.compaction.as_secs_f64()
            );
        })
        .await;
        println!("commit latency ({COMMITTERS} committers, {PAUSE:?} apart; synced):");
        println!(
            "{:>16} {:>8} {:>9} {:>9} {:>9}",
            "", "commits", "p50 ms", "p99 ms", "max ms"
        );
        for (name, l) in [("without a sweep", &quiet), ("during the sweep", &sweeping)] {
            println!(
                "{name:>16} {:>8} {:>9.2} {:>9.2} {:>9.2}",
                l.len(),
                ms(pct(l, 0.50)),
                ms(pct(l, 0.99)),
                ms(pct(l, 1.0))
            );
        }
        println!(
            "p99 during / without: {:.2} (target <= 2)",
            ms(pct(&sweeping, 0.99)) / ms(pct(&quiet, 0.99))
        );
        trail.shutdown().await;
        drop(trail);
        // The head of the trail is now a million tombstones until compaction drops them.
        let (trail, took) = boot(dir.path());
        println!(
            "boot after the sweep ({} rows left): {:.3} s",
            trail.usage().rows,
            took.as_secs_f64()
        );
        trail.shutdown().await;
    });
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn pct(sorted: &[Duration], q: f64) -> Duration {
    figures::percentile(sorted, q).unwrap_or(Duration::ZERO)
}

/// Start the trail on the store at `dir`: a sink that confirmed every built row, retention
/// of 365 days, no backlog limit (the bench's own commits are events nobody confirms).
fn boot(dir: &std::path::Path) -> (Trail, Duration) {
    let started = Instant::now();
    let store = Store::open(dir).unwrap();
    let options = TrailOptions {
        sinks: vec![SINK.into()],
        limits: Limits {
            outbox_max_backlog: u64::MAX,
            sweep_batch: env(
                "ANKUSA_BENCH_SWEEP_BATCH",
                Limits::default().sweep_batch as u64,
            ) as usize,
            ..Limits::default()
        },
        ..TrailOptions::default()
    };
    let trail = Trail::start(store, options, Arc::new(SystemClock)).unwrap();
    (trail, started.elapsed())
}

/// Commit at a steady rate from [`COMMITTERS`] tasks while `during` runs; the latencies,
/// sorted.
async fn committing(trail: &Trail, during: impl std::future::Future<Output = ()>) -> Vec<Duration> {
    let stop = Arc::new(AtomicBool::new(false));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = vec![];
    for c in 0..COMMITTERS {
        let (trail, stop, latencies) = (trail.clone(), stop.clone(), latencies.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("c{c}-{i}-{}", unique());
                i += 1;
                let started = Instant::now();
                trail
                    .commit(Context::new("bench", Some("127.0.0.1".into()), None), move |tx| {
                        let s = json!({"id": key, "tenant": "tenant-0001", "kind": "http", "revision": 1});
                        tx.put_json(Cf::Sources, key.clone().into_bytes(), &s)?;
                        let change = Change::new("source.create", format!("sources/{key}"))
                            .tenant("tenant-0001")
                            .states(None, Some(s.clone()))
                            .revision(1)
                            .entity(s);
                        Ok::<_, CommitError<()>>((change, ()))
                    })
                    .await
                    .unwrap();
                latencies.lock().unwrap().push(started.elapsed());
                tokio::time::sleep(PAUSE).await;
            }
        }));
    }
    during.await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let mut l = std::mem::take(&mut *latencies.lock().unwrap());
    l.sort();
    l
}

/// Keys unique across the phases of one run.
fn unique() -> u32 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Write `n` rows committed 400 days ago, each with an entity, and the meta that matches.
fn build(dir: &std::path::Path, n: u64) -> Usage {
    let at0 = SystemClock.now_ms() - 400 * DAY_MS;
    let row = |seq: u64| {
        let id = format!("src-{seq:08}");
        let entity = serde_json::to_vec(
            &json!({"id": id, "tenant": "tenant-0001", "kind": "http", "revision": seq}),
        )
        .unwrap();
        (rows::source_row(seq, at0 + seq / 100, &id), Some(entity))
    };
    trail::build(dir, n, row, Some(SINK))
}

fn delete_usage(dir: &std::path::Path) {
    let db = trail::raw_db(dir);
    let audit = db.cf_handle(Cf::Audit.name()).unwrap();
    db.delete_cf(audit, keys::meta_key(meta::AUDIT_USAGE))
        .unwrap();
    db.flush_cf(audit).unwrap();
}
