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

pub(crate) mod stage;
pub(crate) mod sync;
pub(crate) mod tx;

use std::collections::{BTreeMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::RngCore;
use rocksdb::WriteBatch;
use tokio::sync::{mpsc, oneshot};

use crate::audit::bounds::limits::{Limits, Pruned};
use crate::audit::bounds::prune::{self, Head, Pruning, SweepBatch};
use crate::audit::bounds::usage::Usage;
use crate::audit::context::Context;
use crate::audit::dual::writer_side as pending;
use crate::audit::hash::{SubjectHasher, KEY_LEN};
use crate::audit::restore::incarnation::History;
use crate::audit::restore::refresh;
use crate::audit::row::{Change, Row};
use crate::audit::writer::stage::Staged;
use crate::audit::writer::sync::{Outcome, Prepared, Syncer, Taken, Tally};
use crate::audit::writer::tx::{Op, Overlay, Tx};
use crate::audit::Clock;
use crate::store::{keys, keys::meta, Cf, Store, StoreError};
use crate::telemetry;

/// The most requests one group commit takes: bounds the batch size and the latency of the
/// first caller in it.
pub const MAX_GROUP: usize = 1024;

/// How long the writer polls for the next request, once nothing is being written, before it
/// parks (see `next_request`).
const SPIN_BEFORE_PARK: Duration = Duration::from_micros(50);

/// The largest group the writer writes itself rather than hand to the syncer.
const INLINE_MAX: usize = 2;

/// While a group is being written, how often the writer looks for new requests to prepare.
const POLL_WHILE_WRITING: Duration = Duration::from_micros(50);

/// How long an open group waits for the syncer before the writer hands it over anyway
/// (blocking until the syncer takes it).
const SPIN_WHILE_WRITING: Duration = Duration::from_millis(1);

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
    /// Write the pending row of a dual write (see `pending.rs`).
    Begin(Box<pending::Begin>),
    /// Move a pending row into the trail with its caller's outcome.
    Finish(pending::FinishReq),
    /// Move a pending row into the trail with what settlement found.
    Settle(pending::SettleReq),
    /// Write a remote subject's state-refresh row, unless the trail already says its state.
    Refresh(Box<refresh::RefreshReq>),
    /// Delete `m:refresh_pending`: every remote kind is refreshed.
    RefreshDone(oneshot::Sender<Result<(), StoreError>>),
    /// Finish what is queued, flush, and stop; the sender is answered when done.
    Shutdown(oneshot::Sender<()>),
}

