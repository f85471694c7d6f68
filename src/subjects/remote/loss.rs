//! What the node does when a shared store lost data (a failover that lost writes, a restart
//! without persistence, an old backup): the store notices it (its version counter below
//! what this process saw in it, see `redis/counter.rs`), and the node, once per loss, writes a system
//! row `<kind>.store_loss` saying what was found, shows it in `/readyz` until it is handled,
//! and takes a snapshot of the kind. The snapshot's floor is above every version issued
//! before (versions go on above the clock and the floor), so the contract's pruning removes
//! from replicas what the store lost; its items tell them the present.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::StoreLoss;
use crate::audit::{Change, CommitError, Context, Trail};
use crate::subjects::snapshot::{Reason, Snapshots};

/// Where a kind's losses are found: its store's [`take_loss`](super::RemoteStore::take_loss).
pub type LossSource = Box<dyn Fn() -> Option<StoreLoss> + Send + Sync>;

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

/// Watch `stores` (kind, where its losses are found) every `interval` until `stop`: each
/// loss gets its row and, with `snapshots`, a snapshot of its kind, retried every `interval`
/// until one finishes.
pub fn watch(
    trail: Trail,
    stores: Vec<(&'static str, LossSource)>,
    snapshots: Option<Snapshots>,
    interval: Duration,
    stop: CancellationToken,
) -> (Losses, JoinHandle<()>) {
    let losses = Losses::default();
    let pending = losses.clone();
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = stop.cancelled() => return,
            }
            for &(kind, ref take) in &stores {
                let Some(loss) = take() else { continue };
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
            .detail("found", json!("the store's version counter went back"));
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
