//! The writer: the one thread that hands out seq and writes the audit column family.
//!
//! Seq order must equal commit order, so that a reader resuming after the last seq it saw
//! never misses a row. One thread owns seq allocation and the write path, fed by a channel.
//! It group-commits: it takes every request waiting (up to [`MAX_GROUP`]), validates each in
//! order against the store plus the writes already accepted into the group, gives the
//! accepted ones consecutive seqs, writes all their ops, rows, outbox entities and the meta
//! counters in ONE synced `WriteBatch`, and only then answers every caller. One fsync serves
//! many changes; each change is still all-or-nothing. It is a dedicated OS thread, not a
//! tokio task, because every step of it blocks on RocksDB.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use rand::RngCore;
use rocksdb::WriteBatch;
use tokio::sync::{mpsc, oneshot, watch};

use super::context::Context;
use super::hash::{SubjectHasher, KEY_LEN};
use super::incarnation::History;
use super::limits::{Limits, Pruned, SharedStats};
use super::pending::{self, Answer};
use super::prune::{self, Head, Pruning, SweepBatch};
use super::refresh;
use super::row::{Change, Row};
use super::stage::Staged;
use super::tx::{Op, Overlay, Tx};
use super::usage::Usage;
use super::Clock;
use crate::store::{keys, keys::meta, Cf, Store, StoreError};
use crate::telemetry;

/// The most requests one group commit takes: bounds the batch size and the latency of the
/// first caller in it.
pub const MAX_GROUP: usize = 1024;

/// How long the writer polls for the next request before it parks (see `next_request`).
const SPIN_BEFORE_PARK: std::time::Duration = std::time::Duration::from_micros(50);

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
    /// The seq of the newest row with a lifecycle event (an entity in the outbox).
    pub last_event: u64,
    /// `m:refresh_pending`: the first seq of the restored incarnation whose remote subjects
    /// are still to be refreshed.
    pub refresh_pending: Option<u64>,
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
    let last_seq = store.meta_u64(meta::AUDIT_SEQ)?.max(row_seq);
    // Recounted (and logged) when it does not match the trail: missing, damaged, stale.
    let (usage, rewrite) = Usage::at_boot(store, last_seq)?;
    if rewrite {
        batch.put_cf(audit, keys::meta_key(meta::AUDIT_USAGE), usage.encode());
    }
    let last_event = store
        .last(Cf::Audit, &[keys::OUTBOX])?
        .and_then(|(k, _)| keys::decode_seq_key(keys::OUTBOX, &k))
        .unwrap_or(0);
    let refresh_pending = store
        .meta(meta::REFRESH_PENDING)?
        .map(|v| crate::store::decode_u64(&v).unwrap_or(0));
    let mut positions = BTreeMap::new();
    for sink in sinks {
        positions.insert(sink.clone(), store.meta_u64(&meta::sink_cursor(sink))?);
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
        last_event,
        refresh_pending,
    })
}

/// The writer thread's state.
pub(crate) struct Writer {
    pub store: Store,
    pub rx: mpsc::Receiver<Request>,
    pub hasher: SubjectHasher,
    pub clock: Arc<dyn Clock>,
    /// The last seq written: the next row gets `last_seq + 1`.
    pub last_seq: u64,
    /// The `at` of the last row: rows never go back in time, whatever the wall clock does.
    pub last_at: u64,
    pub usage: Usage,
    /// Whether lifecycle events are on: entities go to the outbox and rows are flagged.
    pub lifecycle: bool,
    /// Tells readers (the publisher) the last committed seq: a hint, not the truth.
    pub committed: watch::Sender<u64>,
    /// The position of every configured lifecycle sink; `m:lifecycle_cursor` is their minimum.
    pub positions: BTreeMap<String, u64>,
    /// The oldest rows, read ahead, for the ceilings and the retention sweep to delete.
    pub head: Head,
    /// Retention and ceilings.
    pub limits: Limits,
    /// The seq of the newest row with a lifecycle event: the outbox backlog runs to it.
    pub last_event: u64,
    /// What `Trail::stats` reads; updated after every group.
    pub stats: SharedStats,
    /// The last pending id handed out (`m:pending_seq`).
    pub pending: u64,
}