impl Request {
    /// Whether preparing it reads the trail itself (pending rows, rows, the head), which
    /// only the store holds: it waits for every group before it to be on disk.
    fn reads_trail(&self) -> bool {
        match self {
            Request::Commit { .. } | Request::Advance(_) | Request::Shutdown(_) => false,
            Request::Sweep(_)
            | Request::Begin(_)
            | Request::Finish(_)
            | Request::Settle(_)
            | Request::Refresh(_)
            | Request::RefreshDone(_) => true,
        }
    }
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

/// What the writer found (or made) when it booted.
pub(crate) struct Boot {
    pub hasher: SubjectHasher,
    pub last_seq: u64,
    pub last_at: u64,
    pub usage: Usage,
    pub history: History,
    pub positions: BTreeMap<String, u64>,
    /// `m:refresh_pending`: the first seq of the restored incarnation whose remote subjects
    /// are still to be refreshed.
    pub refresh_pending: Option<u64>,
}

/// The most a store's last seq (or pending id) may be at boot. No trail reaches 2^63 changes
/// (292,000 years at a million a second), so a larger value is damage, and counting on from it
/// could wrap around to seqs the trail already holds.
const MAX_BOOT_SEQ: u64 = 1 << 63;

/// `seq`, read as `what`, if a trail could have reached it.
pub(crate) fn reachable(what: &str, seq: u64) -> Result<u64, StoreError> {
    if seq < MAX_BOOT_SEQ {
        return Ok(seq);
    }
    Err(StoreError::Corrupt {
        what: what.into(),
        detail: format!("{seq} is past any trail; the store is damaged"),
    })
}

/// Read the store's meta, making what a new store lacks (`m:audit_key`, the first
/// incarnation) and recounting `m:audit_usage` when it does not match the trail, in one
/// synced batch.
pub(crate) fn boot(store: &Store, sinks: &[String]) -> Result<Boot, StoreError> {
    let mut batch = WriteBatch::default();
    let audit = store.cf(Cf::Audit);
    let key = match store.meta(meta::AUDIT_KEY)? {
        Some(k) => <[u8; KEY_LEN]>::try_from(k.as_slice()).map_err(|_| StoreError::Corrupt {
            what: "m:audit_key".into(),
            detail: format!("expected {KEY_LEN} bytes, found {}", k.len()),
        })?,
        None => {
            let mut k = [0u8; KEY_LEN];
            rand::rng().fill_bytes(&mut k);
            batch.put_cf(audit, keys::meta_key(meta::AUDIT_KEY), k);
            k
        }
    };
    let history = match store.meta(meta::INCARNATION)? {
        Some(bytes) => History::decode(&bytes)?,
        None => {
            let h = History::first();
            batch.put_cf(audit, keys::meta_key(meta::INCARNATION), h.encode());
            h
        }
    };
    let last_row = store.last(Cf::Audit, &[keys::ROW])?;
    let (row_seq, last_at) = last_row
        .and_then(|(k, _)| keys::decode_row_key(&k))
        .unwrap_or((0, 0));
    // Rows and m:audit_seq are written in one batch, so they agree; trust the larger if a
    // damaged store says otherwise, never hand out a seq twice.
    let last_seq = reachable("m:audit_seq", store.meta_u64(meta::AUDIT_SEQ)?.max(row_seq))?;
    // Recounted (and logged) when it does not match the trail: missing, damaged, stale.
    let (usage, rewrite) = Usage::at_boot(store, last_seq)?;
    if rewrite {
        batch.put_cf(audit, keys::meta_key(meta::AUDIT_USAGE), usage.encode());
    }
    let refresh_pending = store
        .meta(meta::REFRESH_PENDING)?
        .map(|v| crate::store::decode_u64(&v).unwrap_or(0));
    let mut positions = BTreeMap::new();
    for sink in sinks {
        positions.insert(sink.clone(), store.meta_u64(&meta::sink_cursor(sink))?);
    }
    // m:lifecycle_cursor is the minimum over the sinks configured now: a sink added (at 0)
    // or removed since the last advance moves it, and with none configured there is none.
    let cursor = prune::cursor(&positions).map(|c| c.to_be_bytes().to_vec());
    if store.meta(meta::LIFECYCLE_CURSOR)? != cursor {
        let key = keys::meta_key(meta::LIFECYCLE_CURSOR);
        match cursor {
            Some(cursor) => batch.put_cf(audit, key, cursor),
            None => batch.delete_cf(audit, key),
        }
    }
    if !batch.is_empty() {
        // Synced: the audit key must never change once a hash was made with it.
        store.write(batch, true)?;
    }
    Ok(Boot {
        hasher: SubjectHasher::new(&key),
        last_seq,
        last_at,
        usage,
        history,
        positions,
        refresh_pending,
    })
}

/// The writer thread's state.
pub(crate) struct Writer {
    pub store: Store,
    pub rx: mpsc::Receiver<Request>,
    pub hasher: SubjectHasher,
    pub clock: Arc<dyn Clock>,
    /// The counters as the last group handed to the syncer leaves them: the next group
    /// starts from here.
    pub tally: Tally,
    /// The counters as of the last group on disk: pruning reads the store only below its
    /// seq, and a batch that fails rolls `tally` back to it.
    pub written: Tally,
    /// Whether lifecycle events are on: entities go to the outbox and rows are flagged.
    pub lifecycle: bool,
    /// The oldest rows, read ahead, for the ceilings and the retention sweep to delete.
    pub head: Head,
    /// Retention and ceilings.
    pub limits: Limits,
    /// The last pending id handed out (`m:pending_seq`).
    pub pending: u64,
    /// The writes of the groups handed to the syncer and not yet known to be on disk, oldest
    /// first: what a change reads after its own group's.
    pub unsynced: VecDeque<Overlay>,
}

/// The writer's end of the pipeline to the syncer.
struct Pipe {
    groups: std_mpsc::SyncSender<Prepared>,
    outcomes: std_mpsc::Receiver<Outcome>,
    /// The groups handed over whose outcome is not heard yet, oldest first.
    inflight: VecDeque<InFlight>,
    /// Bumped when a batch fails: groups prepared after that start again from `written`.
    epoch: u64,
    /// A batch failed and the writer has not yet rolled back.
    failed: bool,
    /// The syncer's state, shared so that the writer can write a group itself when the
    /// syncer is free and nothing else waits.
    syncer_state: Arc<Mutex<Syncer>>,
    /// Where outcomes are sent (the writer's own writes report the same way).
    heard: std_mpsc::Sender<Outcome>,
    syncer: JoinHandle<()>,
}

/// A group being prepared.
struct Open {
    g: Group,
    taken: Vec<Taken>,
    /// The commit time of its rows.
    at: u64,
    started: Instant,
    /// The pipe's epoch when it was opened: a batch failing meanwhile abandons it.
    epoch: u64,
    /// Whether it moves a sink's position (and so `m:lifecycle_cursor`).
    advanced: bool,
}

/// A group handed to the syncer.
struct InFlight {
    /// The counters once it is written.
    tally: Tally,
    /// Whether it deletes rows from the head of the trail.
    prunes: bool,
}

/// Start the writer and syncer threads.
pub(crate) fn spawn(writer: Writer, syncer: Syncer) -> std::io::Result<JoinHandle<()>> {
    // A rendezvous: the writer hands a group over when the syncer has finished the last, so
    // at most one group is written while the next is prepared.
    let (groups, to_sync) = std_mpsc::sync_channel(0);
    let (heard, outcomes) = std_mpsc::channel();
    let syncer_state = Arc::new(Mutex::new(syncer));
    let (state, to_writer) = (syncer_state.clone(), heard.clone());
    let syncer = std::thread::Builder::new()
        .name("audit-sync".into())
        .spawn(move || crate::audit::writer::sync::run(&state, to_sync, to_writer))?;
    let pipe = Pipe {
        groups,
        outcomes,
        inflight: VecDeque::new(),
        epoch: 0,
        failed: false,
        syncer_state,
        heard,
        syncer,
    };
    std::thread::Builder::new()
        .name("audit-writer".into())
        .spawn(move || writer.run(pipe))
}

/// The group being built: its batch and what it would make of the writer's state.
pub(crate) struct Group {
    pub(crate) batch: WriteBatch,
    pub(crate) overlay: Overlay,
    pub(crate) usage: Usage,
    pub(crate) seq: u64,
    pub(crate) positions: BTreeMap<String, u64>,
    pub(crate) pruned: Pruned,
    pub(crate) refused: u64,
}

impl Group {
    /// Whether the outbox backlog, as this group leaves it (`m:audit_seq` minus the cursor),
    /// refuses an operator's change.
    pub(crate) fn backlog_full(&self, limits: &Limits) -> bool {
        prune::backlog(prune::cursor(&self.positions), self.seq) >= limits.outbox_max_backlog
    }
}

/// What became of a change offered to the group.
pub(crate) enum Admitted {
    /// Accepted as this row (boxed: a row is large, the refusals are not).
    Row(Box<Row>),
    /// Refused by its own validation (or it failed): the job knows why.
    Refused,
    /// Refused by the ceilings or the backlog.
    Backlog,
}

impl Writer {
    /// Serve requests until a shutdown request or until every sender is gone.
    /// The writer thread: serve requests until shut down, then stop the syncer and flush the
    /// store. The syncer is stopped and joined even when serving panicked, before the panic
    /// goes on, so that no thread of the trail holds the store once this one has ended.
    fn run(mut self, mut pipe: Pipe) {
        let served =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.serve(&mut pipe)));
        let Pipe { groups, syncer, .. } = pipe;
        drop(groups);
        if syncer.join().is_err() {
            tracing::error!("the audit syncer thread panicked");
        }
        let stop = match served {
            Ok(stop) => stop,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        if let Err(e) = self.store.flush() {
            tracing::warn!(error = %e, "flushing the store at shutdown failed; the WAL has every commit");
        }
        if let Some(done) = stop {
            let _ = done.send(());
        }
    }

