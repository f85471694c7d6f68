//! The second way in: a dual write, for a change that lives outside this node's store (a
//! route in the route store, memory or Redis).
//!
//! There is no transaction across the two stores, so the row goes first, as a pending row
//! ([`Trail::begin`]), the caller applies the change, and [`Trail::finish`] moves the pending
//! row into the trail with the outcome in one batch ([`Trail::record`] does all three). A
//! [`Pending`] that is dropped unfinished (its task was cancelled or panicked) sends its id to
//! the settlement task (see `settle.rs`) and never blocks. A crash leaves the pending row for
//! the next boot to settle.

pub(crate) mod settle;
pub(crate) mod writer_side;

use std::future::Future;
use std::sync::Mutex;

use tokio::sync::{mpsc, oneshot, watch};

use crate::audit::dual::writer_side::{Begin, FinishReq, Refusal, Settled};
use crate::audit::dual_events;
use crate::audit::writer::Request;
use crate::audit::{Change, CommitError, Context, Trail};
use crate::store::StoreError;

/// How a dual write went, as its caller knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// The change took effect: the row says `ok` and its event is published.
    Applied,
    /// The change did not take effect: the row says `failed`, no event.
    NotApplied,
    /// The caller cannot tell and no reconciler can: the row says `interrupted`.
    Unknown,
    /// The other store refused the change (a compare-and-set conflict): nothing changed, so,
    /// as for a refused commit, no row; the pending row is removed.
    Refused,
}

/// A begun change: its pending row is on disk. Hand it to [`Trail::finish`]; dropped
/// unfinished, it is settled by the node.
#[derive(Debug)]
pub struct Pending {
    id: u64,
    resource: String,
    abandoned: mpsc::UnboundedSender<u64>,
    armed: bool,
}

impl Pending {
    pub(crate) fn new(id: u64, resource: String, abandoned: mpsc::UnboundedSender<u64>) -> Self {
        Pending {
            id,
            resource,
            abandoned,
            armed: true,
        }
    }

    /// The pending row's id (`p`+id).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Its subject, e.g. `routes/r1`.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// It needs no settlement (finished, or never written).
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.armed {
            // Unbounded: a Drop never blocks. A closed channel means the trail is gone, and
            // the next boot settles the row.
            dual_events::abandoned(self.id, &self.resource);
            let _ = self.abandoned.send(self.id);
        }
    }
}

/// What [`Trail::record`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded<T> {
    /// The trail row (`None`: handed to settlement, or settled by it first).
    pub settled: Option<Settled>,
    /// What the change's `apply` returned.
    pub value: T,
}

/// What the trail keeps for dual writes.
#[derive(Debug)]
pub(crate) struct DualState {
    /// Where a dropped [`Pending`] sends its id.
    pub abandoned: mpsc::UnboundedSender<u64>,
    /// The other end, until the settlement task takes it.
    pub settlement: Mutex<Option<mpsc::UnboundedReceiver<u64>>>,
    /// The last pending id at boot: rows up to it were left by an earlier run.
    pub boot_last: u64,
    /// Becomes true once settlement has been through every pending row an earlier run left
    /// (true at once when there was none).
    pub boot_settled: watch::Sender<bool>,
}

impl DualState {
    pub(crate) fn new(boot_last: u64, nothing_left: bool) -> DualState {
        let (abandoned, settlement) = mpsc::unbounded_channel();
        DualState {
            abandoned,
            settlement: Mutex::new(Some(settlement)),
            boot_last,
            boot_settled: watch::Sender::new(nothing_left),
        }
    }
}

impl Trail {
    /// Begin a dual write: write the pending row of `change` (synced) and hand back its
    /// [`Pending`]. The writer hashes `change.before` and `change.after` (the states are
    /// never stored); `change.locator` tells settlement where to read the subject. An
    /// operator's change may be refused like a commit (`AuditBacklog`); a system one never.
    pub async fn begin<E>(&self, ctx: Context, change: Change) -> Result<Pending, CommitError<E>> {
        let (reply, answer) = oneshot::channel();
        let request = Request::Begin(Box::new(Begin {
            ctx,
            change,
            abandoned: self.dual.abandoned.clone(),
            reply,
        }));
        if self.requests.send(request).await.is_err() {
            return Err(CommitError::StoreUnavailable);
        }
        match answer.await {
            Ok(Ok(pending)) => Ok(pending),
            Ok(Err(Refusal::Backlog)) => Err(CommitError::AuditBacklog),
            Ok(Err(Refusal::Unavailable)) | Err(_) => Err(CommitError::StoreUnavailable),
        }
    }

    /// Finish a dual write: delete its pending row and write its trail row with `how`, in
    /// one synced batch. Never refused. `Ok(None)`: settlement got there first. On an error
    /// the pending row stays and is settled like a dropped one.
    pub async fn finish(
        &self,
        pending: Pending,
        how: Finish,
    ) -> Result<Option<Settled>, StoreError> {
        let mut pending = pending;
        let id = pending.id;
        let settled = self
            .ask(|reply| Request::Finish(FinishReq { id, how, reply }))
            .await?;
        pending.disarm();
        if let Some(s) = &settled {
            dual_events::finished(s);
        }
        Ok(settled)
    }

    /// Begin `change`, run `apply` (the write to the other store), and finish with what it
    /// says: `Some(how)`, or `None` when it cannot tell (a timeout, a lost connection), which
    /// hands the pending row to settlement to reconcile against the subject's present state.
    pub async fn record<T, E, F, Fut>(
        &self,
        ctx: Context,
        change: Change,
        apply: F,
    ) -> Result<Recorded<T>, CommitError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = (Option<Finish>, T)>,
    {
        fail::fail_point!("dual::before_begin");
        let pending = self.begin(ctx, change).await?;
        fail::fail_point!("dual::before_apply");
        let (how, value) = apply().await;
        fail::fail_point!("dual::before_finish");
        let Some(how) = how else {
            drop(pending);
            return Ok(Recorded {
                settled: None,
                value,
            });
        };
        let settled = match self.finish(pending, how).await {
            Ok(settled) => settled,
            Err(e) => {
                // The change itself went as `how` says; only its row is late (settlement
                // writes it). The caller still hears what happened to the change.
                tracing::error!(target: "ankusa::audit", error = %e, "finishing a dual write failed; settlement will record it");
                None
            }
        };
        fail::fail_point!("dual::after_finish");
        Ok(Recorded { settled, value })
    }
}
