//! The writer's side of dual writes against a real store: pending ids across runs, and a
//! pending row an earlier version wrote.

use super::*;
use crate::audit::dual::pending_row::pending_rows;
use crate::audit::dual::pending_row::tests::row;
use crate::store::Store;
use rocksdb::WriteBatch;

/// Pending ids go on past every id a run handed out, even once all its rows are gone:
/// each group that begins pending rows puts the last id in `m:pending_seq`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_ids_go_on_past_the_last_runs_once_its_rows_are_gone() {
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let start = |store| {
        let clock = Arc::new(crate::audit::SystemClock);
        crate::audit::Trail::start(store, Default::default(), clock).unwrap()
    };
    let begin = |trail: &crate::audit::Trail, i: u64| {
        let change = Change::new("route.update", format!("routes/r{i}"))
            .states(None, Some(serde_json::json!({"i": i})));
        let trail = trail.clone();
        async move { trail.begin::<()>(Context::system(), change).await.unwrap() }
    };
    let store = Store::open(dir.path()).unwrap();
    let trail = start(store.clone());
    // Begun together, so that groups begin several at once.
    let pending = futures::future::join_all((1..=32).map(|i| begin(&trail, i))).await;
    let mut ids: Vec<u64> = pending.iter().map(Pending::id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=32).collect::<Vec<_>>());
    assert_eq!(store.meta_u64(keys::meta::PENDING_SEQ).unwrap(), 32);
    // Refused by the other store: the pending rows go, and no trail row is written.
    for p in pending {
        assert_eq!(trail.finish(p, Finish::Refused).await.unwrap(), None);
    }
    assert!(pending_rows(&store).unwrap().is_empty());
    let closing = store.closing();
    trail.shutdown().await;
    drop((trail, store));
    closing.wait().await;
    let trail = start(Store::open(dir.path()).unwrap());
    assert_eq!(begin(&trail, 33).await.id(), 33);
    trail.shutdown().await;
}

/// A subject that is always absent.
struct Absent;

#[async_trait::async_trait]
impl crate::audit::dual::settle::Reconcile for Absent {
    async fn hold(&self, _: &Value) -> Option<crate::audit::dual::settle::Hold> {
        None
    }
    async fn present(&self, _: &Value) -> Result<crate::audit::dual::settle::Reading, String> {
        Ok(crate::audit::dual::settle::Reading {
            present: None,
            stamp: None,
        })
    }
}

/// A pending row an earlier version wrote with its entity inside still settles, and
/// publishes that entity.
#[tokio::test]
async fn a_pending_row_with_its_entity_inside_settles_and_publishes_it() {
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let entity = serde_json::json!({"id": "r1", "tenant": "t1", "revision": 1});
    // A delete (no state after it): a subject found absent settles it `ok`.
    let old = PendingRow {
        before_hash: Some("ab".into()),
        after_hash: None,
        entity: Some(entity.clone()),
        ..row("route.delete")
    };
    let mut batch = WriteBatch::default();
    let audit = store.cf(Cf::Audit);
    batch.put_cf(
        audit,
        keys::pending_key(1),
        serde_json::to_vec(&old).unwrap(),
    );
    batch.put_cf(
        audit,
        keys::meta_key(keys::meta::PENDING_SEQ),
        1u64.to_be_bytes(),
    );
    store.write(batch, true).unwrap();
    let options = crate::audit::TrailOptions {
        lifecycle: true,
        ..Default::default()
    };
    let trail =
        crate::audit::Trail::start(store.clone(), options, Arc::new(crate::audit::SystemClock))
            .unwrap();
    let mut reconcilers = crate::audit::dual::settle::Reconcilers::new();
    reconcilers.insert("route".into(), Arc::new(Absent) as Arc<_>);
    let stop = tokio_util::sync::CancellationToken::new();
    let settling = trail
        .start_settlement(reconcilers, Default::default(), stop.clone())
        .unwrap();
    trail.boot_settled().await;
    assert!(pending_rows(&store).unwrap().is_empty());
    let rows = crate::audit::row::page(&store, 0, 10, &Default::default()).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].result, rows[0].publish), (RowResult::Ok, true));
    let published = store.get(Cf::Audit, &keys::outbox_key(1)).unwrap().unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&published).unwrap(), entity);
    stop.cancel();
    settling.await.unwrap();
    trail.shutdown().await;
}
