//! The commit path: a change's ops and its row in one synced batch, seq order = commit order.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use crate::support::trail::*;
use ankusa::audit::{page, CommitError, Filter, RowResult};
use ankusa::store::{keys, keys::meta, Cf, Store};
use serde_json::json;

#[tokio::test]
async fn commit_writes_subject_and_row_together() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail(dir.path(), true);
    let c = create_source(&trail, ctx("alice"), "s1", "hunter2")
        .await
        .unwrap();
    assert_eq!(c.seq, 1);
    let store = trail.store();
    let stored: serde_json::Value =
        serde_json::from_slice(&store.get(Cf::Sources, b"t1/s1").unwrap().unwrap()).unwrap();
    assert_eq!(stored["secret"], "hunter2");
    let rows = all_rows(store);
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(row.seq, 1);
    assert_eq!(row.at, c.at);
    assert_eq!(row.actor, "alice");
    assert_eq!(row.remote_ip.as_deref(), Some("192.0.2.7"));
    assert_eq!(row.request_id.as_deref(), Some("req-alice"));
    assert_eq!(row.action, "source.create");
    assert_eq!(row.tenant.as_deref(), Some("t1"));
    assert_eq!(row.resource, "sources/s1");
    assert_eq!(
        serde_json::Value::Object(row.detail.clone()),
        json!({"fields": 3})
    );
    assert_eq!(row.before_hash, None);
    assert_eq!(row.after_hash.as_ref().map(String::len), Some(64));
    assert_eq!(row.revision, Some(1));
    assert_eq!(row.result, RowResult::Ok);
    assert!(row.publish);
    // The entity is beside the row, never in it; the secret is in neither.
    let entity = store.get(Cf::Audit, &keys::outbox_key(1)).unwrap().unwrap();
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&entity).unwrap(),
        json!({"id": "s1", "tenant": "t1", "revision": 1})
    );
    let raw_row = store
        .get(Cf::Audit, &keys::row_key(1, c.at))
        .unwrap()
        .unwrap();
    assert!(!String::from_utf8_lossy(&raw_row).contains("hunter2"));
    assert_eq!(store.meta_u64(meta::AUDIT_SEQ).unwrap(), 1);
    trail.shutdown().await;
}

#[tokio::test]
async fn lifecycle_off_flags_nothing_and_writes_no_entity() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail(dir.path(), false);
    create_source(&trail, ctx("alice"), "s1", "x")
        .await
        .unwrap();
    let rows = all_rows(trail.store());
    assert!(!rows[0].publish);
    assert_eq!(
        trail.store().get(Cf::Audit, &keys::outbox_key(1)).unwrap(),
        None
    );
    trail.shutdown().await;
}

#[tokio::test]
async fn refused_change_writes_nothing_and_takes_no_seq() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail(dir.path(), true);
    let err = update_secret(&trail, ctx("bob"), "missing", "x")
        .await
        .unwrap_err();
    assert_eq!(err, CommitError::Refused(TestRefusal::Missing));
    assert!(all_rows(trail.store()).is_empty());
    assert_eq!(trail.store().meta_u64(meta::AUDIT_SEQ).unwrap(), 0);
    let c = create_source(&trail, ctx("bob"), "s1", "x").await.unwrap();
    assert_eq!(c.seq, 1, "the refusal consumed no seq");
    let err = create_source(&trail, ctx("bob"), "s1", "y")
        .await
        .unwrap_err();
    assert_eq!(err, CommitError::Refused(TestRefusal::Exists));
    assert_eq!(all_rows(trail.store()).len(), 1);
    trail.shutdown().await;
}

