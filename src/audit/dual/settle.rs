//! Settlement: every pending row whose caller will never finish it becomes a trail row.
//!
//! Two kinds of rows need it: those of a [`Pending`](crate::audit::Pending) dropped unfinished while
//! the node runs (its id arrives on a channel), and those a crash left behind (found at boot:
//! every pending id up to the last one handed out before this boot). For each, the subject's
//! [`Reconcile`] reads its present state, and the writer compares its hash with the row's
//! (see `writer_side.rs`). A store that cannot be read (Redis down, or not yet loaded at boot) is
//! retried every `interval` for `window`, then the row settles `interrupted`. A subject with no
//! reconciler settles `interrupted` at once. A settlement the trail's store refused is tried
//! again, backing off, while the writer runs. The subject is held still on this node
//! ([`Reconcile::hold`]) from each read to the row settled with what it read: a change of it
//! landing in between would take the earlier seq, and the row, and its event, would then put
//! the older state last.
//!
//! The audit layer does not know subjects: the route and source stores implement
//! [`Reconcile`], and the node hands them in by kind.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::pending_row;
use crate::audit::row::Stamp;
use crate::audit::Trail;
use crate::store::{keys, Cf, StoreError};
use crate::telemetry;

/// A subject's present state, as its reconciler read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Present {
    /// The complete state, hashed like a change's states (never stored).
    pub state: Value,
    /// The redacted view a state-refresh event carries.
    pub view: Value,
}

/// What a reconciler read of a subject: its present state (`None`: it does not exist) and
/// the version that state is at (for a subject that does not exist, the store's version at
/// the read: at or above the change that deleted it, below any that creates it again).
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// The present state.
    pub present: Option<Present>,
    /// Its version, where the store keeps one.
    pub stamp: Option<Stamp>,
}

/// A subject held still by [`Reconcile::hold`] until dropped.
pub type Hold = Box<dyn std::any::Any + Send>;

/// Reads the present state of one kind of subject for settlement.
#[async_trait::async_trait]
pub trait Reconcile: Send + Sync {
    /// Keep every change of the subject at `locator` on this node from starting until the
    /// hold drops (`None`: not a locator of this kind, nothing held).
    async fn hold(&self, locator: &Value) -> Option<Hold>;

    /// The subject at `locator` (what its change put in [`Change::locate`](crate::audit::Change)),
    /// its present state `None` when it does not exist; `Err` (why) when its store cannot be
    /// read now.
    async fn present(&self, locator: &Value) -> Result<Reading, String>;
}

/// The reconcilers by subject kind (`route`, `source`).
pub type Reconcilers = HashMap<String, Arc<dyn Reconcile>>;

/// What settlement found out about a subject.
#[derive(Debug)]
pub(crate) enum Presence {
    /// What its reconciler read.
    Read(Reading),
    /// Its store could not be read within the window.
    Unreadable,
    /// No reconciler knows its kind.
    Unreconciled,
}

/// How settlement retries a store it cannot read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettleOptions {
    /// Between two attempts (and the wait before reading a dropped change's subject, so that
    /// a write still in flight lands first).
    pub interval: Duration,
    /// How long to keep trying before settling `interrupted`.
    pub window: Duration,
}

impl Default for SettleOptions {
    fn default() -> Self {
        SettleOptions {
            interval: Duration::from_secs(1),
            window: Duration::from_secs(60),
        }
    }
}

/// Start the settlement task: the rows an earlier run left, then every id on `dropped`,
/// until `shutdown`.
pub(super) fn spawn(
    trail: Trail,
    reconcilers: Reconcilers,
    options: SettleOptions,
    dropped: mpsc::UnboundedReceiver<u64>,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let settler = Settler {
        trail,
        reconcilers: Arc::new(reconcilers),
        options,
    };
    tokio::spawn(settler.run(dropped, shutdown))
}

/// The settlement task.
struct Settler {
    trail: Trail,
    reconcilers: Arc<Reconcilers>,
    options: SettleOptions,
}