    /// Take requests into groups and have them written until a shutdown (its caller is
    /// returned, to hear once the store is flushed) or until every sender is gone.
    fn serve(&mut self, pipe: &mut Pipe) -> Option<oneshot::Sender<()>> {
        let mut stop: Option<oneshot::Sender<()>> = None;
        let mut open: Option<Open> = None;
        let mut waiting_since: Option<Instant> = None;
        loop {
            self.hear(pipe, false);
            if open.as_ref().is_some_and(|o| o.epoch != pipe.epoch) {
                // Built on a batch that failed: none of it stands.
                self.abandon(open.take().expect("checked above"));
            }
            if let Some(o) = open.as_ref() {
                // Hand the group over as soon as the syncer is free (so preparing and
                // writing overlap), when it is full, or when the writer has waited long
                // enough for the syncer; until then, take more requests into it.
                let free = pipe.inflight.is_empty();
                let waited = waiting_since.is_some_and(|t| t.elapsed() >= SPIN_WHILE_WRITING);
                if free || waited || o.taken.len() >= MAX_GROUP {
                    waiting_since = None;
                    let o = open.take().expect("checked above");
                    if !self.submit(pipe, o) {
                        break;
                    }
                    continue;
                }
            }
            // After a shutdown request the channel is closed: what was queued before it
            // is still taken, and then the channel reports that it is disconnected.
            let request = if open.is_none() {
                match self.next_request(pipe) {
                    Some(req) => req,
                    None => break,
                }
            } else {
                match self.rx.try_recv() {
                    Ok(req) => req,
                    Err(mpsc::error::TryRecvError::Empty) => {
                        // Nothing to prepare: sleep until the syncer is free, looking for
                        // new requests now and then (spinning would take the CPU the
                        // callers need to send them).
                        waiting_since.get_or_insert_with(Instant::now);
                        self.wait_for_syncer(pipe);
                        continue;
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        // Shut down, or every sender is gone: write what is open, then stop.
                        let o = open.take().expect("checked above");
                        self.submit(pipe, o);
                        break;
                    }
                }
            };
            match request {
                Request::Shutdown(done) => {
                    // Refuse new requests, but finish every one already queued.
                    self.rx.close();
                    stop = Some(done);
                }
                req if req.reads_trail() => {
                    // It reads the store as it is: everything before it goes first and is
                    // written, and it makes a group of its own.
                    if let Some(o) = open.take() {
                        if !self.submit(pipe, o) {
                            break;
                        }
                    }
                    self.hear(pipe, true);
                    let mut o = self.open(pipe);
                    self.add(&mut o, req);
                    if !self.submit(pipe, o) {
                        break;
                    }
                }
                req => {
                    if open.is_none() {
                        open = Some(self.open(pipe));
                    }
                    self.add(open.as_mut().expect("opened above"), req);
                }
            }
        }
        if let Some(o) = open.take() {
            self.abandon(o);
        }
        stop
    }

