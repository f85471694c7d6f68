//! Ceilings: a trail at `max_rows` / `max_bytes` prunes its oldest published rows to make
//! room for a change, in the change's batch; when nothing can be pruned, or the lifecycle
//! outbox backlog is full, an operator's change is refused with `AuditBacklog` and writes
//! nothing, while a change the node makes itself still goes through.

use std::path::Path;
use std::sync::Arc;

use crate::support::trail::*;
use ankusa::audit::{
    Change, CommitError, Context, Limits, ManualClock, Trail, TrailOptions, Usage,
};
use ankusa::store::{keys, keys::meta, Cf, Store};

fn open(dir: &Path, sinks: &[&str], limits: Limits) -> Trail {
    let store = Store::open(dir).expect("open store");
    let options = TrailOptions {
        lifecycle: true,
        sinks: sinks.iter().map(|s| s.to_string()).collect(),
        limits,
        ..TrailOptions::default()
    };
    Trail::start(
        store,
        options,
        Arc::new(ManualClock::new(1_700_000_000_000)),
    )
    .expect("start trail")
}

fn limits(max_rows: u64, max_bytes: u64, outbox_max_backlog: u64) -> Limits {
    Limits {
        max_rows,
        max_bytes,
        outbox_max_backlog,
        ..Limits::default()
    }
}

async fn create(trail: &Trail, id: u64) -> Result<u64, CommitError<TestRefusal>> {
    create_source(trail, ctx("ops"), &format!("s{id}"), "hunter2")
        .await
        .map(|c| c.seq)
}

/// A change that is not a lifecycle event (no entity).
async fn set_override(trail: &Trail, id: u64) -> Result<u64, CommitError<()>> {
    trail
        .commit(ctx("ops"), move |tx| {
            tx.put(
                Cf::Overrides,
                format!("t1/o{id}").into_bytes(),
                b"{}".to_vec(),
            )?;
            Ok((
                Change::new("override.set", format!("overrides/o{id}")).tenant("t1"),
                (),
            ))
        })
        .await
        .map(|c| c.seq)
}

fn seqs(store: &Store) -> Vec<u64> {
    all_rows(store).iter().map(|r| r.seq).collect()
}

fn has_entity(store: &Store, seq: u64) -> bool {
    store
        .get(Cf::Audit, &keys::outbox_key(seq))
        .unwrap()
        .is_some()
}

fn assert_counters_true(trail: &Trail) {
    let store = trail.store();
    let seq = store.meta_u64(meta::AUDIT_SEQ).unwrap();
    let truth = Usage::recount(store, seq).unwrap();
    let stored = Usage::decode(&store.meta(meta::AUDIT_USAGE).unwrap().unwrap()).unwrap();
    assert_eq!(stored, truth, "m:audit_usage");
    assert_eq!(trail.usage(), truth, "Trail::usage");
}

/// The refused change left no trace: no seq, no row, no subject write.
fn assert_nothing_written(trail: &Trail, seq_before: u64, id: u64) {
    let store = trail.store();
    assert_eq!(store.meta_u64(meta::AUDIT_SEQ).unwrap(), seq_before);
    assert_eq!(seqs(store).last().copied(), Some(seq_before));
    let key = format!("t1/s{id}").into_bytes();
    assert!(store.get(Cf::Sources, &key).unwrap().is_none());
}

#[tokio::test]
async fn max_rows_prunes_published_rows_first_then_refuses_until_the_sink_catches_up() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open(dir.path(), &["hook"], limits(10, u64::MAX, u64::MAX));
    for i in 1..=10 {
        assert_eq!(create(&trail, i).await.unwrap(), i);
    }
    trail.advance("hook", 5, vec![]).await.unwrap();

    // Full: each change prunes the oldest published row, with its entity, to make room.
    for i in 11..=14 {
        assert_eq!(create(&trail, i).await.unwrap(), i);
        let first = i - 9;
        assert_eq!(seqs(trail.store()), (first..=i).collect::<Vec<_>>());
        assert!(!has_entity(trail.store(), first - 1));
        assert!(has_entity(trail.store(), first));
        assert_counters_true(&trail);
    }
    assert_eq!(trail.stats().pruned.ceiling, 4);

    // Everything below the cursor is gone: the next change is refused and writes nothing.
    assert_eq!(create(&trail, 15).await, Err(CommitError::AuditBacklog));
    assert_nothing_written(&trail, 14, 15);
    assert_eq!(seqs(trail.store()), (5..=14).collect::<Vec<_>>());
    assert_eq!(trail.stats().refused, 1);
    assert_counters_true(&trail);

    // A change the node makes itself still goes through, over the ceiling.
    let system = create_source(&trail, Context::system(), "sys", "x")
        .await
        .unwrap();
    assert_eq!(system.seq, 15);
    assert_eq!(trail.usage().rows, 11);

    // The sink catches up: the trail is pruned back under the ceiling for the next change.
    trail.advance("hook", 15, vec![]).await.unwrap();
    assert_eq!(create(&trail, 15).await.unwrap(), 16);
    assert_eq!(seqs(trail.store()), (7..=16).collect::<Vec<_>>());
    assert_counters_true(&trail);
    let metrics = ankusa::telemetry::render();
    assert!(
        metrics.contains("ankusa_audit_refused_total{reason=\"ceiling\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ankusa_audit_pruned_rows_total{reason=\"ceiling\"} 6"),
        "{metrics}"
    );
    trail.shutdown().await;
}

