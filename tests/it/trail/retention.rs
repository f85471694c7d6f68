//! Retention: expired rows are deleted oldest first with their outbox entities, never at or
//! above the lifecycle cursor while sinks are configured; `m:audit_usage` stays exact and is
//! recounted at boot when it cannot be believed; a kill -9 during a sweep loses nothing the
//! sinks have not seen.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::support::trail::*;
use ankusa::audit::{Clock, Limits, ManualClock, Trail, TrailOptions, Usage};
use ankusa::store::{keys, keys::meta, Cf, Store};

const DAY: u64 = 86_400_000;
/// A fixed start, so every row time in these tests is known.
const T0: u64 = 1_700_000_000_000;

fn limits(retention_days: u64, sweep_batch: usize) -> Limits {
    Limits {
        retention: Duration::from_millis(retention_days * DAY),
        sweep_batch,
        ..Limits::default()
    }
}

fn open(dir: &Path, sinks: &[&str], limits: Limits, clock: &Arc<ManualClock>) -> Trail {
    let store = Store::open(dir).expect("open store");
    let options = TrailOptions {
        lifecycle: true,
        sinks: sinks.iter().map(|s| s.to_string()).collect(),
        limits,
        ..TrailOptions::default()
    };
    Trail::start(store, options, clock.clone()).expect("start trail")
}

async fn create_sources(trail: &Trail, ids: std::ops::Range<u64>) {
    for i in ids {
        create_source(trail, ctx("ops"), &format!("s{i}"), "hunter2")
            .await
            .unwrap();
    }
}

fn seqs(store: &Store) -> Vec<u64> {
    all_rows(store).iter().map(|r| r.seq).collect()
}

fn entity_seqs(store: &Store) -> Vec<u64> {
    all_keys(store, Cf::Audit)
        .iter()
        .filter_map(|k| keys::decode_seq_key(keys::OUTBOX, k))
        .collect()
}

/// The counters the trail keeps (in memory and in `m:audit_usage`) equal a full count.
fn assert_counters_true(trail: &Trail) {
    let store = trail.store();
    let seq = store.meta_u64(meta::AUDIT_SEQ).unwrap();
    let truth = Usage::recount(store, seq).unwrap();
    let stored = Usage::decode(&store.meta(meta::AUDIT_USAGE).unwrap().unwrap()).unwrap();
    assert_eq!(stored, truth, "m:audit_usage");
    assert_eq!(trail.usage(), truth, "Trail::usage");
}

#[tokio::test]
async fn expired_rows_are_deleted_oldest_first_with_their_entities() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let trail = open(dir.path(), &[], limits(1, 3), &clock);
    create_sources(&trail, 1..11).await; // seqs 1..=10 at T0
    clock.set(T0 + 2 * DAY);
    create_sources(&trail, 11..16).await; // seqs 11..=15, fresh
    assert_eq!(entity_seqs(trail.store()), (1..=15).collect::<Vec<_>>());

    // One batch: the three oldest, with their entities.
    let cutoff = clock.now_ms() - DAY;
    let batch = trail.sweep_batch(cutoff, 3).await.unwrap();
    assert_eq!((batch.pruned, batch.more, batch.cursor), (3, true, None));
    assert_eq!(seqs(trail.store()), (4..=15).collect::<Vec<_>>());
    assert_eq!(entity_seqs(trail.store()), (4..=15).collect::<Vec<_>>());
    assert_counters_true(&trail);

    // A whole sweep: the rest of the expired rows, in batches of three; the fresh stay.
    let report = trail.sweep_now().await.unwrap();
    assert_eq!(report.pruned, 7);
    assert_eq!(report.batches, 3, "3 + 3 + 1");
    assert_eq!(report.blocked_by_cursor, 0);
    assert_eq!(seqs(trail.store()), (11..=15).collect::<Vec<_>>());
    assert_eq!(entity_seqs(trail.store()), (11..=15).collect::<Vec<_>>());
    assert_counters_true(&trail);
    let stats = trail.stats();
    assert_eq!(stats.pruned.retention, 10);
    assert_eq!(stats.last_sweep_at, Some(T0 + 2 * DAY));
    let metrics = ankusa::telemetry::render();
    assert!(
        metrics.contains("ankusa_audit_pruned_rows_total{reason=\"retention\"} 10"),
        "{metrics}"
    );
    // The subjects themselves are not the trail's: they stay.
    assert_eq!(all_keys(trail.store(), Cf::Sources).len(), 15);
    trail.shutdown().await;
}

