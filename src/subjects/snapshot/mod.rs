//! Snapshots: the whole present state of routes and sources, as lifecycle events, so that a
//! consumer that starts late, lost its place or was told to forget can rebuild its replica.
//!
//! A snapshot is three steps of rows in the trail, published like every other:
//! `snapshot.start` (`io.ankusa.snapshot.started`: the id and, per kind, the store and its
//! `floor`, the store's version when the snapshot began), one `<kind>.refresh` row per
//! subject that exists (`io.ankusa.<kind>.refreshed`, extension `snapshot`), and
//! `snapshot.finish` (`io.ankusa.snapshot.finished`: the id and the count of items). A
//! consumer that holds the finished event and that many items deletes every subject of a
//! listed kind and store at or below the floor that the snapshot did not refresh.
//!
//! Changes go on while a snapshot runs: each takes a version above the floor, so the rule
//! (apply only a greater version) orders an item and a change of one subject whatever order
//! they arrive in, and the floor never prunes a subject changed during the snapshot.
//!
//! An operator asks for one (`Snapshots::request`, one audit row); the node takes one by
//! itself after a restore and when a memory route store starts empty. The snapshot's own rows
//! are system rows, never refused. One runs at a time.

mod local;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::audit::{Change, CommitError, Context, Stamp, Trail};
use crate::store::StoreError;
use crate::telemetry;

pub use local::LocalSources;

/// Items offered to the writer at once (one group commit serves a page).
const PAGE: usize = 256;

/// Told each page's count of items; answers whether to go on (no: the node is stopping).
pub type Written<'a> = dyn Fn(u64) -> bool + Send + Sync + 'a;

/// Why a kind's items stopped before their end.
pub(crate) fn stopping() -> StoreError {
    StoreError::Stopped("the node")
}

/// One kind of subject a snapshot covers.
#[async_trait::async_trait]
pub trait SnapshotKind: Send + Sync {
    /// Its kind (`route`, `source`).
    fn kind(&self) -> &'static str;
    /// Its store's version now, and the store's name (`None`: this node's own).
    async fn floor(&self) -> Result<Stamp, StoreError>;
    /// Write one item of snapshot `id` per subject that exists, `page` at a time, telling
    /// `written` each page's count (it answers whether to go on); the items written. With
    /// `lifted`, every item carries that version (the snapshot's floor) instead of the one
    /// its store keeps: a store that lost data may hold subjects below versions consumers
    /// already applied (the lost changes), and only a greater version replaces those.
    async fn items(
        &self,
        id: &str,
        page: usize,
        lifted: Option<u64>,
        written: &Written<'_>,
    ) -> Result<u64, StoreError>;
}

/// Why a snapshot was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// An operator asked for it.
    Request,
    /// The store was restored from a backup.
    Restore,
    /// The memory route store started empty.
    MemoryStore,
    /// A shared store was found to have lost data (see `remote::loss`).
    StoreLoss,
}

/// Where a snapshot is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Writing its rows.
    Running,
    /// Its finished marker is written.
    Finished,
    /// It stopped before its finished marker (consumers prune nothing for it).
    Failed,
}

/// A snapshot as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Progress {
    /// Its id.
    pub id: Uuid,
    /// The kinds it covers.
    pub kinds: Vec<&'static str>,
    /// Why it was taken.
    pub reason: Reason,
    /// Where it is.
    pub state: Phase,
    /// Items written so far.
    pub items: u64,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The snapshot running and the last one that ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Status {
    /// The one running.
    pub running: Option<Progress>,
    /// The last one that ended.
    pub last: Option<Progress>,
}

/// Why a snapshot was not started.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// One runs already.
    #[error("a snapshot is running")]
    InProgress,
    /// A kind this node does not have.
    #[error("unknown kind {0:?}")]
    UnknownKind(String),
    /// The request's row was not written.
    #[error("the request was not recorded")]
    Commit(CommitError<()>),
}

/// The node's snapshots: the kinds it has, and the one running.
#[derive(Clone)]
pub struct Snapshots {
    inner: Arc<Inner>,
}

struct Inner {
    trail: Trail,
    /// The node's URI: the name of its own stores in events.
    source: String,
    kinds: Vec<Arc<dyn SnapshotKind>>,
    status: Mutex<Status>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Snapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshots")
            .field("kinds", &self.kinds())
            .finish()
    }
}

