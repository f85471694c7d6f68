//! A group commit in the making: the requests taken into it, its batch, and what it would
//! make of the writer's counters.
//!
//! [`Writer::next_group`] starts a group where the last one handed over leaves the counters,
//! [`Writer::add`] validates and stages each request into it, and [`Writer::close`] puts the
//! meta counters it moves into its batch and turns it into the [`Prepared`] group the syncer
//! writes.

use std::collections::BTreeMap;
use std::time::Instant;

use rocksdb::WriteBatch;
use tokio::sync::oneshot;

use super::admit::Admitted;
use super::request::{Advance, Request};
use super::stage::Staged;
use super::sync::{BatchResult, Counters, Prepared, Taken};
use super::tx::Overlay;
use super::Writer;
use crate::audit::bounds::limits::{Limits, Pruned};
use crate::audit::bounds::prune;
use crate::audit::bounds::usage::Usage;
use crate::audit::clock::ClockGuard;
use crate::audit::context::Context;
use crate::audit::dual::writer_side as dual;
use crate::audit::restore::first_boot::Opening;
use crate::audit::restore::refresh;
use crate::audit::tree::Frontier;
use crate::store::{keys, keys::meta, Cf, Store, StoreError};

/// The group being built: its batch and what it would make of the writer's state.
pub(crate) struct Group {
    /// Every write of the group, applied in one synced write.
    pub(super) batch: WriteBatch,
    /// The local subjects' writes so far, for the changes validated after them.
    pub(super) overlay: Overlay,
    /// The trail's rows and bytes as the group leaves them.
    pub(super) usage: Usage,
    /// The last seq the group hands out.
    pub(super) seq: u64,
    /// The sinks' positions as the group leaves them.
    pub(super) positions: BTreeMap<String, u64>,
    /// The rows it prunes.
    pub(super) pruned: Pruned,
    /// The changes it refuses for the ceilings or the backlog.
    pub(super) refused: u64,
    /// The Merkle tree as the group leaves it (`None`: the tree is off).
    pub(super) tree: Option<Frontier>,
    /// The seq of the last checkpoint row as the group leaves it.
    pub(super) checkpointed: u64,
    /// The pending ids it begins: the writer forgets what it kept of them if the group is
    /// not written.
    pub(super) begun: Vec<u64>,
}

impl Group {
    /// Stage a write (`None`: a delete) of `key` in `cf`: into the batch, and into the overlay
    /// the changes validated after it read.
    pub(crate) fn stage(&mut self, store: &Store, cf: Cf, key: Vec<u8>, value: Option<Vec<u8>>) {
        match &value {
            Some(v) => self.batch.put_cf(store.cf(cf), &key, v),
            None => self.batch.delete_cf(store.cf(cf), &key),
        }
        self.overlay.insert((cf, key), value);
    }

    /// The seq the next row of the group takes.
    pub(crate) fn next_seq(&self) -> u64 {
        self.seq + 1
    }

    /// Whether the outbox backlog, as this group leaves it (`m:audit_seq` minus the cursor),
    /// refuses an operator's change.
    pub(crate) fn backlog_full(&self, limits: &Limits) -> bool {
        prune::backlog(prune::cursor(&self.positions), self.seq) >= limits.outbox_max_backlog
    }
}

/// A group being prepared, with the requests taken into it.
pub(super) struct Preparing {
    g: Group,
    pub(super) taken: Vec<Taken>,
    /// The commit time of its rows.
    at: u64,
    /// The clock guard after this group's reading of the wall clock.
    clock: ClockGuard,
    started: Instant,
    /// The pipe's epoch when it was started: a batch failing meanwhile abandons it.
    pub(super) epoch: u64,
    /// Whether it moves a sink's position (and so `m:lifecycle_cursor`).
    advanced: bool,
    /// Callers that asked for a checkpoint.
    checkpoint: Vec<oneshot::Sender<Result<Option<u64>, StoreError>>>,
}

impl Preparing {
    /// The pending ids the group begins, taken out of it.
    pub(super) fn take_begun(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.g.begun)
    }
}

impl Writer {
    /// Forget what was kept of the pending rows `begun` in a group that is not written.
    pub(super) fn forget_begun(&mut self, begun: &[u64]) {
        for id in begun {
            self.begun.remove(id);
        }
    }

    /// The first group, written on this thread before the writer serves: it opens the new
    /// incarnation of a restored store (see `restore::first_boot`) with its row, which takes
    /// the next seq like any other, and the meta the opening stages beside it.
    pub(super) fn open(&mut self, opening: &Opening) -> Result<(), StoreError> {
        let mut o = self.next_group(0);
        let (g, at) = (&mut o.g, o.at);
        let staged = Staged::new(
            self.stamper(),
            g.next_seq(),
            at,
            &Context::system(),
            opening.change(),
        );
        let row = self.append(g, staged);
        opening.stage_meta(&self.store, g);
        let (prepared, begun) = self.close(o);
        let group = self.handing_over(&prepared, begun);
        // Synced: the incarnation, its row, the refresh marker and the flag's deletion are
        // durable together before the writer takes the first change of the new incarnation.
        let written = self.store.write(prepared.batch, true);
        let result = match written {
            Ok(()) => BatchResult::Written,
            Err(_) => BatchResult::Unwritten,
        };
        self.heard(group, result);
        written?;
        fail::fail_point!("audit::restore::after_batch");
        crate::telemetry::audit::row_committed(&row);
        opening.opened();
        Ok(())
    }