    /// The next request, for a new group. Right after a group is answered, its caller
    /// usually sends its next change within microseconds: poll briefly before parking the
    /// thread, so a lone committer does not pay a futex sleep and wake-up on every commit.
    /// While a group is being written, sleep on its outcome instead, looking for requests
    /// now and then.
    fn next_request(&mut self, pipe: &mut Pipe) -> Option<Request> {
        let mut idle_since = Instant::now();
        loop {
            match self.rx.try_recv() {
                Ok(req) => return Some(req),
                Err(mpsc::error::TryRecvError::Disconnected) => return None,
                Err(mpsc::error::TryRecvError::Empty) => {}
            }
            if !pipe.inflight.is_empty() {
                self.wait_for_syncer(pipe);
                idle_since = Instant::now();
            } else if idle_since.elapsed() < SPIN_BEFORE_PARK {
                std::thread::yield_now();
            } else {
                return self.rx.blocking_recv();
            }
        }
    }

    /// Sleep until the syncer reports a group (or briefly, to look for new requests).
    fn wait_for_syncer(&mut self, pipe: &mut Pipe) {
        if let Ok(outcome) = pipe.outcomes.recv_timeout(POLL_WHILE_WRITING) {
            self.heard(pipe, outcome);
        }
        self.hear(pipe, false);
    }