impl Snapshots {
    /// Snapshots of `kinds`, recorded in `trail`, on the node named `source`; a running one
    /// stops at `shutdown`, between pages.
    pub fn new(
        trail: Trail,
        source: String,
        kinds: Vec<Arc<dyn SnapshotKind>>,
        shutdown: CancellationToken,
    ) -> Snapshots {
        Snapshots {
            inner: Arc::new(Inner {
                trail,
                source,
                kinds,
                status: Mutex::new(Status::default()),
                tasks: TaskTracker::new(),
                shutdown,
            }),
        }
    }

    /// The kinds it covers, in order.
    pub fn kinds(&self) -> Vec<&'static str> {
        self.inner.kinds.iter().map(|k| k.kind()).collect()
    }

    /// The one running and the last one.
    pub fn status(&self) -> Status {
        self.inner.lock().clone()
    }

    /// Wait for the snapshots started by [`Snapshots::request`] to end (at shutdown).
    pub async fn join(&self) {
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }

    /// An operator's request for a snapshot of `kinds` (`None`: all): its audit row
    /// (`snapshot.request`, whose seq comes back), then the snapshot in a task of its own.
    pub async fn request(
        &self,
        ctx: Context,
        kinds: Option<Vec<String>>,
    ) -> Result<(Progress, u64), SnapshotError> {
        let kinds = self.pick(kinds)?;
        let progress = self.begin(&kinds, Reason::Request)?;
        let id = progress.id;
        let names: Vec<&str> = kinds.iter().map(|k| k.kind()).collect();
        let row = Change::new("snapshot.request", resource(id)).detail("kinds", json!(names));
        let recorded = self
            .inner
            .trail
            .commit(ctx, move |_| Ok::<_, CommitError<()>>((row, ())))
            .await;
        let seq = match recorded {
            Ok(committed) => committed.seq,
            Err(e) => {
                self.end(Err("the request was not recorded".into()));
                return Err(SnapshotError::Commit(e));
            }
        };
        let this = self.clone();
        self.inner.tasks.spawn(async move {
            let ended = this.run(id, &kinds, Reason::Request).await;
            this.end(ended.map(|_| ()).map_err(|e| e.to_string()));
        });
        Ok((progress, seq))
    }

    /// Take a snapshot of `kinds` (`None`: every kind) now, to its end, for `reason`;
    /// retried by the caller when it fails. `Ok(None)` when another one runs.
    pub async fn take(
        &self,
        reason: Reason,
        kinds: Option<Vec<String>>,
    ) -> Result<Option<u64>, StoreError> {
        let kinds = self
            .pick(kinds)
            .map_err(|e| StoreError::Misconfigured(e.to_string()))?;
        let Ok(progress) = self.begin(&kinds, reason) else {
            return Ok(None);
        };
        let ended = self.run(progress.id, &kinds, reason).await;
        self.end(ended.as_ref().map(|_| ()).map_err(|e| e.to_string()));
        ended.map(Some)
    }

    /// Take a snapshot of `kinds` for `reason` in a task of its own, trying again every
    /// `retry` until one finishes or the node stops.
    pub fn take_until_done(&self, reason: Reason, kinds: Option<Vec<String>>, retry: Duration) {
        let this = self.clone();
        self.inner.tasks.spawn(async move {
            loop {
                match this.take(reason, kinds.clone()).await {
                    Ok(Some(_)) => return,
                    Ok(None) => {}
                    Err(e) => {
                        telemetry::remote::snapshot_failed(&format!("{reason:?}"), &e.to_string())
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(retry) => {}
                    _ = this.inner.shutdown.cancelled() => return,
                }
            }
        });
    }

    fn pick(
        &self,
        kinds: Option<Vec<String>>,
    ) -> Result<Vec<Arc<dyn SnapshotKind>>, SnapshotError> {
        let Some(names) = kinds else {
            return Ok(self.inner.kinds.clone());
        };
        let mut picked: Vec<Arc<dyn SnapshotKind>> = Vec::new();
        for name in names {
            let kind = self.inner.kinds.iter().find(|k| k.kind() == name);
            let kind = kind.ok_or_else(|| SnapshotError::UnknownKind(name.clone()))?;
            if !picked.iter().any(|k| k.kind() == name) {
                picked.push(kind.clone());
            }
        }
        if picked.is_empty() {
            return Ok(self.inner.kinds.clone());
        }
        Ok(picked)
    }

    /// Mark a snapshot of `kinds` running, unless one is.
    fn begin(
        &self,
        kinds: &[Arc<dyn SnapshotKind>],
        reason: Reason,
    ) -> Result<Progress, SnapshotError> {
        let mut status = self.inner.lock();
        if status.running.is_some() {
            return Err(SnapshotError::InProgress);
        }
        let progress = Progress {
            id: Uuid::new_v4(),
            kinds: kinds.iter().map(|k| k.kind()).collect(),
            reason,
            state: Phase::Running,
            items: 0,
            error: None,
        };
        status.running = Some(progress.clone());
        Ok(progress)
    }

    /// The running snapshot ended.
    fn end(&self, ended: Result<(), String>) {
        let mut status = self.inner.lock();
        if let Some(mut progress) = status.running.take() {
            match ended {
                Ok(()) => progress.state = Phase::Finished,
                Err(e) => {
                    telemetry::remote::snapshot_failed(&format!("{:?}", progress.reason), &e);
                    progress.state = Phase::Failed;
                    progress.error = Some(e);
                }
            }
            status.last = Some(progress);
        }
    }

    /// The snapshot's rows: the start marker with each kind's floor, the items, the finish
    /// marker with their count.
    async fn run(
        &self,
        id: Uuid,
        kinds: &[Arc<dyn SnapshotKind>],
        reason: Reason,
    ) -> Result<u64, StoreError> {
        let text = id.to_string();
        let mut stores = Vec::with_capacity(kinds.len());
        let mut floors = Vec::with_capacity(kinds.len());
        for kind in kinds {
            let floor = kind.floor().await?;
            floors.push(floor.version);
            let store = floor.store.unwrap_or_else(|| self.inner.source.clone());
            let floor = crate::lifecycle::event::sequence(floor.version);
            stores.push(json!({"kind": kind.kind(), "store": store, "floor": floor}));
        }
        let names: Vec<&str> = kinds.iter().map(|k| k.kind()).collect();
        telemetry::remote::snapshot_started(&text, &names);
        self.marker(id, "start", json!({"id": text, "stores": stores}))
            .await?;
        let mut count = 0;
        let written = |n: u64| {
            if let Some(p) = self.inner.lock().running.as_mut() {
                p.items += n;
            }
            !self.inner.shutdown.is_cancelled()
        };
        for (kind, floor) in kinds.iter().zip(floors) {
            // After a loss, consumers may hold versions the store no longer has.
            let lifted = (reason == Reason::StoreLoss).then_some(floor);
            count += kind.items(&text, PAGE, lifted, &written).await?;
        }
        self.marker(id, "finish", json!({"id": text, "count": count}))
            .await?;
        telemetry::remote::snapshot_finished(&text, count);
        Ok(count)
    }

    /// Commit marker `snapshot.<verb>` of snapshot `id` with `entity` (a system row), on a
    /// resource of its own (`snapshots/<id>/<verb>`): its event's Kafka key is then its own,
    /// so a compacted topic keeps both markers, not only the last one.
    async fn marker(&self, id: Uuid, verb: &str, entity: Value) -> Result<(), StoreError> {
        let resource = format!("{}/{verb}", resource(id));
        let mut change = Change::new(format!("snapshot.{verb}"), resource).entity(entity);
        change.snapshot = Some(id.to_string());
        self.inner
            .trail
            .commit(Context::system(), move |_| {
                Ok::<_, CommitError<()>>((change, ()))
            })
            .await
            .map(|_| ())
            .map_err(unrecorded)
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Status> {
        // A status is a plain value: a panic mid-update leaves a readable one.
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A snapshot's resource: `snapshots/<id>`.
fn resource(id: Uuid) -> String {
    format!("snapshots/{id}")
}

/// A system row the writer did not write.
pub(crate) fn unrecorded<E>(e: CommitError<E>) -> StoreError {
    StoreError::NotRecorded {
        what: "a snapshot row",
        backlog: matches!(e, CommitError::AuditBacklog),
    }
}

#[cfg(test)]
mod tests;