    /// The next group: it starts from the counters the last group handed over leaves, at a
    /// commit time never before the last row's. `epoch` is the pipe's.
    pub(super) fn next_group(&self, epoch: u64) -> Preparing {
        let wall = self.clock.now_ms();
        let mut clock = self.counters.clock;
        clock.observe(wall, self.clock.monotonic_ms());
        Preparing {
            g: Group {
                batch: WriteBatch::default(),
                overlay: Overlay::new(),
                usage: self.counters.usage,
                seq: self.counters.last_seq,
                positions: self.counters.positions.clone(),
                pruned: Pruned::default(),
                refused: 0,
                tree: self.counters.tree.clone(),
                checkpointed: self.counters.checkpointed,
                begun: Vec::new(),
            },
            taken: Vec::new(),
            at: wall.max(self.counters.last_at),
            clock,
            started: Instant::now(),
            epoch,
            advanced: false,
            checkpoint: Vec::new(),
        }
    }

    /// Validate and stage one request into the group being prepared.
    pub(super) fn add(&mut self, o: &mut Preparing, request: Request) {
        let (g, at) = (&mut o.g, o.at);
        let taken = match request {
            Request::Commit { ctx, mut job } => match self.take_change(g, at, &ctx, &mut *job) {
                Admitted::Row(row) => Taken::Change {
                    job,
                    row: Some(row),
                },
                Admitted::Refused => Taken::Change { job, row: None },
                Admitted::Backlog => Taken::Backlog { job },
            },
            Request::Advance(advance) => {
                o.advanced = true;
                self.take_advance(g, advance)
            }
            Request::Sweep(sweep) => Taken::Sweep {
                swept: self.sweep(g, &sweep),
                reply: sweep.reply,
            },
            Request::Begin(req) => Taken::Pending(dual::begin(self, g, at, *req)),
            Request::Finish(req) => Taken::Pending(dual::finish(self, g, at, req)),
            Request::Settle(req) => Taken::Pending(dual::settle(self, g, at, req)),
            Request::Refresh(req) => Taken::Refresh(refresh::take(self, g, at, *req)),
            Request::RefreshDone(reply) => {
                let key = keys::meta_key(meta::REFRESH_PENDING);
                g.batch.delete_cf(self.store.cf(Cf::Audit), key);
                Taken::Meta { reply }
            }
            Request::Remember(remember) => {
                let key = keys::meta_key(&meta::remote(&remember.kind));
                g.batch
                    .put_cf(self.store.cf(Cf::Audit), key, &remember.value);
                Taken::Meta {
                    reply: remember.reply,
                }
            }
            Request::Checkpoint(reply) => {
                // Answered with the checkpoint the group ends with (see `close`).
                o.checkpoint.push(reply);
                return;
            }
            Request::Shutdown(_) => unreachable!("run() never puts a shutdown in a group"),
        };
        o.taken.push(taken);
    }

    /// Stage a sink's new position and its dead letters.
    fn take_advance(&self, g: &mut Group, advance: Advance) -> Taken {
        for (key, value) in advance.dead_letters {
            g.stage(&self.store, Cf::DeadLetters, key, Some(value));
        }
        g.batch.put_cf(
            self.store.cf(Cf::Audit),
            keys::meta_key(&meta::sink_position(&advance.sink)),
            advance.to.to_be_bytes(),
        );
        g.positions.insert(advance.sink.clone(), advance.to);
        Taken::Advance {
            sink: advance.sink,
            to: advance.to,
            reply: advance.reply,
        }
    }

    /// Close the group being prepared: put the meta counters it moves into its batch and
    /// advance the counters to what it makes of them. Also hands back the pending ids it
    /// begins, which the writer forgets if the group is not written.
    pub(super) fn close(&mut self, o: Preparing) -> (Prepared, Vec<u64>) {
        let Preparing {
            mut g,
            mut taken,
            at,
            clock,
            started,
            epoch,
            advanced,
            checkpoint,
        } = o;
        let row = self.checkpoint(&mut g, at, !checkpoint.is_empty());
        if row.is_some() || !checkpoint.is_empty() {
            taken.push(Taken::Checkpoint {
                row,
                replies: checkpoint,
            });
        }
        if let Some(tree) = g.tree.as_mut() {
            tree.flush(self.store.cf(Cf::Audit), &mut g.batch);
        }
        let rows = g.seq - self.counters.last_seq;
        self.put_counters(&mut g, rows, advanced);
        if clock.ahead != self.counters.clock.ahead {
            // Kept so that a restart does not undo a leap this run saw (see ClockGuard).
            g.batch.put_cf(
                self.store.cf(Cf::Audit),
                keys::meta_key(meta::CLOCK_AHEAD),
                clock.ahead.to_be_bytes(),
            );
        }
        let begun = std::mem::take(&mut g.begun);
        let counters = Counters {
            last_seq: g.seq,
            last_at: at,
            usage: g.usage,
            positions: g.positions,
            tree: g.tree,
            checkpointed: g.checkpointed,
            clock,
        };
        self.counters = counters.clone();
        self.unsynced.push_back(g.overlay);
        let sync = taken.iter().any(Taken::needs_sync);
        let prepared = Prepared {
            epoch,
            batch: g.batch,
            taken,
            at,
            rows,
            counters,
            pruned: g.pruned,
            refused: g.refused,
            started,
            sync,
        };
        (prepared, begun)
    }

    /// Put into `g`'s batch the meta counters it moves: `m:audit_seq` when it adds `rows`,
    /// `m:audit_usage` when it adds or deletes rows, `m:lifecycle_cursor` when it `advanced`
    /// a sink, `m:pending_seq` when it begins pending rows (once, not once a row).
    fn put_counters(&self, g: &mut Group, rows: u64, advanced: bool) {
        let audit = self.store.cf(Cf::Audit);
        if !g.begun.is_empty() {
            g.batch.put_cf(
                audit,
                keys::meta_key(meta::PENDING_SEQ),
                self.last_pending_id.to_be_bytes(),
            );
        }
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
    }
}
