//! The writer: the one thread that hands out seq and writes the audit column family.
//!
//! Seq order must equal commit order, so that a reader resuming after the last seq it saw
//! never misses a row. One thread owns seq allocation and the write path, fed by a channel.
//! It group-commits: it takes every request waiting (up to [`MAX_GROUP`]), validates each in
//! order against the store plus the writes already accepted (into this group, or into the
//! groups handed on and not yet on disk), gives the accepted ones consecutive seqs, and puts
//! all their ops, rows, outbox entities and the meta counters in ONE `WriteBatch`. The
//! syncer thread (`sync.rs`) writes that batch synced and only then answers every caller,
//! while this thread prepares the next group: one fsync serves many changes, preparing and
//! writing run side by side, and each change is still all-or-nothing. Both are dedicated OS
//! threads, not tokio tasks, because every step of them blocks on RocksDB.
//!
//! Requests that read the trail itself (dual writes, refreshes, the retention sweep) are
//! prepared only once everything before them is on disk, so what they read is the store as it
//! is. Deleting rows from the head of the trail (the ceilings) needs no such wait: it reads
//! only rows already written, and `prune::Head` knows which of them the groups not yet
//! written delete.
//!
//! The files: `boot.rs` reads the counters at start; `serve.rs` is the thread's loop;
//! `group.rs` builds a group and `admit.rs` decides each change in it; `pipe.rs` hands groups
//! to the syncer and takes their results back; `sync.rs` is the syncer thread. `request.rs`
//! is what callers send, `tx.rs` what a change sees while it is validated, `stage.rs` its row
//! before it takes a seq.

mod admit;
mod boot;
mod checkpoint;
mod group;
mod pipe;
pub(crate) mod request;
mod serve;
pub(crate) mod stage;
pub(crate) mod sync;
pub(crate) mod tx;

pub(crate) use admit::NoRoom;
pub(crate) use boot::{boot, reachable, Boot};
pub(crate) use checkpoint::Signing;
pub(crate) use group::Group;
pub(crate) use request::{Advance, CommitJob, Request, Sweep};

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::{mpsc, watch};

use crate::audit::bounds::limits::{Limits, SharedStats};
use crate::audit::bounds::prune::Head;
use crate::audit::dual::writer_side::Begun;
use crate::audit::hash::SubjectHasher;
use crate::audit::restore::first_boot::Opening;
use crate::audit::{Clock, TrailOptions};
use crate::store::{Store, StoreError};
use sync::{Counters, Syncer};
use tx::Overlay;

/// The most requests one group commit takes: bounds the batch size and the latency of the
/// first caller in it.
pub const MAX_GROUP: usize = 1024;

/// The writer thread's state.
pub(crate) struct Writer {
    store: Store,
    rx: mpsc::Receiver<Request>,
    hasher: SubjectHasher,
    clock: Arc<dyn Clock>,
    /// The counters as the last group handed to the syncer leaves them: the next group
    /// starts from here.
    counters: Counters,
    /// The counters as of the last group on disk: pruning reads the store only below its
    /// seq, and a batch that fails rolls `counters` back to it.
    written: Counters,
    /// Whether lifecycle events are on: entities go to the outbox and rows are flagged.
    lifecycle: bool,
    /// The current incarnation's base: a local subject's row `seq` gets version `base + seq`.
    version_base: u64,
    /// The oldest rows, read ahead, for the ceilings and the retention sweep to delete.
    head: Head,
    /// Retention and ceilings.
    limits: Limits,
    /// The last pending id handed out (`m:pending_seq`).
    last_pending_id: u64,
    /// The writes of the groups handed to the syncer and not yet known to be on disk, oldest
    /// first: what a change reads after its own group's.
    unsynced: VecDeque<Overlay>,
    /// What checkpoints are signed with (`None`: the tree is off).
    signing: Option<Signing>,
    /// The pending rows begun in this run and not yet moved into the trail, by id.
    begun: HashMap<u64, Begun>,
    /// `TrailOptions::bench_without_index`: the benchmark's commits without index entries.
    without_index: bool,
}

