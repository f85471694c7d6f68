//! The audit trail: one row for every change to the node's configuration, written with it.
//!
//! [`Trail`] is the handle every part of the node uses. `commit` takes a change to a subject
//! in this node's store: the change's ops and its row go to the writer thread, which puts
//! them in one synced batch, so that after a kill -9 both survive or neither does. Rows are
//! read back in seq order with [`page`], which is commit order.
//!
//! Only the writer (in `writer.rs`) writes the `audit` column family.

mod bounds;
mod clock;
mod context;
mod dual;
mod dual_events;
mod hash;
mod restore;
mod row;
mod writer;

pub use bounds::retention;

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tokio::sync::{mpsc, oneshot, watch};

pub use bounds::limits::{Ceilings, Limits, Pruned, TrailStats};
pub use bounds::prune::SweepBatch;
pub use bounds::retention::SweepReport;
pub use bounds::usage::{Mismatch, Usage};
pub use clock::{Clock, ManualClock, SystemClock};
pub use context::{Context, SYSTEM_ACTOR};
pub use dual::settle::{Hold, Present, Reconcile, Reconcilers, SettleOptions};
pub use dual::writer_side::{decode_pending, pending_rows, PendingRow, Settled, PENDING_FORMAT};
pub use dual::{Finish, Pending, Recorded};
pub use hash::canonical;
pub use restore::first_boot::{RESTORE_ACTION, RESTORE_RESOURCE};
pub use restore::incarnation::{History, Incarnation};
pub use restore::refresh::{Known, Refresh, SubjectKey, TrailStates, REFRESH_VERB};
pub use row::{
    decode_row, decode_row_as, get, page, page_within, Change, Filter, Row, RowResult, Scanned,
    ROW_FORMAT,
};
pub use writer::tx::Tx;
pub use writer::MAX_GROUP;

use crate::store::{keys, Cf, Store, StoreError};
use bounds::limits::SharedStats;
use bounds::prune;
use writer::{Advance, Fate, Job, Request, Sweep, Writer};

/// Why a change was not made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CommitError<E> {
    /// The change's own validation refused it (bad input, missing subject, conflict): no
    /// row, no seq.
    #[error("refused: {0}")]
    Refused(E),
    /// Its row could not be written, so the change was not made.
    #[error("the store is unavailable")]
    StoreUnavailable,
    /// The trail is at a ceiling, or the outbox holds too many unpublished events.
    #[error("the audit trail is at its backlog ceiling")]
    AuditBacklog,
}

impl<E> From<StoreError> for CommitError<E> {
    fn from(e: StoreError) -> Self {
        tracing::error!(error = %e, "store error while validating a change");
        CommitError::StoreUnavailable
    }
}

/// A change that was committed, with its row's position and what the change returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed<T> {
    /// The row's seq.
    pub seq: u64,
    /// The row's commit time (unix milliseconds).
    pub at: u64,
    /// What the change's closure returned.
    pub value: T,
}

/// How the trail behaves.
#[derive(Debug, Clone)]
pub struct TrailOptions {
    /// Lifecycle events on: changes that carry an entity are flagged and outboxed.
    pub lifecycle: bool,
    /// Requests that may wait for the writer before callers wait to enqueue.
    pub queue: usize,
    /// The configured lifecycle sinks: `m:lifecycle_cursor` is the minimum of their positions.
    /// While any is configured, no row at or above it is ever deleted.
    pub sinks: Vec<String>,
    /// Retention, ceilings and the outbox backlog limit (`[audit]`).
    pub limits: Limits,
}

impl Default for TrailOptions {
    fn default() -> Self {
        TrailOptions {
            lifecycle: true,
            queue: 8 * MAX_GROUP,
            sinks: Vec::new(),
            limits: Limits::default(),
        }
    }
}