impl Settler {
    async fn run(self, mut dropped: mpsc::UnboundedReceiver<u64>, shutdown: CancellationToken) {
        let mut tasks = JoinSet::new();
        // The first attempts at the rows an earlier run left: when they are all through (each
        // row settled, or tried once and being tried again), `boot_settled`.
        let mut left = JoinSet::new();
        match self.trail.left_by_crash().await {
            Ok(ids) => {
                if !ids.is_empty() {
                    telemetry::dual::pending_left_by_crash(ids.len());
                }
                for id in ids {
                    let (tried, first) = oneshot::channel();
                    tasks.spawn(self.one(id, false, Some(tried)));
                    left.spawn(async move {
                        let _ = first.await;
                    });
                }
            }
            Err(e) => telemetry::dual::settlement_failed(None, &e, None),
        }
        let boot_settled = &self.trail.dual.boot_settled;
        if left.is_empty() {
            boot_settled.send_replace(true);
        }
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                id = dropped.recv() => match id {
                    Some(id) => { tasks.spawn(self.one(id, true, None)); }
                    None => break,
                },
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                Some(_) = left.join_next(), if !left.is_empty() => {
                    if left.is_empty() {
                        boot_settled.send_replace(true);
                    }
                }
            }
        }
        tasks.abort_all();
        left.abort_all();
    }

    /// Settle pending row `id`; `dropped`: its caller just went away, and a write it had in
    /// flight gets one interval to land before the subject is read. A row that cannot be read
    /// or written now (a batch the store refused) is tried again, backing off from the
    /// interval to [`RETRY_MAX`] (or the interval, if longer), while the writer takes
    /// changes; a row that does not decode is left for the next boot, which reports it
    /// again. `tried` hears when the first attempt is over, however it went.
    fn one(
        &self,
        id: u64,
        dropped: bool,
        mut tried: Option<oneshot::Sender<()>>,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (trail, reconcilers, options) =
            (self.trail.clone(), self.reconcilers.clone(), self.options);
        async move {
            if dropped {
                tokio::time::sleep(options.interval).await;
            }
            let mut backoff = options.interval;
            loop {
                let attempt = settle_one(&trail, &reconcilers, options, id).await;
                if let Some(tried) = tried.take() {
                    let _ = tried.send(());
                }
                let e = match attempt {
                    Ok(()) => return,
                    Err(e) => e,
                };
                let again = !matches!(e, StoreError::Corrupt { .. }) && trail.is_taking_changes();
                telemetry::dual::settlement_failed(Some(id), &e, again.then_some(backoff));
                if !again {
                    return;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(RETRY_MAX.max(options.interval));
            }
        }
    }
}

/// The longest wait between two attempts at a pending row the store would not read or write.
const RETRY_MAX: Duration = Duration::from_secs(60);

/// One attempt at pending row `id`: read it, read its subject, write what it came to. `Ok`
/// also when the row is gone (finished meanwhile).
async fn settle_one(
    trail: &Trail,
    reconcilers: &Reconcilers,
    options: SettleOptions,
    id: u64,
) -> Result<(), StoreError> {
    let store = trail.store.clone();
    let key = keys::pending_key(id);
    let row = crate::store::blocking::try_run("a pending row's read", move || {
        store
            .get(Cf::Audit, &key)?
            .map(|v| pending_row::decode_pending(&key, &v))
            .transpose()
    })
    .await?;
    let Some(row) = row else {
        return Ok(());
    };
    let reconciler = row.kind.as_ref().and_then(|k| reconcilers.get(k));
    let (presence, _held) = match (reconciler, &row.locator) {
        (Some(r), Some(locator)) => read(r.as_ref(), locator, options, id).await,
        _ => (Presence::Unreconciled, None),
    };
    if let Some(s) = trail.settle(id, presence).await? {
        telemetry::dual::pending_reconciled(id, &s);
    }
    Ok(())
}

/// The present state of the subject at `locator`, retried every interval for the window;
/// a state read comes with the subject held (until the row is settled).
async fn read(
    r: &dyn Reconcile,
    locator: &Value,
    options: SettleOptions,
    id: u64,
) -> (Presence, Option<Hold>) {
    let deadline = tokio::time::Instant::now() + options.window;
    loop {
        let held = r.hold(locator).await;
        let attempt = tokio::time::timeout(
            options.interval.max(Duration::from_secs(1)),
            r.present(locator),
        );
        let why = match attempt.await {
            Ok(Ok(present)) => return (Presence::Read(present), held),
            Ok(Err(why)) => why,
            Err(_) => "timed out".to_owned(),
        };
        // Not held while waiting for the store.
        drop(held);
        let last = tokio::time::Instant::now() + options.interval > deadline;
        telemetry::dual::settlement_unreadable(id, &why, last);
        if last {
            return (Presence::Unreadable, None);
        }
        tokio::time::sleep(options.interval).await;
    }
}
