//! The audit trail: one row for every change to the node's configuration, written with it.
//!
//! [`Trail`] is the handle every part of the node uses. `commit` takes a change to a subject
//! in this node's store: the change's ops and its row go to the writer thread, which puts
//! them in one synced batch, so that after a kill -9 both survive or neither does. Rows are
//! read back in seq order with [`page`], which is commit order.
//!
//! Only the writer (in `writer/`) writes the `audit` column family.
//!
//! The module is four parts, one folder each, around a few shared pieces (`context.rs` who
//! made a change, `row.rs` the row and reading it back, `hash.rs` the keyed subject hashes,
//! `clock.rs` the time rows are stamped with):
//!
//! - `writer/`: the writer pipeline (boot, the serving loop, admission, the syncer thread);
//! - `dual/`: dual writes (`begin`, `finish`, `record`) and the settlement of those left
//!   unfinished;
//! - `bounds/`: limits, usage, pruning and the retention sweep;
//! - `restore/`: the first boot of a restored store, incarnations, and the refresh after it.
//!
//! `Trail` is defined here with its core methods (start, commit, sink positions, reads,
//! shutdown); each part folder's `mod.rs` holds one `impl Trail` block with that part's own
//! methods.

mod bounds;
mod clock;
mod context;
mod dual;

mod hash;
pub(crate) mod index;
mod query;
mod restore;
mod row;
pub mod tree;
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
pub use context::{Admission, Context, Trace, SYSTEM_ACTOR};
pub use dual::handle::{Finish, Pending, Recorded};
pub use dual::pending_row::{decode_pending, pending_rows, PendingRow, PENDING_FORMAT};
pub use dual::requests::Settled;
pub use dual::settle::{Hold, Present, Reading, Reconcile, Reconcilers, SettleOptions};
pub use hash::{canonical, State};
pub use index::{entries_of as index_entries, FORMAT as INDEX_FORMAT};
pub use restore::first_boot::{RESTORE_ACTION, RESTORE_RESOURCE};
pub use restore::incarnation::{now_micros, History, Incarnation};
pub use restore::refresh::{Known, Refresh, Refreshed, SubjectKey, TrailStates, REFRESH_VERB};
pub(crate) use row::encode_json;
pub use row::{
    decode_row, decode_row_as, get, page, page_within, Change, Filter, Row, RowResult, Scanned,
    Stamp, Versioning, ROW_FORMAT,
};
pub use tree::TreeOptions;
pub use writer::tx::Tx;
pub use writer::MAX_GROUP;

use crate::store::{blocking, Store, StoreError};
use bounds::limits::SharedStats;
use dual::DualState;
use writer::{Advance, Boot, CommitJob, Request, Signing};

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
        crate::telemetry::audit::validation_failed(&e);
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
    /// The Merkle tree and its checkpoints (`[audit]`).
    pub tree: TreeOptions,
    /// Exists for the audit benchmark (`benches/audit`) only, to measure what the index
    /// entries cost a commit: `true` leaves them out of the rows of `Trail::commit`. No
    /// config key reaches it (the node builds its options from `..Default`), and a trail
    /// written so answers queries without those rows: never set it elsewhere.
    #[doc(hidden)]
    pub bench_without_index: bool,
}

impl Default for TrailOptions {
    fn default() -> Self {
        TrailOptions {
            lifecycle: true,
            queue: 8 * MAX_GROUP,
            sinks: Vec::new(),
            limits: Limits::default(),
            tree: TreeOptions::default(),
            bench_without_index: false,
        }
    }
}

/// A handle on the audit trail. Cheap to clone (one reference count: every request handler
/// and dual write takes one); every clone talks to one writer.
#[derive(Clone)]
pub struct Trail(Arc<Shared>);

impl std::ops::Deref for Trail {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What every clone of a [`Trail`] shares.
pub struct Shared {
    /// Where requests go to the writer thread; closed once it stops.
    requests: mpsc::Sender<Request>,
    /// The store, for reads (only the writer writes the `audit` column family).
    store: Store,
    /// The last committed seq, moved by the syncer after every group.
    committed: watch::Receiver<u64>,
    /// `m:incarnation` as of boot.
    history: History,
    /// The writer thread, taken and joined by the first `shutdown`.
    thread: Mutex<Option<JoinHandle<()>>>,
    /// What rows are stamped with and retention measured by.
    clock: Arc<dyn Clock>,
    /// Retention and ceilings (`[audit]`).
    limits: Limits,
    /// What the syncer and the retention task report, read by `Trail::stats`.
    stats: SharedStats,
    /// Dual writes: where dropped `Pending`s go, and the boot's last pending id.
    dual: DualState,
    /// `m:refresh_pending` as of boot (see [`Trail::refresh_pending`]).
    refresh_pending: Option<u64>,
    /// The Merkle tree's options.
    tree: TreeOptions,
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
        let tree = options.tree.enabled;
        let Boot {
            hasher,
            counters,
            mut history,
            refresh_pending,
            checkpoint_key,
        } = writer::boot(&store, &options.sinks, tree, clock.now_ms())?;
        // A restored store opens its new incarnation in the writer's first group, before it
        // takes a change.
        let opening = restore::first_boot::opening(&store, &mut history, counters.last_seq)?;
        let refresh_pending = opening.as_ref().map(|o| o.from()).or(refresh_pending);
        let signing = checkpoint_key.map(|key| Signing {
            key,
            origin: tree::checkpoint::origin(history.current().id),
            every: options.tree.checkpoint_rows,
        });
        let dual = DualState::at_boot(&store)?;
        let running = writer::start(
            &store,
            (hasher, counters, signing),
            &options,
            clock.clone(),
            (dual.boot_last, history.current().base),
            opening.as_ref(),
        )?;
        Ok(Trail(Arc::new(Shared {
            requests: running.requests,
            store,
            committed: running.committed,
            history,
            thread: Mutex::new(Some(running.thread)),
            clock,
            limits: options.limits,
            stats: running.stats,
            dual,
            refresh_pending,
            tree: options.tree,
        })))
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

    /// Send the writer the request `make` builds around a reply channel and wait for its
    /// answer; `Stopped` when the writer has stopped.
    pub(crate) async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Request,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        let closed = || StoreError::Stopped("the audit writer");
        self.requests
            .send(make(reply))
            .await
            .map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }

    /// Keep `value`, what the node knows of the shared store of `kind`, as `m:remote:<kind>`
    /// (synced).
    pub async fn remember(&self, kind: &str, value: Vec<u8>) -> Result<(), StoreError> {
        let kind = kind.to_owned();
        self.ask(|reply| Request::Remember(writer::request::Remember { kind, value, reply }))
            .await
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

    /// The incarnation history as of boot, including the incarnation a restored store started
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
        blocking::try_run("a page of rows", move || {
            page_within(&store, after, limit, &filter, budget)
        })
        .await
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
            let _ = blocking::run("the writer's join", move || thread.join()).await;
        }
    }
}