#[tokio::test]
async fn hashes_follow_the_subject_and_survive_restart() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail(dir.path(), true);
    create_source(&trail, ctx("a"), "s1", "one").await.unwrap();
    update_secret(&trail, ctx("a"), "s1", "two").await.unwrap();
    update_secret(&trail, ctx("a"), "s1", "one").await.unwrap();
    trail.shutdown().await;
    drop(trail);
    let trail = open_trail(dir.path(), true);
    // After a restart the key is the same: setting the secret back gives a known hash.
    update_secret(&trail, ctx("a"), "s1", "two").await.unwrap();
    let rows = all_rows(trail.store());
    assert_eq!(
        rows.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    // Each row's before is the previous row's after.
    for w in rows.windows(2) {
        assert_eq!(w[1].before_hash, w[0].after_hash);
    }
    // Only the secret and revision changed, yet every after_hash differs...
    let afters: HashSet<_> = rows.iter().map(|r| r.after_hash.clone()).collect();
    assert_eq!(afters.len(), 4);
    assert_eq!(rows[3].revision, Some(4));
    trail.shutdown().await;
}

#[tokio::test]
async fn one_group_sees_its_earlier_changes() {
    // Many creates of one subject at once: the writer validates them in order against the
    // group's own writes, so exactly one wins however they are grouped.
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail(dir.path(), true);
    let mut tasks = vec![];
    for i in 0..64 {
        let trail = trail.clone();
        tasks.push(tokio::spawn(async move {
            create_source(&trail, ctx("x"), "same", &format!("s{i}")).await
        }));
    }
    let mut ok = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => ok += 1,
            Err(e) => assert_eq!(e, CommitError::Refused(TestRefusal::Exists)),
        }
    }
    assert_eq!(ok, 1);
    assert_eq!(all_rows(trail.store()).len(), 1);
    trail.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_committers_get_consecutive_seqs_and_a_resuming_reader_sees_each_once() {
    const COMMITTERS: usize = 32;
    const EACH: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail(dir.path(), true);
    let reader = {
        let store = trail.store().clone();
        // Started now, beside the committers.
        tokio::spawn(ankusa::store::blocking::run("the reader", move || {
            let mut seen = vec![];
            let mut after = 0;
            while seen.len() < COMMITTERS * EACH {
                let rows = page(&store, after, 7, &Filter::default()).unwrap();
                for r in rows {
                    seen.push((r.seq, r.resource.clone()));
                    after = r.seq;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            seen
        }))
    };
    let mut tasks = vec![];
    for c in 0..COMMITTERS {
        let trail = trail.clone();
        tasks.push(tokio::spawn(async move {
            let mut seqs = vec![];
            for i in 0..EACH {
                let done = create_source(&trail, ctx("c"), &format!("c{c}-{i}"), "s")
                    .await
                    .unwrap();
                seqs.push(done.seq);
            }
            seqs
        }));
    }
    let mut all = vec![];
    for t in tasks {
        let seqs = t.await.unwrap();
        // One committer's changes commit one after another: their seqs increase.
        assert!(seqs.windows(2).all(|w| w[0] < w[1]));
        all.extend(seqs);
    }
    all.sort_unstable();
    assert_eq!(all, (1..=(COMMITTERS * EACH) as u64).collect::<Vec<_>>());
    let seen = tokio::time::timeout(Duration::from_secs(30), reader)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        seen.iter().map(|s| s.0).collect::<Vec<_>>(),
        all,
        "every row exactly once, in order"
    );
    let rows = all_rows(trail.store());
    assert!(
        rows.windows(2).all(|w| w[0].at <= w[1].at),
        "time never goes back along seq"
    );
    let by_seq: BTreeMap<u64, String> = rows.into_iter().map(|r| (r.seq, r.resource)).collect();
    for (seq, resource) in seen {
        assert_eq!(by_seq[&seq], resource);
    }
    trail.shutdown().await;
}

#[tokio::test]
async fn a_panicking_change_is_not_written_and_the_writer_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail(dir.path(), true);
    let err = trail
        .commit(
            ctx("p"),
            |_tx| -> Result<(ankusa::audit::Change, ()), CommitError<()>> {
                panic!("bug in a change")
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err, CommitError::StoreUnavailable);
    assert_eq!(
        create_source(&trail, ctx("p"), "s1", "x")
            .await
            .unwrap()
            .seq,
        1
    );
    trail.shutdown().await;
}

#[tokio::test]
async fn a_change_may_not_write_the_audit_column_family() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail(dir.path(), true);
    let err = trail
        .commit(ctx("p"), |tx| {
            tx.put(Cf::Audit, keys::meta_key(meta::AUDIT_SEQ), vec![0; 8])?;
            Ok::<_, CommitError<()>>((ankusa::audit::Change::new("x", "y"), ()))
        })
        .await
        .unwrap_err();
    assert_eq!(err, CommitError::StoreUnavailable);
    assert!(all_rows(trail.store()).is_empty());
    trail.shutdown().await;
}

