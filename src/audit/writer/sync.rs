//! The syncer: the second stage of the writer's pipeline, which writes each prepared group's
//! batch (synced) and answers its callers.
//!
//! The writer thread validates and prepares group N+1 while this thread writes and fsyncs
//! group N, so the two halves of a commit's cost (the changes' own code, hashing and
//! encoding; the memtable inserts, the WAL and its fsync) run on two cores instead of one.
//! Groups arrive in seq order over a rendezvous channel (at most one being written while
//! the next is prepared) and are written in that order. When a batch cannot be written,
//! every group prepared on top of it (the same epoch) is abandoned unwritten: it was
//! validated against writes that never happened. The writer hears every result, in order,
//! and rolls its counters back to the last written group before it prepares anything else.

use std::collections::BTreeMap;
use std::sync::{mpsc, Mutex, PoisonError};
use std::time::Instant;

use rocksdb::WriteBatch;
use tokio::sync::{oneshot, watch};

use super::request::{Fate, Job};
use crate::audit::bounds::limits::{Pruned, SharedStats};
use crate::audit::bounds::prune::{self, SweepBatch};
use crate::audit::bounds::usage::Usage;
use crate::audit::clock::ClockGuard;
use crate::audit::dual::requests::Answer;
use crate::audit::restore::refresh::RefreshAnswer;
use crate::audit::row::Row;
use crate::audit::tree::Frontier;
use crate::store::{Store, StoreError};
use crate::telemetry;

/// The trail's counters as a group leaves them.
#[derive(Debug, Clone)]
pub(crate) struct Counters {
    /// The last seq: the next row gets `last_seq + 1`.
    pub last_seq: u64,
    /// The `at` of the last row: rows never go back in time, whatever the wall clock does.
    pub last_at: u64,
    /// Rows and bytes of the trail.
    pub usage: Usage,
    /// The position of every configured lifecycle sink; `m:lifecycle_cursor` is their minimum.
    pub positions: BTreeMap<String, u64>,
    /// The Merkle tree over the rows (`None`: `audit.tree` is off).
    pub tree: Option<Frontier>,
    /// The seq of the last checkpoint row (0: none yet).
    pub checkpointed: u64,
    /// The time the writer trusts against the wall clock (`m:clock_ahead`).
    pub clock: ClockGuard,
}