#[tokio::test]
async fn max_bytes_prunes_published_rows_first_then_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open(dir.path(), &["hook"], Limits::default());
    for i in 1..=10 {
        create(&trail, i).await.unwrap();
    }
    trail.advance("hook", 4, vec![]).await.unwrap();
    let full = trail.usage().bytes;
    trail.shutdown().await;
    drop(trail);

    // The same trail, now exactly at its byte ceiling.
    let trail = open(dir.path(), &["hook"], limits(u64::MAX, full, u64::MAX));
    let mut next = 11;
    while let Ok(seq) = create(&trail, next).await {
        assert_eq!(seq, next);
        assert!(
            trail.usage().bytes <= full,
            "within the ceiling after every change"
        );
        assert_counters_true(&trail);
        next += 1;
    }
    // Refused once everything below the cursor (seqs 1..=3) was pruned, oldest first.
    assert!(next > 11, "room was made by pruning");
    assert_eq!(seqs(trail.store()).first(), Some(&4));
    assert_nothing_written(&trail, next - 1, next);
    assert_counters_true(&trail);

    // Larger than any room left: it cannot fit, and goes in all the same.
    let id = "x".repeat(1000);
    let system = create_source(&trail, Context::system(), &id, "x")
        .await
        .unwrap();
    assert_eq!(system.seq, next);
    assert!(
        trail.usage().bytes > full,
        "a system change may push the trail over"
    );
    trail.advance("hook", next, vec![]).await.unwrap();
    assert_eq!(create(&trail, next).await.unwrap(), next + 1);
    assert!(trail.usage().bytes <= full);
    assert_counters_true(&trail);
    trail.shutdown().await;
}

#[tokio::test]
async fn an_unconfirmed_backlog_refuses_changes_until_the_sink_confirms() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open(dir.path(), &["hook"], limits(u64::MAX, u64::MAX, 5));
    for i in 1..=5 {
        create(&trail, i).await.unwrap();
    }
    assert_eq!(trail.stats().backlog, 5);
    assert_eq!(create(&trail, 6).await, Err(CommitError::AuditBacklog));
    assert_nothing_written(&trail, 5, 6);
    // Any operator change, event or not.
    assert_eq!(
        set_override(&trail, 1).await,
        Err(CommitError::AuditBacklog)
    );
    assert_eq!(trail.stats().refused, 2);
    // Refused after it was validated: nothing of its own was written either.
    assert!(all_keys(trail.store(), Cf::Overrides).is_empty());
    // A change that would change nothing hears why, not the backlog (and is not counted).
    assert_eq!(
        update_secret(&trail, ctx("ops"), "nope", "x")
            .await
            .unwrap_err(),
        CommitError::Refused(TestRefusal::Missing)
    );
    assert_eq!(
        create(&trail, 1).await,
        Err(CommitError::Refused(TestRefusal::Exists))
    );
    assert_eq!(trail.stats().refused, 2);

    let system = create_source(&trail, Context::system(), "sys", "x")
        .await
        .unwrap();
    assert_eq!(system.seq, 6);
    trail.advance("hook", 3, vec![]).await.unwrap();
    assert_eq!(trail.stats().backlog, 3);
    assert_eq!(create(&trail, 6).await.unwrap(), 7);
    assert_eq!(create(&trail, 7).await.unwrap(), 8);
    assert_eq!(create(&trail, 8).await, Err(CommitError::AuditBacklog));
    let metrics = ankusa::telemetry::render();
    assert!(
        metrics.contains("ankusa_audit_refused_total{reason=\"backlog\"} 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ankusa_audit_outbox_backlog 5"),
        "{metrics}"
    );
    assert_counters_true(&trail);
    trail.shutdown().await;
}