#[tokio::test]
async fn shutdown_finishes_queued_changes_then_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail(dir.path(), true);
    let mut tasks = vec![];
    for i in 0..50 {
        let trail = trail.clone();
        tasks.push(tokio::spawn(async move {
            create_source(&trail, ctx("s"), &format!("s{i}"), "x").await
        }));
    }
    tokio::task::yield_now().await;
    trail.shutdown().await;
    let acked = futures::future::join_all(tasks)
        .await
        .into_iter()
        .filter(|r| r.as_ref().unwrap().is_ok())
        .count();
    assert_eq!(
        create_source(&trail, ctx("s"), "late", "x")
            .await
            .unwrap_err(),
        CommitError::StoreUnavailable
    );
    drop(trail);
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(
        all_rows(&store).len(),
        acked,
        "every acknowledged change is in the trail"
    );
    assert_eq!(all_keys(&store, Cf::Sources).len(), acked);
}

/// A damaged store whose last seq (or pending id) no trail could reach does not boot: counting
/// on from it would wrap around to seqs the trail already holds.
#[test]
fn a_seq_past_any_trail_is_refused_at_boot() {
    for name in [meta::AUDIT_SEQ, meta::PENDING_SEQ] {
        let dir = tempfile::tempdir().unwrap();
        drop(Store::open(dir.path()).unwrap());
        {
            let db = open_stopped(dir.path());
            let audit = db.cf_handle(Cf::Audit.name()).unwrap();
            let near_the_end = (u64::MAX - 1).to_be_bytes();
            db.put_cf(audit, keys::meta_key(name), near_the_end)
                .unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        let options = ankusa::audit::TrailOptions::default();
        let clock = std::sync::Arc::new(ankusa::audit::SystemClock);
        let err = ankusa::audit::Trail::start(store, options, clock).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "corrupt value at m:{name}: {} is past any trail; the store is damaged",
                u64::MAX - 1
            )
        );
    }
}

/// A read within a budget stops after that many rows, matching or not, and says where it
/// stopped; reading on from there finds the rest, each row once.
#[tokio::test]
async fn a_read_within_a_budget_stops_where_it_says() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail(dir.path(), true);
    for i in 1..=10 {
        create_source(&trail, ctx("p"), &format!("s{i}"), "x")
            .await
            .unwrap();
    }
    let store = trail.store().clone();
    let filter = Filter {
        resource_prefix: Some("sources/s1".into()),
        ..Filter::default()
    };
    // s1 and s10 match; a budget of 4 rows reads 1-4, then 5-8, then 9-10.
    let first = ankusa::audit::page_within(&store, 0, 5, &filter, 4).unwrap();
    assert_eq!(
        first.rows.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![1]
    );
    assert_eq!(first.cut_at, Some(4));
    let second = ankusa::audit::page_within(&store, 4, 5, &filter, 4).unwrap();
    assert!(second.rows.is_empty());
    assert_eq!(second.cut_at, Some(8));
    let third = ankusa::audit::page_within(&store, 8, 5, &filter, 4).unwrap();
    assert_eq!(
        third.rows.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![10]
    );
    assert_eq!(third.cut_at, None, "the trail ends before the budget");
    // A full page stops at the limit, not the budget.
    let full = ankusa::audit::page_within(&store, 0, 3, &Filter::default(), 4).unwrap();
    assert_eq!(full.rows.len(), 3);
    assert_eq!(full.cut_at, None);
    trail.shutdown().await;
}
