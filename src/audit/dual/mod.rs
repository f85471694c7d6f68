//! Dual writes: a change that lives outside this node's store (a route in the route store,
//! memory or Redis), and the settlement of those whose caller never finished them.
//!
//! There is no transaction across the two stores, so the row goes first, as a pending row
//! ([`Trail::begin`]), the caller applies the change, and [`Trail::finish`] moves the pending
//! row into the trail with the outcome in one batch ([`Trail::record`] does all three). A
//! [`Pending`] that is dropped unfinished (its task was cancelled or panicked) sends its id to
//! the settlement task (see `settle.rs`) and never blocks. A crash leaves the pending row for
//! the next boot to settle.
//!
//! The pending row `p`+id holds the hashes of the states before and after (the states
//! themselves are never stored). The trail row takes its seq only when the pending row moves
//! into the trail, from the normal counter: a begun change never holds a trail seq, because a
//! reader that resumes after the last seq it saw must never miss a row that lands later with
//! a smaller key. Pending ids count apart, in `m:pending_seq`.
//!
//! The files: `handle.rs` is what the caller holds (`Pending`, `Finish`, `Recorded`);
//! `pending_row.rs` the pending row and its codec; `requests.rs` what the steps send the
//! writer and how it answers; `writer_side/` what the writer does with them; `settle.rs`
//! the settlement task and the `Reconcile` trait the subject stores implement. The `Trail`
//! methods of this part (begin, finish, record, settlement) are here.

pub(crate) mod handle;
pub(crate) mod pending_row;
pub(crate) mod requests;
pub(crate) mod settle;
pub(crate) mod writer_side;

use std::future::Future;
use std::sync::Mutex;

use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use handle::{Finish, Pending, Recorded};
use requests::{Begin, FinishReq, Refusal, SettleReq, Settled};
use settle::{Presence, Reconcilers, SettleOptions};

use crate::audit::writer::Request;
use crate::audit::{Change, CommitError, Context, Trail};
use crate::store::{keys, Cf, Store, StoreError};
use crate::telemetry;
use crate::telemetry::dual::{timed, Stage};

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
    /// The dual-write state of a booting trail: the last pending id handed out, and whether
    /// an earlier run left pending rows for settlement to settle first.
    pub(crate) fn at_boot(store: &Store) -> Result<DualState, StoreError> {
        let last_pending = pending_row::last_id(store)?;
        // Whether an earlier run left pending rows for settlement to settle first.
        let left_pending = store.last(Cf::Audit, &[keys::PENDING])?;
        Ok(DualState::new(last_pending, left_pending.is_none()))
    }

    fn new(boot_last: u64, nothing_left: bool) -> DualState {
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
        let id = pending.id();
        let settled = self
            .ask(|reply| Request::Finish(FinishReq { id, how, reply }))
            .await?;
        pending.disarm();
        if let Some(s) = &settled {
            telemetry::dual::pending_finished(s);
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
        let pending = timed(Stage::Begin, self.begin(ctx, change)).await?;
        fail::fail_point!("dual::before_apply");
        let (how, value) = timed(Stage::Store, apply()).await;
        fail::fail_point!("dual::before_finish");
        let Some(how) = how else {
            drop(pending);
            return Ok(Recorded {
                settled: None,
                value,
            });
        };
        let settled = match timed(Stage::Finish, self.finish(pending, how)).await {
            Ok(settled) => settled,
            Err(e) => {
                // The change itself went as `how` says; only its row is late (settlement
                // writes it). The caller still hears what happened to the change.
                crate::telemetry::dual::finish_failed(&e);
                None
            }
        };
        fail::fail_point!("dual::after_finish");
        Ok(Recorded { settled, value })
    }

    /// Start settling: first every pending row left by an earlier run, then every
    /// [`Pending`] dropped unfinished, until `shutdown`. Only the first call
    /// starts anything; what is unsettled at shutdown stays for the next boot.
    pub fn start_settlement(
        &self,
        reconcilers: Reconcilers,
        options: SettleOptions,
        shutdown: CancellationToken,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let dropped = self.dual.settlement.lock().ok()?.take()?;
        Some(settle::spawn(
            self.clone(),
            reconcilers,
            options,
            dropped,
            shutdown,
        ))
    }

    /// The ids of the pending rows a crash left: those up to the last id of the earlier run.
    async fn left_by_crash(&self) -> Result<Vec<u64>, StoreError> {
        let (store, last) = (self.store.clone(), self.dual.boot_last);
        crate::store::blocking::try_run("the scan of pending rows", move || {
            let mut ids = Vec::new();
            store.scan(Cf::Audit, &[keys::PENDING], &[keys::PENDING], |k, _| {
                match keys::decode_seq_key(keys::PENDING, k) {
                    Some(id) if id <= last => {
                        ids.push(id);
                        true
                    }
                    _ => false,
                }
            })?;
            Ok(ids)
        })
        .await
    }

    /// Resolves once settlement has been through every pending row an earlier run left (at
    /// once when there was none): each is settled, or was tried once and failed (it is tried
    /// again meanwhile, unless it does not decode or the writer stopped). Waits for
    /// [`Trail::start_settlement`].
    pub async fn boot_settled(&self) {
        let mut settled = self.dual.boot_settled.subscribe();
        // The sender lives in the trail: it cannot close while `self` does.
        let _ = settled.wait_for(|done| *done).await;
    }

    async fn settle(&self, id: u64, presence: Presence) -> Result<Option<Settled>, StoreError> {
        self.ask(|reply| {
            Request::Settle(SettleReq {
                id,
                presence,
                reply,
            })
        })
        .await
    }
}