/// What the parts that hand the writer their own requests (`dual::writer_side`,
/// `restore::refresh`) may use of it: rows go in only through [`Writer::admit`] and
/// [`Writer::append`].
impl Writer {
    /// The subject states' hasher (its key never leaves the writer).
    pub(crate) fn hasher(&self) -> &SubjectHasher {
        &self.hasher
    }

    /// Whether lifecycle events are on.
    pub(crate) fn lifecycle(&self) -> bool {
        self.lifecycle
    }

    /// The store.
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// The store as group `g` sees it: the groups not yet written and its own writes on top.
    pub(crate) fn tx<'a>(&'a self, g: &'a Group) -> tx::Tx<'a> {
        tx::Tx::new(&self.store, &g.overlay, &self.unsynced)
    }

    /// The next pending id (the group's close puts `m:pending_seq`).
    pub(crate) fn next_pending_id(&mut self) -> u64 {
        self.last_pending_id += 1;
        self.last_pending_id
    }

    /// Keep pending row `id`, begun in group `g`, until it moves into the trail (forgotten
    /// if the group is not written).
    pub(crate) fn keep_begun(&mut self, g: &mut Group, id: u64, begun: Begun) {
        self.begun.insert(id, begun);
        g.begun.push(id);
    }

    /// Pending row `id`, if it was begun in this run and not yet moved into the trail.
    pub(crate) fn take_begun(&mut self, id: u64) -> Option<Begun> {
        self.begun.remove(&id)
    }
}

/// A started writer: what the trail keeps of it.
pub(crate) struct Running {
    /// Where requests go.
    pub requests: mpsc::Sender<Request>,
    /// The last committed seq, as the syncer moves it.
    pub committed: watch::Receiver<u64>,
    /// What the syncer keeps up to date after every group.
    pub stats: SharedStats,
    /// The writer thread (it joins the syncer's before it ends).
    pub thread: JoinHandle<()>,
}

/// Start the writer and syncer threads on a booted store: the writer counts on from `counters`,
/// hands out pending ids after `last_pending_id` and versions from `version_base`, and signs
/// checkpoints with `signing`. A restored store's `opening` is written first, before any
/// request is served.
pub(crate) fn start(
    store: &Store,
    (hasher, counters, signing): (SubjectHasher, Counters, Option<Signing>),
    options: &TrailOptions,
    clock: Arc<dyn Clock>,
    (last_pending_id, version_base): (u64, u64),
    opening: Option<&Opening>,
) -> Result<Running, StoreError> {
    let (requests, rx) = mpsc::channel(options.queue.max(1));
    let mut writer = Writer {
        store: store.clone(),
        rx,
        hasher,
        clock,
        counters: counters.clone(),
        written: counters.clone(),
        lifecycle: options.lifecycle,
        version_base,
        head: Head::new(counters.usage.from),
        limits: options.limits,
        last_pending_id,
        unsynced: Default::default(),
        signing,
        begun: HashMap::new(),
        without_index: options.bench_without_index,
    };
    if let Some(opening) = opening {
        writer.open(opening)?;
    }
    let counters = writer.written.clone();
    let (committed_tx, committed) = watch::channel(counters.last_seq);
    let stats = SharedStats::at_boot(&counters, options.limits.ceilings());
    crate::telemetry::audit::ceilings_configured(&options.limits.ceilings());
    let syncer = Syncer {
        store: store.clone(),
        committed: committed_tx,
        stats: stats.clone(),
        written: counters,
        failed: None,
    };
    let thread = pipe::spawn(writer, syncer).map_err(|e| StoreError::Task {
        what: "the audit writer thread",
        detail: e.to_string(),
    })?;
    Ok(Running {
        requests,
        committed,
        stats,
        thread,
    })
}
