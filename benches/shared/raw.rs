//! The raw baseline the commit and load benches share: N OS threads, each writing its own
//! `WriteBatch` with `sync = true` to a plain RocksDB in a temp dir, as fast as it can.
//!
//! It is the floor of what a synced store on this machine does at that concurrency: no
//! validation, no hashing, no queue to a writer thread. RocksDB itself groups the threads'
//! concurrent writes into one WAL fsync, as our writer groups its commits.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocksdb::{WriteBatch, WriteOptions, DB};

/// What one raw measurement saw.
pub struct Raw {
    /// Batches written per second, over every thread.
    pub rate: f64,
    /// Every batch's write time, sorted.
    #[allow(dead_code)] // The commit bench reads only the rate.
    pub latencies: Vec<Duration>,
}

/// Run `threads` writers for `run_for`; writer `t` fills its `i`-th batch with `fill(t, i,
/// batch)`.
pub fn synced_batches<F>(threads: usize, run_for: Duration, fill: F) -> Raw
where
    F: Fn(usize, u64, &mut WriteBatch) + Send + Sync + 'static,
{
    let dir = tempfile::tempdir().expect("tempdir");
    let mut opts = rocksdb::Options::default();
    opts.create_if_missing(true);
    let db = Arc::new(DB::open(&opts, dir.path()).expect("open a raw RocksDB"));
    let fill = Arc::new(fill);
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (db, stop, fill) = (db.clone(), stop.clone(), fill.clone());
            std::thread::spawn(move || {
                let mut wo = WriteOptions::default();
                // As the writer's commits: acknowledged only once the WAL is on disk.
                wo.set_sync(true);
                let mut latencies = Vec::new();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let mut batch = WriteBatch::default();
                    fill(t, i, &mut batch);
                    let began = Instant::now();
                    db.write_opt(batch, &wo).expect("a raw synced write");
                    latencies.push(began.elapsed());
                    i += 1;
                }
                latencies
            })
        })
        .collect();
    std::thread::sleep(run_for);
    stop.store(true, Ordering::Relaxed);
    let mut latencies: Vec<Duration> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("a raw writer thread"))
        .collect();
    // Every batch a thread began before the stop is counted, over the time they all took.
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    Raw {
        rate: latencies.len() as f64 / elapsed.as_secs_f64(),
        latencies,
    }
}
