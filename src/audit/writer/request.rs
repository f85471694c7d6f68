//! What the writer is asked to do: one [`Request`] per change, sink position move, sweep
//! batch, dual-write step or refresh, and the [`Job`] a commit carries.
//!
//! A commit's closure is generic in what it returns and how it fails, and the writer handles
//! every commit alike: so the closure travels as a boxed [`Job`] (here [`CommitJob`]) that
//! validates itself on the writer, then hears its [`Fate`] once its group's batch is written
//! or not.

use tokio::sync::oneshot;

use super::tx::Tx;
use crate::audit::bounds::prune::SweepBatch;
use crate::audit::context::Context;
use crate::audit::dual::requests::{Begin, FinishReq, SettleReq};
use crate::audit::restore::refresh::RefreshReq;
use crate::audit::row::Change;
use crate::audit::{CommitError, Committed};
use crate::store::StoreError;

/// What became of a request the writer took.
pub(crate) enum Fate {
    /// Written and synced as row `seq` at `at`.
    Committed {
        /// The row's seq.
        seq: u64,
        /// The row's commit time.
        at: u64,
    },
    /// Not written: refused by its own validation, or the batch could not be written.
    Unwritten,
    /// Not written, and its validation does not stand either: it was decided against a batch
    /// before it that could not be written.
    Abandoned,
    /// Refused before it took a seq: the trail is at a ceiling or the outbox backlog is full.
    /// Nothing of it is written.
    Backlog,
}

/// A unit of work for the writer: validate and describe a change, then hear its fate.
pub(crate) trait Job: Send {
    /// Validate against `tx` and stage the change's ops there. `None`: refused (the job
    /// keeps its own reason), nothing of it is written and it takes no seq.
    fn prepare(&mut self, tx: &mut Tx<'_>) -> Option<Change>;
    /// Called once the group's batch was written (or not).
    fn complete(self: Box<Self>, fate: Fate);
}

/// A request to the writer.
pub(crate) enum Request {
    /// Commit one change with its row.
    Commit {
        /// Who asked.
        ctx: Context,
        /// The change.
        job: Box<dyn Job>,
    },
    /// Move a lifecycle sink's position (and with it `m:lifecycle_cursor`), writing the
    /// dead letters of the events it passed over in the same batch.
    Advance(Advance),
    /// Delete expired rows from the head of the trail: one batch of the retention sweep.
    Sweep(Sweep),
    /// Write the pending row of a dual write (see `dual/writer_side.rs`).
    Begin(Box<Begin>),
    /// Move a pending row into the trail with its caller's outcome.
    Finish(FinishReq),
    /// Move a pending row into the trail with what settlement found.
    Settle(SettleReq),
    /// Write a remote subject's state-refresh row, unless the trail already says its state.
    Refresh(Box<RefreshReq>),
    /// Delete `m:refresh_pending`: every remote kind is refreshed.
    RefreshDone(oneshot::Sender<Result<(), StoreError>>),
    /// Put what the node knows of a kind's shared store (`m:remote:<kind>`).
    Remember(Remember),
    /// Sign a checkpoint of the tree now if any row came since the last one; answered with
    /// the checkpoint row's seq.
    Checkpoint(oneshot::Sender<Result<Option<u64>, StoreError>>),
    /// Finish what is queued, flush, and stop; the sender is answered when done.
    Shutdown(oneshot::Sender<()>),
}

impl Request {
    /// Whether preparing it reads the trail itself (rows, the head beyond what the writer
    /// keeps of unwritten groups), which only the store holds: it waits for every group
    /// before it to be on disk. A dual write's begin and finish do not: they read and write
    /// pending rows through the group's and the unwritten groups' overlays, as a commit reads
    /// subjects; nor does a refresh row (a restore's, a snapshot's item), which reads nothing.
    /// They share group commits with commits and with each other.
    pub(super) fn reads_trail(&self) -> bool {
        match self {
            Request::Commit { .. }
            | Request::Advance(_)
            | Request::Begin(_)
            | Request::Finish(_)
            | Request::Refresh(_)
            | Request::Checkpoint(_)
            | Request::Remember(_)
            | Request::Shutdown(_) => false,
            Request::Sweep(_) | Request::Settle(_) | Request::RefreshDone(_) => true,
        }
    }
}

/// What the node knows of a kind's shared store, to keep across restarts.
pub(crate) struct Remember {
    /// The kind (`route`, `source`).
    pub kind: String,
    /// Its encoding (see `subjects::remote::recall`).
    pub value: Vec<u8>,
    /// Answered once the batch is written.
    pub reply: oneshot::Sender<Result<(), StoreError>>,
}

/// A sink's new position, with what it dead-lettered on the way.
pub(crate) struct Advance {
    /// The sink's name.
    pub sink: String,
    /// The highest seq the sink has confirmed (or handled for good), contiguously.
    pub to: u64,
    /// Dead letters to write (key, value) in the `dead_letters` column family.
    pub dead_letters: Vec<(Vec<u8>, Vec<u8>)>,
    /// Answered once the batch is written.
    pub reply: oneshot::Sender<Result<(), StoreError>>,
}

/// One batch of the retention sweep.
pub(crate) struct Sweep {
    /// Rows committed before this (unix ms) are expired.
    pub older_than_ms: u64,
    /// Most rows to delete in this batch.
    pub max_rows: usize,
    /// Answered once the batch is written.
    pub reply: oneshot::Sender<Result<SweepBatch, StoreError>>,
}

/// A `commit` on its way through the writer.
pub(crate) struct CommitJob<F, T, E> {
    /// The change's closure, until the writer runs it.
    pub change: Option<F>,
    /// What the closure returned, until the fate is known.
    pub prepared: Option<Result<T, CommitError<E>>>,
    /// The caller.
    pub reply: oneshot::Sender<Result<Committed<T>, CommitError<E>>>,
}

impl<F, T, E> Job for CommitJob<F, T, E>
where
    F: FnOnce(&mut Tx<'_>) -> Result<(Change, T), CommitError<E>> + Send,
    T: Send,
    E: Send,
{
    fn prepare(&mut self, tx: &mut Tx<'_>) -> Option<Change> {
        let change = self.change.take()?;
        match change(tx) {
            Ok((row, value)) => {
                self.prepared = Some(Ok(value));
                Some(row)
            }
            Err(e) => {
                self.prepared = Some(Err(e));
                None
            }
        }
    }

    fn complete(self: Box<Self>, fate: Fate) {
        let result = match (self.prepared, fate) {
            // Its validation was decided against a batch that was not written.
            (_, Fate::Abandoned) => Err(CommitError::StoreUnavailable),
            (Some(Err(e)), _) => Err(e),
            (_, Fate::Backlog) => Err(CommitError::AuditBacklog),
            (Some(Ok(value)), Fate::Committed { seq, at }) => Ok(Committed { seq, at, value }),
            _ => Err(CommitError::StoreUnavailable),
        };
        // The caller may have gone away; the change is committed (or not) all the same.
        let _ = self.reply.send(result);
    }
}
