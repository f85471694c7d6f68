//! What the node does when a shared store lost data (a failover that lost writes, a restart
//! without persistence, an old backup): the store notices it (its version counter below
//! what this process saw in it, its id gone; see `redis/counter.rs`), on a change or on the
//! check this task makes every interval, and the node, once per loss, writes a system row
//! `<kind>.store_loss` saying what was found, shows it in `/readyz` until it is handled, and
//! takes a snapshot of the kind. The snapshot's floor is above every version issued before
//! (versions go on above the clock and the floor), so the contract's pruning removes from
//! replicas what the store lost; its items tell them the present.
//!
//! The same task keeps what the node knows of each store (see `recall.rs`) whenever it moved.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Recalled, RemoteStore, RemoteSubject, StoreLoss};
use crate::audit::{Change, CommitError, Context, Trail};
use crate::store::StoreError;
use crate::subjects::snapshot::{Reason, Snapshots};

/// A kind's shared store, as this task watches it (the kind's [`RemoteStore`], whatever its
/// subject type).
#[async_trait::async_trait]
pub trait Watched: Send + Sync {
    /// [`RemoteStore::check`].
    async fn check(&self) -> Result<(), StoreError>;
    /// [`RemoteStore::take_loss`].
    fn take_loss(&self) -> Option<StoreLoss>;
    /// [`RemoteStore::recollection`].
    fn recollection(&self) -> Option<Recalled>;
}

#[async_trait::async_trait]
impl<T: RemoteSubject> Watched for Arc<dyn RemoteStore<T>> {
    async fn check(&self) -> Result<(), StoreError> {
        RemoteStore::check(&**self).await
    }
    fn take_loss(&self) -> Option<StoreLoss> {
        RemoteStore::take_loss(&**self)
    }
    fn recollection(&self) -> Option<Recalled> {
        RemoteStore::recollection(&**self)
    }
}

/// The kinds whose store lost data and whose snapshot has not finished yet.
#[derive(Debug, Clone, Default)]
pub struct Losses(Arc<Mutex<BTreeSet<&'static str>>>);

impl Losses {
    /// The kinds not yet handled, in name order.
    pub fn pending(&self) -> Vec<&'static str> {
        self.lock().iter().copied().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<&'static str>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Check `stores` (each with its kind) every `interval` until `stop`: each loss gets its
/// row and, with `snapshots`, a snapshot of its kind, retried every `interval` until one
/// finishes; what the node knows of each store is kept in `trail` when it moved.
pub fn watch(
    trail: Trail,
    stores: Vec<(&'static str, Arc<dyn Watched>)>,
    snapshots: Option<Snapshots>,
    interval: Duration,
    stop: CancellationToken,
) -> (Losses, JoinHandle<()>) {
    let losses = Losses::default();
    let pending = losses.clone();
    let task = tokio::spawn(async move {
        let mut kept: BTreeMap<&'static str, Recalled> = BTreeMap::new();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = stop.cancelled() => {
                    // The writer still runs: what the stores know now outlives the process.
                    keep(&trail, &stores, &mut kept).await;
                    return;
                }
            }
            for (_, store) in &stores {
                // A store that does not answer is reported by the changes it fails.
                let _ = store.check().await;
            }
            keep(&trail, &stores, &mut kept).await;
            for (kind, store) in &stores {
                let kind = *kind;
                let Some(loss) = store.take_loss() else {
                    continue;
                };
                pending.lock().insert(kind);
                recorded(&trail, kind, &loss, interval, &stop).await;
                match &snapshots {
                    Some(snapshots) => {
                        let handled = snapshot(snapshots.clone(), kind, interval, stop.clone());
                        let pending = pending.clone();
                        tokio::spawn(async move {
                            if handled.await {
                                pending.lock().remove(kind);
                            }
                        });
                    }
                    // No events: the row is all there is to tell.
                    None => {
                        pending.lock().remove(kind);
                    }
                }
            }
        }
    });
    (losses, task)
}

/// Keep what each store knows now where it moved since `kept`.
async fn keep(
    trail: &Trail,
    stores: &[(&'static str, Arc<dyn Watched>)],
    kept: &mut BTreeMap<&'static str, Recalled>,
) {
    for (kind, store) in stores {
        if let Some(now) = store.recollection() {
            if kept.get(kind) != Some(&now) && now.keep(trail, kind).await.is_ok() {
                kept.insert(kind, now);
            }
        }
    }
}

/// Write the loss's system row, retried every `interval` while the trail refuses it.
async fn recorded(
    trail: &Trail,
    kind: &str,
    loss: &StoreLoss,
    interval: Duration,
    stop: &CancellationToken,
) {
    loop {
        let change = Change::new(format!("{kind}.store_loss"), format!("stores/{kind}"))
            .detail("store", loss.store.clone())
            .detail("counter", loss.counter)
            .detail("seen", loss.seen)
            .detail("found", loss.found);
        let committed = trail
            .commit(Context::system(), move |_| {
                Ok::<_, CommitError<()>>((change, ()))
            })
            .await;
        if committed.is_ok() {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// Take a snapshot of `kind` until one finishes (true) or the node stops (false).
async fn snapshot(
    snapshots: Snapshots,
    kind: &'static str,
    interval: Duration,
    stop: CancellationToken,
) -> bool {
    loop {
        if let Ok(Some(_)) = snapshots
            .take(Reason::StoreLoss, Some(vec![kind.to_owned()]))
            .await
        {
            return true;
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.cancelled() => return false,
        }
    }
}
