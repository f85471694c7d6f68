//! One snapshot at a time, its progress, and what a failed one leaves.

use std::sync::Arc;

use tokio::sync::Notify;

use super::*;
use crate::audit::{SystemClock, TrailOptions};
use crate::store::Store;

/// A kind whose items wait for `go`, then fail or write `items`.
struct Paused {
    go: Notify,
    fail: bool,
}

#[async_trait::async_trait]
impl SnapshotKind for Paused {
    fn kind(&self) -> &'static str {
        "route"
    }
    async fn floor(&self) -> Result<Stamp, StoreError> {
        Ok(Stamp {
            version: 7,
            store: Some("redis:x".into()),
        })
    }
    async fn items(
        &self,
        _: &str,
        _: usize,
        _: Option<u64>,
        written: &Written<'_>,
    ) -> Result<u64, StoreError> {
        self.go.notified().await;
        if self.fail {
            return Err(StoreError::Redis("down".into()));
        }
        written(3);
        Ok(3)
    }
}

fn snapshots(dir: &std::path::Path, kind: Arc<Paused>) -> (Trail, Snapshots) {
    let store = Store::open(dir).unwrap();
    let trail = Trail::start(store, TrailOptions::default(), Arc::new(SystemClock)).unwrap();
    let kinds: Vec<Arc<dyn SnapshotKind>> = vec![kind];
    let snapshots = Snapshots::new(trail.clone(), "urn:n".into(), kinds, Default::default());
    (trail, snapshots)
}

async fn wait_ended(s: &Snapshots) -> Progress {
    loop {
        let status = s.status();
        if status.running.is_none() {
            return status.last.expect("one ended");
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn one_runs_at_a_time_and_shows_its_progress() {
    let dir = tempfile::tempdir().unwrap();
    let kind = Arc::new(Paused {
        go: Notify::new(),
        fail: false,
    });
    let (trail, s) = snapshots(dir.path(), kind.clone());
    let (first, seq) = s.request(Context::system(), None).await.unwrap();
    assert_eq!(first.state, Phase::Running);
    assert!(matches!(
        s.request(Context::system(), None).await,
        Err(SnapshotError::InProgress)
    ));
    assert!(matches!(s.take(Reason::MemoryStore, None).await, Ok(None)));
    assert!(matches!(
        s.request(Context::system(), Some(vec!["gadget".into()])).await,
        Err(SnapshotError::UnknownKind(k)) if k == "gadget"
    ));
    kind.go.notify_one();
    let ended = wait_ended(&s).await;
    assert_eq!(
        (ended.id, ended.state, ended.items),
        (first.id, Phase::Finished, 3)
    );
    // The request's row, the start marker with the floor, the finish marker with the count.
    let rows = crate::audit::page(trail.store(), 0, 10, &Default::default()).unwrap();
    let actions: Vec<&str> = rows.iter().map(|r| r.action.as_str()).collect();
    assert_eq!(
        actions,
        ["snapshot.request", "snapshot.start", "snapshot.finish"]
    );
    assert_eq!(rows[0].seq, seq, "the request names its row");
    let id = first.id.to_string();
    let resources: Vec<&str> = rows.iter().map(|r| r.resource.as_str()).collect();
    // Each marker has a key of its own: compaction keeps both.
    assert_eq!(
        resources,
        [
            format!("snapshots/{id}"),
            format!("snapshots/{id}/start"),
            format!("snapshots/{id}/finish")
        ]
    );
    assert_eq!(rows[1].snapshot.as_deref(), Some(id.as_str()));
    let entity = |seq| {
        let key = crate::store::keys::outbox_key(seq);
        let bytes = trail.store().get(crate::store::Cf::Audit, &key).unwrap();
        serde_json::from_slice::<Value>(&bytes.unwrap()).unwrap()
    };
    assert_eq!(
        entity(rows[1].seq),
        json!({"id": id, "stores": [{"kind": "route", "store": "redis:x", "floor": "00000000000000000007"}]})
    );
    assert_eq!(entity(rows[2].seq), json!({"id": id, "count": 3}));
    trail.shutdown().await;
}

#[tokio::test]
async fn a_failed_snapshot_writes_no_finish_marker() {
    let dir = tempfile::tempdir().unwrap();
    let kind = Arc::new(Paused {
        go: Notify::new(),
        fail: true,
    });
    let (trail, s) = snapshots(dir.path(), kind.clone());
    kind.go.notify_one();
    assert!(s.take(Reason::Restore, None).await.is_err());
    let last = s.status().last.unwrap();
    assert_eq!(last.state, Phase::Failed);
    assert_eq!(last.reason, Reason::Restore);
    assert_eq!(
        last.error.as_deref(),
        Some("store unavailable: redis: down")
    );
    let rows = crate::audit::page(trail.store(), 0, 10, &Default::default()).unwrap();
    let actions: Vec<&str> = rows.iter().map(|r| r.action.as_str()).collect();
    assert_eq!(
        actions,
        ["snapshot.start"],
        "consumers prune nothing for it"
    );
    trail.shutdown().await;
}