/// The group being built: its batch and what it would make of the writer's state.
pub(super) struct Group {
    pub(super) batch: WriteBatch,
    pub(super) overlay: Overlay,
    pub(super) usage: Usage,
    pub(super) seq: u64,
    pub(super) positions: BTreeMap<String, u64>,
    pub(super) last_event: u64,
    pub(super) pruned: Pruned,
    pub(super) refused: u64,
}

/// What became of a change offered to the group.
pub(super) enum Admitted {
    /// Accepted as this row (boxed: a row is large, the refusals are not).
    Row(Box<Row>),
    /// Refused by its own validation (or it failed): the job knows why.
    Refused,
    /// Refused by the ceilings or the backlog.
    Backlog,
}

/// A request taken into the group being built.
enum Taken {
    /// A change: its row when accepted, `None` when refused.
    Change {
        job: Box<dyn Job>,
        row: Option<Box<Row>>,
    },
    /// A change refused by the ceilings or the backlog.
    Backlog { job: Box<dyn Job> },
    /// A retention sweep batch.
    Sweep {
        outcome: Result<SweepBatch, StoreError>,
        reply: oneshot::Sender<Result<SweepBatch, StoreError>>,
    },
    /// A sink position move.
    Advance {
        sink: String,
        to: u64,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// A dual write's begin, finish or settlement, or a state refresh.
    Pending(Answer),
    /// A meta key written for a caller (the refresh marker's deletion).
    Meta {
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
}

impl Writer {
    /// Serve requests until a shutdown request or until every sender is gone.
    pub(crate) fn run(mut self) {
        let mut group: Vec<Request> = Vec::with_capacity(MAX_GROUP);
        let mut stop: Option<oneshot::Sender<()>> = None;
        while stop.is_none() {
            let Some(first) = self.next_request() else {
                break;
            };
            let mut next = Some(first);
            while let Some(req) = next.take() {
                match req {
                    Request::Shutdown(done) => {
                        // Refuse new requests, but finish every one already queued.
                        self.rx.close();
                        stop = Some(done);
                    }
                    req => group.push(req),
                }
                if group.len() < MAX_GROUP {
                    next = self.rx.try_recv().ok();
                }
            }
            self.commit_group(std::mem::take(&mut group));
        }
        if let Err(e) = self.store.flush() {
            tracing::warn!(error = %e, "flushing the store at shutdown failed; the WAL has every commit");
        }
        if let Some(done) = stop {
            let _ = done.send(());
        }
    }

    /// The next request. Right after a group, a caller that was just answered usually sends
    /// its next change within microseconds: poll briefly before parking the thread, so a lone
    /// committer does not pay a futex sleep and wake-up on every commit.
    fn next_request(&mut self) -> Option<Request> {
        let spin_until = Instant::now() + SPIN_BEFORE_PARK;
        while Instant::now() < spin_until {
            match self.rx.try_recv() {
                Ok(req) => return Some(req),
                Err(mpsc::error::TryRecvError::Disconnected) => return None,
                Err(mpsc::error::TryRecvError::Empty) => std::thread::yield_now(),
            }
        }
        self.rx.blocking_recv()
    }

    fn commit_group(&mut self, group: Vec<Request>) {
        if group.is_empty() {
            return;
        }
        let started = Instant::now();
        let at = self.clock.now_ms().max(self.last_at);
        let mut g = Group {
            batch: WriteBatch::default(),
            overlay: Overlay::new(),
            usage: self.usage,
            seq: self.last_seq,
            positions: self.positions.clone(),
            last_event: self.last_event,
            pruned: Pruned::default(),
            refused: 0,
        };
        let mut taken = Vec::with_capacity(group.len());
        for request in group {
            match request {
                Request::Commit { ctx, mut job } => {
                    taken.push(match self.take_change(&mut g, at, &ctx, &mut *job) {
                        Admitted::Row(row) => Taken::Change {
                            job,
                            row: Some(row),
                        },
                        Admitted::Refused => Taken::Change { job, row: None },
                        Admitted::Backlog => Taken::Backlog { job },
                    });
                }
                Request::Advance(advance) => {
                    for (key, value) in &advance.dead_letters {
                        g.batch.put_cf(self.store.cf(Cf::DeadLetters), key, value);
                    }
                    g.batch.put_cf(
                        self.store.cf(Cf::Audit),
                        keys::meta_key(&meta::sink_cursor(&advance.sink)),
                        advance.to.to_be_bytes(),
                    );
                    g.positions.insert(advance.sink.clone(), advance.to);
                    taken.push(Taken::Advance {
                        sink: advance.sink,
                        to: advance.to,
                        reply: advance.reply,
                    });
                }
                Request::Sweep(sweep) => {
                    let outcome = self.sweep(&mut g, &sweep);
                    taken.push(Taken::Sweep {
                        outcome,
                        reply: sweep.reply,
                    });
                }
                Request::Begin(req) => {
                    taken.push(Taken::Pending(pending::begin(self, &mut g, at, *req)))
                }
                Request::Finish(req) => {
                    taken.push(Taken::Pending(pending::finish(self, &mut g, at, req)))
                }
                Request::Settle(req) => {
                    taken.push(Taken::Pending(pending::settle(self, &mut g, at, req)))
                }
                Request::Refresh(req) => {
                    taken.push(Taken::Pending(refresh::take(self, &mut g, at, *req)))
                }
                Request::RefreshDone(reply) => {
                    let key = keys::meta_key(meta::REFRESH_PENDING);
                    g.batch.delete_cf(self.store.cf(Cf::Audit), key);
                    taken.push(Taken::Meta { reply });
                }
                Request::Shutdown(_) => unreachable!("run() never puts a shutdown in a group"),
            }
        }
        let rows = g.seq - self.last_seq;
        if g.batch.is_empty() {
            // Every change in the group was refused and nothing was pruned: nothing to write.
            self.note(&g, false);
            complete(taken, Ok(at));
            return;
        }
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
        let advanced = taken.iter().any(|t| matches!(t, Taken::Advance { .. }));
        if let (true, Some(cursor)) = (advanced, prune::cursor(&g.positions)) {
            // m:lifecycle_cursor: the last seq every configured sink has confirmed.
            g.batch.put_cf(
                audit,
                keys::meta_key(meta::LIFECYCLE_CURSOR),
                cursor.to_be_bytes(),
            );
        }
        match self.write(std::mem::take(&mut g.batch)) {
            Ok(()) => {
                self.last_seq = g.seq;
                self.last_at = at;
                self.usage = g.usage;
                self.positions = std::mem::take(&mut g.positions);
                self.last_event = g.last_event;
                self.head.written();
                self.note(&g, true);
                telemetry::group_committed(rows, started.elapsed());
                // The watch moves before any caller hears "committed": whoever was told its
                // seq also sees the watch at or past it.
                if rows > 0 {
                    self.committed.send_replace(g.seq);
                }
                complete(taken, Ok(at));
            }
            Err(e) => {
                self.head.unwritten();
                self.note(&g, false);
                telemetry::write_failed(&e, rows);
                complete(taken, Err(e));
            }
        }
    }

    /// Offer one change to the group. An operator's change is first checked against the
    /// outbox backlog; then it validates itself; then the trail is pruned (oldest first,
    /// below the cursor) to make room for its row under the ceilings, in the group's batch,
    /// and an operator's change that still does not fit is refused. Accepted, it takes the
    /// next seq and its ops, row and outbox entity go into the batch. Each change is decided
    /// against the group so far, so the counters stay exact.
    fn take_change(
        &mut self,
        g: &mut Group,
        at: u64,
        ctx: &Context,
        job: &mut dyn Job,
    ) -> Admitted {
        // A change the node makes itself is never refused: it may push the trail over.
        let exempt = ctx.is_system();
        let cursor = prune::cursor(&g.positions);
        if !exempt && prune::backlog(cursor, g.last_event) >= self.limits.outbox_max_backlog {
            return refuse(g, "backlog");
        }
        let mut tx = Tx::new(&self.store, &g.overlay);
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
        let staged = Staged::new(&self.hasher, self.lifecycle, g.seq + 1, at, ctx, change);
        self.admit(g, staged, exempt, ops)
    }

    /// Put a staged row (and the ops of its change) into the group under the next seq, after
    /// pruning the trail to make room for it under the ceilings; a change that is not
    /// `exempt` is refused if it still does not fit.
    pub(super) fn admit(
        &mut self,
        g: &mut Group,
        staged: Staged,
        exempt: bool,
        ops: Vec<Op>,
    ) -> Admitted {
        let cursor = prune::cursor(&g.positions);
        let mut pruning = Pruning {
            head: &mut self.head,
            store: &self.store,
            batch: &mut g.batch,
            usage: &mut g.usage,
            below: prune::below(cursor, self.last_seq),
        };
        match pruning.make_room(staged.bytes(), &self.limits) {
            Ok((pruned, fits)) => {
                g.pruned.ceiling += pruned;
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
        if staged.is_event() {
            g.last_event = g.seq;
        }
        let row = staged.put(self.store.cf(Cf::Audit), &mut g.batch, &mut g.usage);
        Admitted::Row(Box::new(row))
    }

    /// One batch of the retention sweep, bounded by the cursor like the ceilings.
    fn sweep(&mut self, g: &mut Group, sweep: &Sweep) -> Result<SweepBatch, StoreError> {
        let cursor = prune::cursor(&g.positions);
        let mut pruning = Pruning {
            head: &mut self.head,
            store: &self.store,
            batch: &mut g.batch,
            usage: &mut g.usage,
            below: prune::below(cursor, self.last_seq),
        };
        let mut done = pruning.sweep(sweep.older_than_ms, sweep.max_rows)?;
        g.pruned.retention += done.pruned;
        done.cursor = cursor;
        Ok(done)
    }

    /// Tell the stats and the metrics what the group did (`written`: its batch is on disk).
    fn note(&self, g: &Group, written: bool) {
        let pruned = if written { g.pruned } else { Pruned::default() };
        let cursor = prune::cursor(&self.positions);
        let backlog = prune::backlog(cursor, self.last_event);
        self.stats.update(|s| {
            s.usage = self.usage;
            s.cursor = cursor;
            s.backlog = backlog;
            s.refused += g.refused;
            s.pruned.retention += pruned.retention;
            s.pruned.ceiling += pruned.ceiling;
        });
        telemetry::trail_usage(&self.usage, backlog);
        telemetry::rows_pruned(&pruned);
    }

    fn write(&self, batch: WriteBatch) -> Result<(), StoreError> {
        fail::fail_point!("audit::write", |_| Err(StoreError::Injected(
            "audit::write".into()
        )));
        // sync = true: the WAL is fsynced before any caller hears "committed", so an
        // acknowledged change survives kill -9 and power loss.
        self.store.write(batch, true)
    }
}

/// Answer every request of a group: `written` is the batch's fate.
fn complete(taken: Vec<Taken>, written: Result<u64, StoreError>) {
    for t in taken {
        match t {
            Taken::Change { job, row } => match (&written, row) {
                (Ok(at), Some(row)) => {
                    telemetry::row_committed(&row);
                    job.complete(Fate::Committed {
                        seq: row.seq,
                        at: *at,
                    });
                }
                _ => job.complete(Fate::Unwritten),
            },
            Taken::Backlog { job } => job.complete(Fate::Backlog),
            Taken::Pending(answer) => answer.complete(&written),
            Taken::Meta { reply } => {
                let result = match &written {
                    Ok(_) => Ok(()),
                    Err(e) => Err(StoreError::Unavailable(format!("batch not written: {e}"))),
                };
                let _ = reply.send(result);
            }
            Taken::Sweep { outcome, reply } => {
                let result = match &written {
                    Ok(_) => outcome,
                    Err(e) => Err(StoreError::Unavailable(format!("batch not written: {e}"))),
                };
                let _ = reply.send(result);
            }
            Taken::Advance { sink, to, reply } => {
                let result = match &written {
                    Ok(_) => {
                        tracing::debug!(sink = %sink, to, "lifecycle sink position persisted");
                        Ok(())
                    }
                    Err(e) => Err(StoreError::Unavailable(format!("batch not written: {e}"))),
                };
                let _ = reply.send(result);
            }
        }
    }
}

/// Refuse a change with `AuditBacklog` (`reason`: which limit) before it takes a seq.
fn refuse(g: &mut Group, reason: &'static str) -> Admitted {
    g.refused += 1;
    telemetry::change_refused(reason);
    Admitted::Backlog
}