#[tokio::test]
async fn every_row_after_the_cursor_counts_in_the_backlog() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open(dir.path(), &["hook"], limits(u64::MAX, u64::MAX, 5));
    for i in 1..=3 {
        create(&trail, i).await.unwrap();
    }
    trail.advance("hook", 3, vec![]).await.unwrap();
    assert_eq!(trail.stats().backlog, 0);
    // The sink is behind (nothing moves its position here): changes that are not events
    // count too, the backlog being m:audit_seq minus the cursor.
    for i in 1..=5 {
        set_override(&trail, i).await.unwrap();
    }
    assert_eq!(trail.stats().backlog, 5);
    assert_eq!(
        set_override(&trail, 6).await,
        Err(CommitError::AuditBacklog)
    );
    assert_eq!(create(&trail, 4).await, Err(CommitError::AuditBacklog));
    assert_eq!(trail.stats().backlog, 5, "a refusal takes no seq");
    // The sink passes over them (as the publisher does with rows that publish nothing).
    trail.advance("hook", 8, vec![]).await.unwrap();
    assert_eq!(trail.stats().backlog, 0);
    assert_eq!(create(&trail, 4).await, Ok(9));
    assert_eq!(trail.stats().backlog, 1);
    trail.shutdown().await;
}

#[tokio::test]
async fn the_stored_cursor_follows_the_sinks_configured_at_boot() {
    let dir = tempfile::tempdir().unwrap();
    let no_limits = || limits(u64::MAX, u64::MAX, u64::MAX);
    // m:lifecycle_cursor as stored, and the cursor the writer holds rows back with.
    let boot = |sinks: &'static [&'static str]| {
        let trail = open(dir.path(), sinks, no_limits());
        let stored = trail.store().meta(meta::LIFECYCLE_CURSOR).unwrap();
        let stored = stored.map(|v| u64::from_be_bytes(v.try_into().unwrap()));
        let cursor = trail.stats().cursor;
        (trail, stored, cursor)
    };
    let trail = open(dir.path(), &["a"], no_limits());
    for i in 1..=3 {
        create(&trail, i).await.unwrap();
    }
    trail.advance("a", 3, vec![]).await.unwrap();
    trail.shutdown().await;
    drop(trail);
    for (sinks, expected) in [
        (&["a"][..], Some(3)),
        // A sink added starts at 0, and so does the cursor.
        (&["a", "b"][..], Some(0)),
        // Back to the first sink alone: its position.
        (&["a"][..], Some(3)),
        // No sink: no cursor.
        (&[][..], None),
    ] {
        let (trail, stored, cursor) = boot(sinks);
        assert_eq!((stored, cursor), (expected, expected), "sinks {sinks:?}");
        trail.shutdown().await;
    }
}

#[tokio::test]
async fn without_sinks_nothing_holds_rows_back() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open(dir.path(), &[], limits(5, u64::MAX, 1));
    for i in 1..=20 {
        assert_eq!(create(&trail, i).await.unwrap(), i);
    }
    assert_eq!(seqs(trail.store()), (16..=20).collect::<Vec<_>>());
    assert_eq!(trail.stats().cursor, None);
    assert_eq!(trail.stats().backlog, 0);
    assert_counters_true(&trail);
    trail.shutdown().await;
}

#[tokio::test]
async fn a_group_of_concurrent_changes_is_decided_change_by_change() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open(dir.path(), &["hook"], limits(20, u64::MAX, u64::MAX));
    for i in 1..=20 {
        create(&trail, i).await.unwrap();
    }
    trail.advance("hook", 8, vec![]).await.unwrap();
    // 30 changes at once: most land in shared groups. 7 rows can be pruned (seqs 1..=7), so
    // exactly 7 are accepted, whatever the grouping.
    let mut tasks = vec![];
    for i in 21..=50 {
        let trail = trail.clone();
        tasks.push(tokio::spawn(async move { create(&trail, i).await }));
    }
    let mut accepted = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => accepted += 1,
            Err(e) => assert_eq!(e, CommitError::AuditBacklog),
        }
    }
    assert_eq!(accepted, 7);
    assert_eq!(seqs(trail.store()), (8..=27).collect::<Vec<_>>());
    assert_eq!(trail.stats().refused, 23);
    assert_counters_true(&trail);
    trail.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_committers_at_a_ceiling_keep_exactly_the_newest_rows_and_true_counters() {
    let dir = tempfile::tempdir().unwrap();
    // No sinks: every change is accepted and prunes the oldest row, while groups are
    // prepared on the writer and written by the syncer side by side.
    let trail = open(dir.path(), &[], limits(50, u64::MAX, 1));
    let mut tasks = vec![];
    for t in 0..16u64 {
        let trail = trail.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..30 {
                create(&trail, t * 1000 + i).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(seqs(trail.store()), (431..=480).collect::<Vec<_>>());
    for seq in 431..=480 {
        assert!(has_entity(trail.store(), seq), "entity of {seq}");
    }
    assert!(!has_entity(trail.store(), 430));
    assert_counters_true(&trail);
    assert_eq!(trail.usage().rows, 50);
    trail.shutdown().await;
}