    /// Close `o` and have it written: by the syncer thread, or on this thread when it is
    /// one or two requests, the syncer is free and no other request waits (a lone committer:
    /// nothing to prepare meanwhile, so a thread hop would only add latency; a larger group
    /// written here would hold up the preparing of the requests that arrive meanwhile).
    /// `false`: the syncer is gone.
    fn submit(&mut self, pipe: &mut Pipe, o: Open) -> bool {
        // Every group passes here on the writer thread, however it is written.
        fail::fail_point!("audit::submit");
        let here = o.taken.len() <= INLINE_MAX
            && pipe.inflight.is_empty()
            && self.rx.is_empty()
            && inline_allowed();
        let prepared = self.close(o);
        pipe.inflight.push_back(InFlight {
            tally: prepared.tally.clone(),
            prunes: self.head.staged() > 0,
        });
        self.head.handed_over();
        if here {
            pipe.syncer_state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .sync(prepared, &pipe.heard);
            return true;
        }
        if let Err(std_mpsc::SendError(prepared)) = pipe.groups.send(prepared) {
            tracing::error!("the audit syncer thread stopped; the writer stops too");
            crate::audit::writer::sync::complete(
                prepared.taken,
                Err(crate::audit::writer::sync::abandoned()),
                true,
            );
            return false;
        }
        true
    }

    /// Answer a group that will not be written because a batch before it failed.
    fn abandon(&mut self, o: Open) {
        self.head.unwritten();
        crate::audit::writer::sync::complete(
            o.taken,
            Err(crate::audit::writer::sync::abandoned()),
            true,
        );
    }

    /// Hear the outcomes of the groups handed to the syncer: every one when `all` (and
    /// whenever a batch failed, since the groups after it were prepared on top of it), else
    /// those already known. A written group's counters become the written ones; once every
    /// group after a failed batch is heard, the counters roll back to the last written.
    fn hear(&mut self, pipe: &mut Pipe, all: bool) {
        while !pipe.inflight.is_empty() {
            let outcome = if all || pipe.failed {
                pipe.outcomes.recv().ok()
            } else {
                pipe.outcomes.try_recv().ok()
            };
            let Some(outcome) = outcome else {
                break;
            };
            self.heard(pipe, outcome);
        }
        if pipe.failed && pipe.inflight.is_empty() {
            self.tally = self.written.clone();
            pipe.epoch += 1;
            pipe.failed = false;
        }
    }

    /// Take in the outcome of the oldest group handed over.
    fn heard(&mut self, pipe: &mut Pipe, outcome: Outcome) {
        let Some(group) = pipe.inflight.pop_front() else {
            return;
        };
        self.unsynced.pop_front();
        match outcome {
            Outcome::Written => {
                self.written = group.tally;
                if group.prunes {
                    self.head.written();
                }
            }
            Outcome::Unwritten => {
                pipe.failed = true;
                if group.prunes {
                    self.head.unwritten();
                }
            }
        }
    }

    /// Open a group on the counters as the last group handed over leaves them.
    fn open(&self, pipe: &Pipe) -> Open {
        Open {
            g: Group {
                batch: WriteBatch::default(),
                overlay: Overlay::new(),
                usage: self.tally.usage,
                seq: self.tally.last_seq,
                positions: self.tally.positions.clone(),
                pruned: Pruned::default(),
                refused: 0,
            },
            taken: Vec::new(),
            at: self.clock.now_ms().max(self.tally.last_at),
            started: Instant::now(),
            epoch: pipe.epoch,
            advanced: false,
        }
    }