/// A request taken into a group, waiting for the group's fate to be answered.
pub(crate) enum Taken {
    /// A change: its row when accepted, `None` when refused.
    Change {
        job: Box<dyn Job>,
        row: Option<Box<Row>>,
    },
    /// A change refused by the ceilings or the backlog.
    Backlog { job: Box<dyn Job> },
    /// A retention sweep batch.
    Sweep {
        swept: Result<SweepBatch, StoreError>,
        reply: oneshot::Sender<Result<SweepBatch, StoreError>>,
    },
    /// A sink position move.
    Advance {
        sink: String,
        to: u64,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// A dual write's begin, finish or settlement.
    Pending(Answer),
    /// A state refresh.
    Refresh(RefreshAnswer),
    /// A meta key written for a caller (the refresh marker's deletion).
    Meta {
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// A checkpoint row the group ends with, and the callers that asked for one.
    Checkpoint {
        row: Option<Box<Row>>,
        replies: Vec<oneshot::Sender<Result<Option<u64>, StoreError>>>,
    },
}

/// A group the writer prepared: its batch, its callers, and what it makes of the counters.
pub(crate) struct Prepared {
    /// Groups prepared on top of a batch that failed share its epoch and are abandoned.
    pub epoch: u64,
    pub batch: WriteBatch,
    pub taken: Vec<Taken>,
    /// The commit time of its rows.
    pub at: u64,
    /// Rows it adds.
    pub rows: u64,
    /// The counters once it is written.
    pub counters: Counters,
    pub pruned: Pruned,
    /// Changes it refused for the ceilings or the backlog.
    pub refused: u64,
    /// When the writer began preparing it.
    pub started: Instant,
    /// Whether it must be on disk before its callers hear (everything but retention sweep
    /// batches, see [`Taken::needs_sync`]).
    pub sync: bool,
}

impl Taken {
    /// Whether its caller may hear only once it is on disk. A sweep batch need not be: lost
    /// in a crash, its rows (and the counters that count them out, in the same batch) come
    /// back together and the next sweep deletes them again; and the next synced write makes
    /// it durable with itself, the WAL being written in order. Not waiting for an fsync of
    /// its own, the changes that come in while a sweep runs do not wait for one either.
    pub(crate) fn needs_sync(&self) -> bool {
        !matches!(self, Taken::Sweep { .. })
    }
}

/// What became of a prepared group's batch, as the writer hears it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchResult {
    /// On disk (or nothing to write).
    Written,
    /// Not written: its batch failed, or it was prepared on top of one that did.
    Unwritten,
}

/// The syncer thread's state.
pub(crate) struct Syncer {
    pub store: Store,
    /// Tells readers (the publisher) the last committed seq: a hint, not the truth.
    pub committed: watch::Sender<u64>,
    /// What `Trail::stats` reads; updated after every group.
    pub stats: SharedStats,
    /// The counters as of the last written group.
    pub written: Counters,
    /// The epoch of the last batch that failed: its later groups are abandoned.
    pub failed: Option<u64>,
}

/// The syncer thread: write every group the writer hands over, in order, until it hangs up.
pub(crate) fn run(
    syncer: &Mutex<Syncer>,
    groups: mpsc::Receiver<Prepared>,
    results: mpsc::Sender<BatchResult>,
) {
    // It parks until the next group comes, without polling first: under load every core is
    // busy, and a thread that yields while it polls only trades places with the threads doing
    // the work (a lone committer's groups are written on the writer thread, not here).
    while let Ok(group) = groups.recv() {
        fail::fail_point!("audit::sync_delay");
        syncer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .sync(group, &results);
    }
}

impl Syncer {
    /// Write one group (or abandon it) and answer its callers; the writer hears first.
    pub(crate) fn sync(&mut self, p: Prepared, results: &mpsc::Sender<BatchResult>) {
        let written = if self.failed.is_some_and(|epoch| p.epoch <= epoch) {
            // Validated against a batch that was not written: write none of it. Its
            // refusals are not counted either: they were decided against that batch too.
            let _ = results.send(BatchResult::Unwritten);
            self.note(Pruned::default(), 0);
            complete(p.taken, Err(abandoned()), true);
            return;
        } else if p.batch.is_empty() {
            // Every change in the group was refused and nothing was pruned: nothing to write.
            Ok(())
        } else {
            write(&self.store, p.batch, p.sync)
        };
        match written {
            Ok(()) => {
                self.written = p.counters;
                // The writer hears first: it may be waiting on this group to go on.
                let _ = results.send(BatchResult::Written);
                self.note(p.pruned, p.refused);
                if p.rows > 0 {
                    telemetry::audit::group_committed(p.rows, p.started.elapsed());
                    // The watch moves before any caller hears "committed": whoever was told
                    // its seq also sees the watch at or past it.
                    self.committed.send_replace(self.written.last_seq);
                }
                complete(p.taken, Ok(p.at), false);
            }
            Err(e) => {
                self.failed = Some(p.epoch);
                let _ = results.send(BatchResult::Unwritten);
                self.note(Pruned::default(), p.refused);
                telemetry::audit::write_failed(&e, p.rows);
                complete(p.taken, Err(e), false);
            }
        }
    }

