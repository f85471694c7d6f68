//! Committers driving `Trail::commit` as an operator's changes do (a source created, with its
//! row), and the interleaved measurement of two trails: both open at once, the committers
//! switching from one to the other every [`SLOT`], so that what the machine does meanwhile
//! (neighbours, the disk's stalls) falls on both alike. The commit bench sets the tree on
//! beside off with it, the audit bench the index entries on beside off.

// Each bench includes this file and uses some of it.
#![allow(dead_code)]

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ankusa::audit::{Change, CommitError, Context, Trail};
use ankusa::store::Cf;
use serde_json::json;

use crate::cpu;

/// A subject of about the size of a real source (~300 bytes of JSON).
pub fn subject(key: &str) -> serde_json::Value {
    json!({
        "id": key, "tenant": "tenant-0001", "kind": "http", "revision": 1,
        "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "config": {"url": "https://example.invalid/hooks/ingest", "timeout_ms": 5000, "headers": {"x-env": "prod"}}
    })
}

/// One measurement of ours: commits/s and the process's CPU per commit.
#[derive(Clone, Copy)]
pub struct Ours {
    pub rate: f64,
    pub cpu_us: f64,
}

/// Committer `c`'s `i`th commit: a source created, with its row.
pub async fn commit_one(trail: &Trail, c: usize, i: u64) {
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

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Slots of the interleaved measurement: short, so that the machine's drift (neighbours, the
/// disk) is alike for both trails.
pub const SLOT: Duration = Duration::from_millis(200);

/// Ours on two trails open at once, each on a fresh store in a directory of its own that
/// `open(dir, side)` opens (side 0, then 1): the committers commit to one trail for a
/// [`SLOT`], then to the other, for `run_for` each, and each slot's commits, time and process
/// CPU count for its trail. (A commit in flight when the slot ends finishes in the next one:
/// as much for either trail.)
pub fn interleaved(
    committers: usize,
    run_for: Duration,
    open: impl Fn(&Path, usize) -> Trail,
) -> (Ours, Ours) {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    runtime().block_on(async {
        let trails = Arc::new([open(dirs[0].path(), 0), open(dirs[1].path(), 1)]);
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