    /// Validate and stage one request into the open group.
    fn add(&mut self, o: &mut Open, request: Request) {
        let (g, at) = (&mut o.g, o.at);
        o.taken.push(match request {
            Request::Commit { ctx, mut job } => match self.take_change(g, at, &ctx, &mut *job) {
                Admitted::Row(row) => Taken::Change {
                    job,
                    row: Some(row),
                },
                Admitted::Refused => Taken::Change { job, row: None },
                Admitted::Backlog => Taken::Backlog { job },
            },
            Request::Advance(advance) => {
                let dead_letters = self.store.cf(Cf::DeadLetters);
                for (key, value) in advance.dead_letters {
                    g.batch.put_cf(dead_letters, &key, &value);
                    g.overlay.insert((Cf::DeadLetters, key), Some(value));
                }
                g.batch.put_cf(
                    self.store.cf(Cf::Audit),
                    keys::meta_key(&meta::sink_cursor(&advance.sink)),
                    advance.to.to_be_bytes(),
                );
                g.positions.insert(advance.sink.clone(), advance.to);
                o.advanced = true;
                Taken::Advance {
                    sink: advance.sink,
                    to: advance.to,
                    reply: advance.reply,
                }
            }
            Request::Sweep(sweep) => Taken::Sweep {
                outcome: self.sweep(g, &sweep),
                reply: sweep.reply,
            },
            Request::Begin(req) => Taken::Pending(pending::begin(self, g, at, *req)),
            Request::Finish(req) => Taken::Pending(pending::finish(self, g, at, req)),
            Request::Settle(req) => Taken::Pending(pending::settle(self, g, at, req)),
            Request::Refresh(req) => Taken::Pending(refresh::take(self, g, at, *req)),
            Request::RefreshDone(reply) => {
                let key = keys::meta_key(meta::REFRESH_PENDING);
                g.batch.delete_cf(self.store.cf(Cf::Audit), key);
                Taken::Meta { reply }
            }
            Request::Shutdown(_) => unreachable!("run() never puts a shutdown in a group"),
        });
    }

    /// Close the open group: put the meta counters it moves into its batch and advance the
    /// counters to what it makes of them.
    fn close(&mut self, o: Open) -> Prepared {
        let Open {
            mut g,
            taken,
            at,
            started,
            epoch,
            advanced,
        } = o;
        let rows = g.seq - self.tally.last_seq;
        let audit = self.store.cf(Cf::Audit);
        if rows > 0 {
            g.batch
                .put_cf(audit, keys::meta_key(meta::AUDIT_SEQ), g.seq.to_be_bytes());
        }
        if rows > 0 || self.head.staged() > 0 {
            // The counters go in the batch that adds or deletes the rows they count (even
            // deletions staged before a failed read refused the rest).
            g.usage.seq = g.seq;
            g.batch
                .put_cf(audit, keys::meta_key(meta::AUDIT_USAGE), g.usage.encode());
        }
        if let (true, Some(cursor)) = (advanced, prune::cursor(&g.positions)) {
            // m:lifecycle_cursor: the last seq every configured sink has confirmed.
            g.batch.put_cf(
                audit,
                keys::meta_key(meta::LIFECYCLE_CURSOR),
                cursor.to_be_bytes(),
            );
        }
        let tally = Tally {
            last_seq: g.seq,
            last_at: at,
            usage: g.usage,
            positions: g.positions,
        };
        self.tally = tally.clone();
        self.unsynced.push_back(g.overlay);
        let sync = taken.iter().any(Taken::needs_sync);
        Prepared {
            epoch,
            batch: g.batch,
            taken,
            at,
            rows,
            tally,
            pruned: g.pruned,
            refused: g.refused,
            started,
            sync,
        }
    }