    /// Tell the stats and the metrics the trail as of the last written group, with what the
    /// group just answered pruned (only if written) and refused.
    fn note(&self, pruned: Pruned, refused: u64) {
        let cursor = prune::cursor(&self.written.positions);
        let backlog = prune::backlog(cursor, self.written.last_seq);
        let (usage, clock_ahead) = (self.written.usage, self.written.clock.ahead);
        self.stats.update(|s| {
            s.usage = usage;
            s.clock_ahead = clock_ahead;
            s.cursor = cursor;
            s.backlog = backlog;
            s.refused += refused;
            s.pruned.retention += pruned.retention;
            s.pruned.ceiling += pruned.ceiling;
        });
        telemetry::audit::usage_updated(&usage, backlog);
        telemetry::audit::rows_pruned(&pruned);
    }
}

fn write(store: &Store, batch: WriteBatch, sync: bool) -> Result<(), StoreError> {
    fail::fail_point!("audit::write", |_| Err(StoreError::Injected(
        "audit::write".into()
    )));
    // sync: the WAL is fsynced before any caller hears "committed", so an acknowledged
    // change survives kill -9 and power loss.
    store.write(batch, sync)
}

/// The row a request put into its group, as its caller hears it once the batch's fate is
/// `written`: none of it when the batch was not written.
pub(crate) fn row_as_written(
    written: &Result<u64, StoreError>,
    row: Result<Option<Box<Row>>, StoreError>,
) -> Result<Option<Box<Row>>, StoreError> {
    match (written, row) {
        (Err(e), _) => Err(StoreError::Unwritten(e.to_string())),
        (Ok(_), Err(e)) => Err(e),
        (Ok(_), Ok(None)) => Ok(None),
        (Ok(_), Ok(Some(row))) => {
            telemetry::audit::row_committed(&row);
            Ok(Some(row))
        }
    }
}

pub(crate) fn abandoned() -> StoreError {
    StoreError::Unwritten("an earlier batch it was validated against was not written".into())
}

/// Answer every request of a group: `written` is the batch's fate; `stale`: the group was
/// prepared on top of a batch that failed, so even its refusals may be wrong.
pub(crate) fn complete(taken: Vec<Taken>, written: Result<u64, StoreError>, stale: bool) {
    let unwritten = |e: &StoreError| StoreError::Unwritten(e.to_string());
    for t in taken {
        match t {
            Taken::Change { job, row } => match (&written, row) {
                (Ok(at), Some(row)) => {
                    telemetry::audit::row_committed(&row);
                    job.complete(Fate::Committed {
                        seq: row.seq,
                        at: *at,
                    });
                }
                _ if stale => job.complete(Fate::Abandoned),
                _ => job.complete(Fate::Unwritten),
            },
            Taken::Backlog { job } if stale => job.complete(Fate::Abandoned),
            Taken::Backlog { job } => job.complete(Fate::Backlog),
            Taken::Pending(answer) => answer.complete(&written),
            Taken::Refresh(answer) => answer.complete(&written),
            Taken::Meta { reply } => {
                let _ = reply.send(written.as_ref().map(|_| ()).map_err(unwritten));
            }
            Taken::Checkpoint { row, replies } => {
                let seq = row.as_ref().map(|r| r.seq);
                if let (Ok(_), Some(row)) = (&written, row) {
                    telemetry::audit::row_committed(&row);
                    let size = row.detail.get("size").and_then(|s| s.as_u64());
                    telemetry::audit::checkpoint_signed(row.seq, size.unwrap_or(0));
                }
                for reply in replies {
                    let _ = reply.send(written.as_ref().map(|_| seq).map_err(unwritten));
                }
            }
            Taken::Sweep { swept, reply } => {
                let result = match &written {
                    Ok(_) => swept,
                    Err(e) => Err(unwritten(e)),
                };
                let _ = reply.send(result);
            }
            Taken::Advance { sink, to, reply } => {
                if written.is_ok() {
                    telemetry::lifecycle::position_persisted(&sink, to);
                }
                let _ = reply.send(written.as_ref().map(|_| ()).map_err(unwritten));
            }
        }
    }
}