#[tokio::test]
async fn rows_at_or_above_the_cursor_outlive_the_retention_until_the_sink_catches_up() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let trail = open(dir.path(), &["hook"], limits(365, 1000), &clock);
    create_sources(&trail, 1..11).await; // seqs 1..=10
    trail.advance("hook", 4, vec![]).await.unwrap();

    // The sink is down for longer than the retention: only what it confirmed below the
    // cursor goes; the row at the cursor and every unseen event stay.
    clock.advance(400 * DAY);
    let report = trail.sweep_now().await.unwrap();
    assert_eq!(report.pruned, 3);
    assert_eq!(report.cursor, Some(4));
    assert_eq!(report.blocked_by_cursor, 7);
    assert_eq!(seqs(trail.store()), (4..=10).collect::<Vec<_>>());
    assert_eq!(entity_seqs(trail.store()), (4..=10).collect::<Vec<_>>());
    assert_eq!(trail.stats().blocked_by_cursor, 7);
    let metrics = ankusa::telemetry::render();
    assert!(
        metrics.contains("ankusa_audit_retention_blocked_by_cursor 7"),
        "{metrics}"
    );
    clock.advance(400 * DAY);
    let report = trail.sweep_now().await.unwrap();
    assert_eq!((report.pruned, report.blocked_by_cursor), (0, 7));

    // It catches up: everything below the cursor goes, the row at the cursor stays.
    trail.advance("hook", 10, vec![]).await.unwrap();
    let report = trail.sweep_now().await.unwrap();
    assert_eq!((report.pruned, report.blocked_by_cursor), (6, 1));
    assert_eq!(seqs(trail.store()), vec![10]);
    // A newer change is published: the last expired row is no longer held.
    create_sources(&trail, 11..12).await; // seq 11, fresh
    trail.advance("hook", 11, vec![]).await.unwrap();
    let report = trail.sweep_now().await.unwrap();
    assert_eq!((report.pruned, report.blocked_by_cursor), (1, 0));
    assert_eq!(seqs(trail.store()), vec![11]);
    assert_eq!(entity_seqs(trail.store()), vec![11]);
    assert_counters_true(&trail);
    trail.shutdown().await;
}

#[tokio::test]
async fn the_slowest_of_two_sinks_holds_the_rows() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let trail = open(dir.path(), &["fast", "slow"], limits(1, 1000), &clock);
    create_sources(&trail, 1..11).await;
    trail.advance("fast", 10, vec![]).await.unwrap();
    trail.advance("slow", 2, vec![]).await.unwrap();
    clock.advance(2 * DAY);
    let report = trail.sweep_now().await.unwrap();
    assert_eq!((report.pruned, report.blocked_by_cursor), (1, 9));
    assert_eq!(seqs(trail.store()), (2..=10).collect::<Vec<_>>());
    trail.shutdown().await;
}

/// Open the store's RocksDB directly (the node is stopped) to damage `m:audit_usage`.
fn damage_usage(dir: &Path, value: Option<&[u8]>) {
    let db = open_stopped(dir);
    let audit = db.cf_handle(Cf::Audit.name()).unwrap();
    let key = keys::meta_key(meta::AUDIT_USAGE);
    match value {
        Some(v) => db.put_cf(audit, key, v).unwrap(),
        None => db.delete_cf(audit, key).unwrap(),
    }
}

#[tokio::test]
async fn a_missing_corrupt_or_stale_usage_is_recounted_at_boot() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let trail = open(dir.path(), &[], limits(1, 1000), &clock);
    create_sources(&trail, 1..11).await;
    clock.advance(2 * DAY);
    create_sources(&trail, 11..21).await;
    trail.sweep_now().await.unwrap(); // deletions are part of the truth
    let truth = trail.usage();
    assert_eq!(truth.rows, 10);
    trail.shutdown().await;
    drop(trail);

    let stale = Usage {
        seq: truth.seq - 1,
        ..truth
    };
    let undercounted = Usage {
        rows: 0,
        bytes: 0,
        ..truth
    };
    let damage: [(&str, Option<Vec<u8>>); 4] = [
        ("missing", None),
        ("corrupt", Some(b"{\"rows\": 12, \"by".to_vec())),
        ("stale", Some(stale.encode())),
        ("inconsistent", Some(undercounted.encode())),
    ];
    for (i, (reason, value)) in damage.into_iter().enumerate() {
        damage_usage(dir.path(), value.as_deref());
        let trail = open(dir.path(), &[], limits(1, 1000), &clock);
        assert_eq!(trail.usage(), truth, "{reason}: recounted to the truth");
        assert_counters_true(&trail);
        let metrics = ankusa::telemetry::render();
        let line = format!("ankusa_audit_usage_recounts_total{{reason=\"{reason}\"}} 1");
        assert!(metrics.contains(&line), "{reason}: {metrics}");
        // The recount was written: the next boot believes it.
        trail.shutdown().await;
        drop(trail);
        let trail = open(dir.path(), &[], limits(1, 1000), &clock);
        let recounts = ankusa::telemetry::render()
            .lines()
            .filter(|l| l.starts_with("ankusa_audit_usage_recounts_total"))
            .count();
        assert_eq!(recounts, i + 1, "no recount of a good usage");
        trail.shutdown().await;
    }
}

