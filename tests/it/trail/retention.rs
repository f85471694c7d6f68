//! Retention: expired rows are deleted oldest first with their outbox entities, never at or
//! above the lifecycle cursor while sinks are configured; `m:audit_usage` stays exact and is
//! recounted at boot when it cannot be believed. (A kill -9 during a sweep is in
//! `crash::sweep`; a read that fails mid-sweep, in `failpoints::retention`.)

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::support::trail::*;
use ankusa::audit::{Clock, Limits, ManualClock, Trail, TrailOptions, Usage};
use ankusa::store::{keys, keys::meta, Cf, Store};

pub(crate) const DAY: u64 = 86_400_000;
/// A fixed start, so every row time in these tests is known.
pub(crate) const T0: u64 = 1_700_000_000_000;

pub(crate) fn limits(retention_days: u64, sweep_batch: usize) -> Limits {
    Limits {
        retention: Duration::from_millis(retention_days * DAY),
        sweep_batch,
        ..Limits::default()
    }
}

pub(crate) fn open(dir: &Path, sinks: &[&str], limits: Limits, clock: &Arc<ManualClock>) -> Trail {
    let store = Store::open(dir).expect("open store");
    let options = TrailOptions {
        lifecycle: true,
        sinks: sinks.iter().map(|s| s.to_string()).collect(),
        limits,
        ..TrailOptions::default()
    };
    Trail::start(store, options, clock.clone()).expect("start trail")
}

pub(crate) async fn create_sources(trail: &Trail, ids: std::ops::Range<u64>) {
    for i in ids {
        create_source(trail, ctx("ops"), &format!("s{i}"), "hunter2")
            .await
            .unwrap();
    }
}

fn seqs(store: &Store) -> Vec<u64> {
    all_rows(store).iter().map(|r| r.seq).collect()
}

pub(crate) fn entity_seqs(store: &Store) -> Vec<u64> {
    all_keys(store, Cf::Audit)
        .iter()
        .filter_map(|k| keys::decode_seq_key(keys::OUTBOX, k))
        .collect()
}

/// The counters the trail keeps (in memory and in `m:audit_usage`) equal a full count.
pub(crate) fn assert_counters_true(trail: &Trail) {
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
    // cursor goes; the row at the cursor and every unseen event stay. (The node is in use
    // meanwhile: a trail expires nothing within the retention of its newest row.)
    clock.advance(400 * DAY);
    create_sources(&trail, 11..12).await; // seq 11, fresh
    let report = trail.sweep_now().await.unwrap();
    assert_eq!(report.pruned, 3);
    assert_eq!(report.cursor, Some(4));
    assert_eq!(report.blocked_by_cursor, 7);
    assert_eq!(seqs(trail.store()), (4..=11).collect::<Vec<_>>());
    assert_eq!(entity_seqs(trail.store()), (4..=11).collect::<Vec<_>>());
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
    assert_eq!(seqs(trail.store()), vec![10, 11]);
    // A newer change is published: the last expired rows are no longer held.
    create_sources(&trail, 12..13).await; // seq 12, fresh
    trail.advance("hook", 12, vec![]).await.unwrap();
    let report = trail.sweep_now().await.unwrap();
    assert_eq!((report.pruned, report.blocked_by_cursor), (2, 0));
    assert_eq!(seqs(trail.store()), vec![12]);
    assert_eq!(entity_seqs(trail.store()), vec![12]);
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
    create_sources(&trail, 11..12).await; // seq 11, fresh: the trail's newest row
    let report = trail.sweep_now().await.unwrap();
    assert_eq!((report.pruned, report.blocked_by_cursor), (1, 9));
    assert_eq!(seqs(trail.store()), (2..=11).collect::<Vec<_>>());
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