    /// Offer one change to the group. It validates itself first (a change that would change
    /// nothing hears why); then an operator's change is checked against the outbox backlog;
    /// then the trail is pruned (oldest first, below the cursor) to make room for its row
    /// under the ceilings, in the group's batch, and an operator's change that still does not
    /// fit is refused. Accepted, it takes the
    /// next seq and its ops, row and outbox entity go into the batch. Each change is decided
    /// against the group so far, so the counters stay exact.
    fn take_change(
        &mut self,
        g: &mut Group,
        at: u64,
        ctx: &Context,
        job: &mut dyn Job,
    ) -> Admitted {
        let mut tx = Tx::new(&self.store, &g.overlay, &self.unsynced);
        let prepared = catch_unwind(AssertUnwindSafe(|| job.prepare(&mut tx)));
        let ops = tx.into_ops();
        let change = match prepared {
            Ok(Some(change)) => change,
            Ok(None) => return Admitted::Refused,
            Err(_) => {
                // A change's own code panicked: nothing of it is written, the caller hears
                // StoreUnavailable, and the writer goes on.
                tracing::error!("a change panicked while being validated; not written");
                return Admitted::Refused;
            }
        };
        // Validated first: a change that would change nothing (a missing subject, bad input)
        // hears why, backlog or not. One that would is refused here, its ops dropped.
        // A change the node makes itself is never refused: it may push the trail over.
        let exempt = ctx.is_system();
        if !exempt && g.backlog_full(&self.limits) {
            return refuse(g, "backlog");
        }
        let staged = Staged::new(&self.hasher, self.lifecycle, g.seq + 1, at, ctx, change);
        self.admit(g, staged, exempt, ops)
    }

    /// Put a staged row (and the ops of its change) into the group under the next seq, after
    /// pruning the trail to make room for it under the ceilings; a change that is not
    /// `exempt` is refused if it still does not fit.
    pub(crate) fn admit(
        &mut self,
        g: &mut Group,
        staged: Staged,
        exempt: bool,
        ops: Vec<Op>,
    ) -> Admitted {
        match self.make_room(g, staged.bytes()) {
            Ok(fits) => {
                if !fits && !exempt {
                    return refuse(g, "ceiling");
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "reading the oldest rows failed; change not written");
                return Admitted::Refused;
            }
        }
        g.seq += 1;
        for (cf, key, value) in ops {
            match &value {
                Some(v) => g.batch.put_cf(self.store.cf(cf), &key, v),
                None => g.batch.delete_cf(self.store.cf(cf), &key),
            }
            g.overlay.insert((cf, key), value);
        }
        let row = staged.put(self.store.cf(Cf::Audit), &mut g.batch, &mut g.usage);
        Admitted::Row(Box::new(row))
    }

    /// Delete the oldest rows group `g` may until a row of `need` bytes fits under the
    /// ceilings, counting them as pruned by the ceilings. Whether it fits.
    pub(crate) fn make_room(&mut self, g: &mut Group, need: u64) -> Result<bool, StoreError> {
        let limits = self.limits;
        let (pruned, fits) = self.pruning(g).make_room(need, &limits)?;
        g.pruned.ceiling += pruned;
        Ok(fits)
    }

    /// One batch of the retention sweep, bounded by the cursor like the ceilings.
    fn sweep(&mut self, g: &mut Group, sweep: &Sweep) -> Result<SweepBatch, StoreError> {
        let mut done = self.pruning(g).sweep(sweep.older_than_ms, sweep.max_rows)?;
        g.pruned.retention += done.pruned;
        done.cursor = prune::cursor(&g.positions);
        Ok(done)
    }

    /// The head of the trail as group `g` may delete from it: never at or above the lifecycle
    /// cursor, and only rows already written.
    fn pruning<'a>(&'a mut self, g: &'a mut Group) -> Pruning<'a> {
        Pruning {
            below: prune::below(prune::cursor(&g.positions), self.written.last_seq),
            head: &mut self.head,
            store: &self.store,
            batch: &mut g.batch,
            usage: &mut g.usage,
        }
    }
}

/// Whether a small group may be written on the writer thread (a failpoint turns it off, so
/// that tests can hold a group in the syncer while the next is prepared).
fn inline_allowed() -> bool {
    fail::fail_point!("audit::inline", |_| false);
    true
}

/// Refuse a change with `AuditBacklog` (`reason`: which limit) before it takes a seq.
fn refuse(g: &mut Group, reason: &'static str) -> Admitted {
    g.refused += 1;
    telemetry::change_refused(reason);
    Admitted::Backlog
}