/// A handle on the audit trail. Cheap to clone; every clone talks to one writer.
#[derive(Clone)]
pub struct Trail {
    requests: mpsc::Sender<Request>,
    store: Store,
    committed: watch::Receiver<u64>,
    history: History,
    thread: Arc<Mutex<Option<JoinHandle<()>>>>,
    clock: Arc<dyn Clock>,
    limits: Limits,
    stats: SharedStats,
    /// Dual writes: where dropped `Pending`s go, and the boot's last pending id.
    dual: Arc<dual::DualState>,
    /// `m:refresh_pending` as of boot (see [`Trail::refresh_pending`]).
    refresh_pending: Option<u64>,
}

impl std::fmt::Debug for Trail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trail").field("store", &self.store).finish()
    }
}

impl Trail {
    /// Boot the trail on `store` (making a new store's key and first incarnation) and start
    /// its writer thread. Blocks on RocksDB: call it before serving, or in `spawn_blocking`.
    pub fn start(
        store: Store,
        options: TrailOptions,
        clock: Arc<dyn Clock>,
    ) -> Result<Trail, StoreError> {
        // A restored store opens its new incarnation before the writer boots or takes a change.
        restore::first_boot::open_pending(&store, options.lifecycle, clock.as_ref())?;
        let boot = writer::boot(&store, &options.sinks)?;
        let last_pending = dual::writer_side::last_id(&store)?;
        // Whether an earlier run left pending rows for settlement to settle first.
        let left_pending = store.last(Cf::Audit, &[keys::PENDING])?;
        let (requests, rx) = mpsc::channel(options.queue.max(1));
        let (committed_tx, committed) = watch::channel(boot.last_seq);
        let cursor = prune::cursor(&boot.positions);
        let stats = SharedStats::new(TrailStats {
            usage: boot.usage,
            ceilings: options.limits.ceilings(),
            cursor,
            backlog: prune::backlog(cursor, boot.last_seq),
            ..TrailStats::default()
        });
        crate::telemetry::ceilings(&options.limits.ceilings());
        let tally = writer::sync::Tally {
            last_seq: boot.last_seq,
            last_at: boot.last_at,
            usage: boot.usage,
            positions: boot.positions,
        };
        let writer = Writer {
            store: store.clone(),
            rx,
            hasher: boot.hasher,
            clock: clock.clone(),
            tally: tally.clone(),
            written: tally.clone(),
            lifecycle: options.lifecycle,
            head: prune::Head::new(boot.usage.from),
            limits: options.limits,
            pending: last_pending,
            unsynced: Default::default(),
        };
        let syncer = writer::sync::Syncer {
            store: store.clone(),
            committed: committed_tx,
            stats: stats.clone(),
            written: tally,
            failed: None,
        };
        let thread = writer::spawn(writer, syncer).map_err(|e| StoreError::Corrupt {
            what: "audit writer thread".into(),
            detail: e.to_string(),
        })?;
        Ok(Trail {
            requests,
            store,
            committed,
            history: boot.history,
            thread: Arc::new(Mutex::new(Some(thread))),
            clock,
            limits: options.limits,
            stats,
            dual: Arc::new(dual::DualState::new(last_pending, left_pending.is_none())),
            refresh_pending: boot.refresh_pending,
        })
    }