#[cfg(feature = "failpoints")]
#[tokio::test]
async fn a_read_failure_mid_sweep_keeps_what_was_staged_counted() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let trail = open(dir.path(), &[], limits(1, 1000), &clock);
    let mut tasks = vec![];
    for w in 0..10 {
        let trail = trail.clone();
        tasks.push(tokio::spawn(async move {
            create_sources(&trail, w * 60..w * 60 + 60).await
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    clock.advance(2 * DAY);
    // The first chunk of the oldest rows is read and staged, the next read fails: the batch
    // goes out with the deletions staged so far, and with the counters that count them out.
    fail::cfg("audit::prune_read", "1*off->return").unwrap();
    let failed = trail.sweep_batch(clock.now_ms() - DAY, 1000).await;
    fail::remove("audit::prune_read");
    assert!(failed.is_err());
    assert!(trail.usage().rows < 600, "the first chunk was deleted");
    assert_counters_true(&trail);
    let report = trail.sweep_now().await.unwrap();
    assert_eq!(trail.usage().rows, 0, "{report:?}");
    assert_counters_true(&trail);
    trail.shutdown().await;
    scenario.teardown();
}

#[cfg(feature = "failpoints")]
mod kill_9 {
    //! A program that commits while sweeping is SIGKILLed at random moments inside sweeps.
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::sync::mpsc;
    use std::time::Duration;

    use ankusa::audit::Usage;
    use ankusa::store::{keys, keys::meta, Cf, Store};
    use rand::Rng;

    use crate::support::trail::all_rows;

    const KILLS: u64 = 12;

    #[test]
    fn kill_9_during_a_sweep_keeps_counters_exact_and_every_unseen_row() {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = rand::rng();
        let mut acked = Vec::new();
        let mut swept_total = 0;
        for round in 0..KILLS {
            let mut child = Command::new(env!("CARGO_BIN_EXE_ankusa-crashtest"))
                .arg("sweep")
                .arg(dir.path())
                .arg(round.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn crashsweep");
            let stdout = child.stdout.take().unwrap();
            let (tx, lines) = mpsc::channel();
            let reader = std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
            // Kill it right after it asked the writer for the n-th sweep batch, with commits
            // in flight: early (deep in the expired rows) or late (where the sweep meets the
            // cursor and the sink moves it on).
            let kill_at = rng.random_range(1..30);
            let mut sweeps = 0;
            loop {
                let line = lines
                    .recv_timeout(Duration::from_secs(60))
                    .expect("crashsweep output");
                if line.starts_with("sweep") {
                    sweeps += 1;
                    if sweeps == kill_at {
                        break;
                    }
                }
                if let Some(seq) = line.strip_prefix("ack ") {
                    acked.push(seq.parse::<u64>().unwrap());
                }
                if line.starts_with("swept") {
                    swept_total += 1;
                }
            }
            child.kill().expect("SIGKILL");
            child.wait().unwrap();
            reader.join().unwrap();
            for line in lines.try_iter() {
                if let Some(seq) = line.strip_prefix("ack ") {
                    acked.push(seq.parse::<u64>().unwrap());
                }
            }
            check(dir.path(), &acked);
        }
        assert!(swept_total > 0, "no sweep batch completed in any round");
    }

    /// After a kill: the counters equal a full count, every row at or above the persisted
    /// cursor is there (seqs are dense: nothing is refused), every acknowledged commit at or
    /// above it is there, and rows and entities go together.
    fn check(dir: &std::path::Path, acked: &[u64]) {
        let store = Store::open(dir).expect("reopen after kill");
        let seq = store.meta_u64(meta::AUDIT_SEQ).unwrap();
        let truth = Usage::recount(&store, seq).unwrap();
        let stored = Usage::decode(&store.meta(meta::AUDIT_USAGE).unwrap().unwrap()).unwrap();
        assert_eq!(stored, truth, "m:audit_usage agrees with the trail");
        let cursor = store.meta_u64(meta::LIFECYCLE_CURSOR).unwrap();
        let rows = all_rows(&store);
        let present: Vec<u64> = rows.iter().map(|r| r.seq).collect();
        let first = present.first().copied().unwrap_or(seq + 1);
        assert!(
            first <= cursor.max(1),
            "a row at or above the cursor {cursor} is gone (first {first})"
        );
        assert_eq!(
            present,
            (first..=seq).collect::<Vec<_>>(),
            "only a prefix was deleted"
        );
        for s in acked.iter().filter(|s| **s >= cursor) {
            assert!(
                present.binary_search(s).is_ok(),
                "acknowledged row {s} lost"
            );
        }
        for row in &rows {
            let entity = store.get(Cf::Audit, &keys::outbox_key(row.seq)).unwrap();
            assert_eq!(
                entity.is_some(),
                row.publish,
                "row {} and its entity",
                row.seq
            );
        }
        let orphans = super::entity_seqs(&store)
            .into_iter()
            .filter(|s| present.binary_search(s).is_err())
            .count();
        assert_eq!(orphans, 0, "an entity outlived its row");
    }
}