    /// Commit a change to a subject of this node's store together with its row.
    ///
    /// `change` runs on the writer thread: it reads the subject through the [`Tx`] (which
    /// sees the writes of changes committed before it in the same group), stages the
    /// subject's ops there, and returns the [`Change`] its row describes and a value for the
    /// caller. An `Err` from it writes nothing and takes no seq. It must be quick and must
    /// not block on anything but the store.
    pub async fn commit<T, E, F>(
        &self,
        ctx: Context,
        change: F,
    ) -> Result<Committed<T>, CommitError<E>>
    where
        F: FnOnce(&mut Tx<'_>) -> Result<(Change, T), CommitError<E>> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job = CommitJob {
            change: Some(change),
            prepared: None,
            reply,
        };
        let request = Request::Commit {
            ctx,
            job: Box::new(job),
        };
        if self.requests.send(request).await.is_err() {
            return Err(CommitError::StoreUnavailable);
        }
        answer.await.unwrap_or(Err(CommitError::StoreUnavailable))
    }

    /// Persist that lifecycle sink `sink` has confirmed (or dead-lettered) every flagged row
    /// up to `to`, writing `dead_letters` (keys and values of the `dead_letters` column
    /// family) in the same synced batch; `m:lifecycle_cursor` becomes the minimum position
    /// of the configured sinks.
    pub async fn advance(
        &self,
        sink: &str,
        to: u64,
        dead_letters: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<(), StoreError> {
        let sink = sink.to_owned();
        self.ask(|reply| {
            Request::Advance(Advance {
                sink,
                to,
                dead_letters,
                reply,
            })
        })
        .await
    }

    /// Delete up to `max_rows` rows committed before `older_than_ms` (unix ms), oldest first,
    /// with their outbox entities, in one writer batch; while sinks are configured, never a
    /// row at or above the lifecycle cursor. One batch of a retention sweep: see
    /// [`Trail::sweep_now`] for a whole one.
    pub async fn sweep_batch(
        &self,
        older_than_ms: u64,
        max_rows: usize,
    ) -> Result<SweepBatch, StoreError> {
        self.ask(|reply| {
            Request::Sweep(Sweep {
                older_than_ms,
                max_rows,
                reply,
            })
        })
        .await
    }

    /// Send the writer the request `make` builds around a reply channel and wait for its
    /// answer; `Unavailable` when the writer has stopped.
    pub(crate) async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Request,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        let closed = || StoreError::Unavailable("the audit writer has stopped".into());
        self.requests
            .send(make(reply))
            .await
            .map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }

    /// Run one whole retention sweep now (what the hourly task does): every expired row the
    /// cursor does not hold back is deleted, in batches of `limits.sweep_batch`.
    pub async fn sweep_now(&self) -> Result<SweepReport, StoreError> {
        retention::sweep(self, None).await
    }

    /// Usage, ceilings, cursor, backlog, pruned and refused counts, as of the writer's last
    /// write (for `GET /admin/v1/lifecycle`).
    pub fn stats(&self) -> TrailStats {
        self.stats.get()
    }

    /// Rows and bytes of the trail (`m:audit_usage`), as of the writer's last write.
    pub fn usage(&self) -> Usage {
        self.stats.get().usage
    }

    /// The trail's retention and ceilings.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The clock rows are stamped with and retention is measured by.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The store the trail lives in.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The last committed seq, as a watch: it changes after every group commit. A hint for
    /// readers that want to wake on commits; the store is the truth.
    pub fn committed(&self) -> watch::Receiver<u64> {
        self.committed.clone()
    }

    /// The incarnation history as of boot, including the incarnation a restored store opened
    /// at this boot.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// [`page_within`] off the async runtime.
    pub async fn page(
        &self,
        after: u64,
        limit: usize,
        filter: Filter,
        budget: usize,
    ) -> Result<Scanned, StoreError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || page_within(&store, after, limit, &filter, budget))
            .await
            .unwrap_or_else(|e| Err(StoreError::Unavailable(format!("page task failed: {e}"))))
    }

    /// Whether the writer is running: `false` once it stopped ([`Trail::shutdown`]) or died
    /// (a panic outside a change's own code), after which every change is `StoreUnavailable`.
    pub fn is_taking_changes(&self) -> bool {
        !self.requests.is_closed()
    }

    /// Finish every queued change, flush the store and stop the writer. Changes sent after
    /// this get `StoreUnavailable`.
    pub async fn shutdown(&self) {
        let (done, finished) = oneshot::channel();
        if self.requests.send(Request::Shutdown(done)).await.is_ok() {
            let _ = finished.await;
        }
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(thread) = thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

/// A `commit` on its way through the writer.
struct CommitJob<F, T, E> {
    change: Option<F>,
    prepared: Option<Result<T, CommitError<E>>>,
    reply: oneshot::Sender<Result<Committed<T>, CommitError<E>>>,
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
