//! Admission: how a change offered to a group is decided, and the room made for its row.
//!
//! A change validates itself first, so that one that would change nothing hears why
//! whatever the trail's state. Then a bounded change (an operator's, `Admission::Bounded`)
//! is checked against the outbox backlog, and the trail is pruned (oldest first, below the
//! cursor, in the group's batch) to make room for its row under the ceilings; a bounded
//! change that still does not fit is refused with `AuditBacklog`. A change the node makes
//! itself, or an operator's that relieves the backlog (`Admission::Relieving`: enabling a
//! sink, redriving or dropping dead letters, a backup), is never refused: refusing it would
//! keep the backlog full. Each change is decided against the group so far, so the counters
//! stay exact.

use std::panic::{catch_unwind, AssertUnwindSafe};

use super::group::Group;
use super::request::{Job, Sweep};
use super::stage::{Staged, Stamper};
use super::tx::{Op, Tx};
use super::Writer;
use crate::audit::bounds::prune::{self, Pruning, SweepBatch};
use crate::audit::context::{Admission, Context};
use crate::audit::row::Row;
use crate::store::{Cf, StoreError};
use crate::telemetry;

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
    /// What this writer stamps rows with.
    pub(crate) fn stamper(&self) -> Stamper<'_> {
        Stamper {
            hasher: &self.hasher,
            lifecycle: self.lifecycle,
            version_base: self.version_base,
        }
    }

    /// Offer one change to the group (see the module doc). Accepted, it takes the next seq
    /// and its ops, row and outbox entity go into the batch.
    pub(super) fn take_change(
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
                telemetry::audit::change_panicked();
                return Admitted::Refused;
            }
        };
        // Validated first: a change that would change nothing (a missing subject, bad input)
        // hears why, backlog or not. One that would may be refused now, its ops dropped.
        let staged = Staged::new(self.stamper(), g.next_seq(), at, ctx, change);
        // Only the audit benchmark sets it: commits without index entries, to compare.
        let staged = match self.without_index {
            true => staged.without_index(),
            false => staged,
        };
        self.admit(g, staged, ctx.admission(), ops)
    }

    /// The one way a row that may be refused enters a batch: put `staged` (the group's next
    /// seq) and the ops of its change into the group, once [`Writer::reserve`] made room for
    /// it as `admission` allows. Only a bounded change is ever refused.
    pub(crate) fn admit(
        &mut self,
        g: &mut Group,
        staged: Staged,
        admission: Admission,
        ops: Vec<Op>,
    ) -> Admitted {
        match self.reserve(g, staged.bytes(), admission) {
            Ok(()) => {}
            Err(NoRoom::Backlog) => return Admitted::Backlog,
            Err(NoRoom::Unreadable) => return Admitted::Refused,
        }
        for (cf, key, value) in ops {
            g.stage(&self.store, cf, key, value);
        }
        Admitted::Row(Box::new(self.put(g, staged)))
    }

    /// The one way a row that is never refused enters a batch (the node's own: a finished
    /// dual write, a refresh, a checkpoint, a new incarnation): `staged` goes in under the
    /// group's next seq, over a ceiling if it must.
    pub(crate) fn append(&mut self, g: &mut Group, staged: Staged) -> Box<Row> {
        self.make_room_over(g, staged.bytes());
        Box::new(self.put(g, staged))
    }

    fn put(&self, g: &mut Group, staged: Staged) -> Row {
        debug_assert_eq!(
            staged.seq(),
            g.next_seq(),
            "a row takes the group's next seq"
        );
        staged.put(self.store.cf(Cf::Audit), g)
    }

    /// Make room in group `g` for `need` bytes of trail as `admission` allows: a bounded
    /// change is refused when the outbox backlog is full, or when pruning (oldest first,
    /// below the cursor) cannot bring the trail under the ceilings with it or cannot read the
    /// oldest rows. Any other change is never refused: it goes over a ceiling if it must.
    pub(crate) fn reserve(
        &mut self,
        g: &mut Group,
        need: u64,
        admission: Admission,
    ) -> Result<(), NoRoom> {
        if !admission.is_bounded() {
            self.make_room_over(g, need);
            return Ok(());
        }
        if g.backlog_full(&self.limits) {
            return Err(refuse(g, "backlog"));
        }
        match self.make_room(g, need) {
            Ok(true) => Ok(()),
            Ok(false) => Err(refuse(g, "ceiling")),
            Err(e) => {
                telemetry::audit::room_unreadable(&e, false);
                Err(NoRoom::Unreadable)
            }
        }
    }

    /// Make what room pruning can for `need` bytes of a row that is taken whether it fits
    /// or not.
    fn make_room_over(&mut self, g: &mut Group, need: u64) {
        if let Err(e) = self.make_room(g, need) {
            telemetry::audit::room_unreadable(&e, true);
        }
    }

    /// Delete the oldest rows group `g` may until a row of `need` bytes fits under the
    /// ceilings, counting them as pruned by the ceilings. Whether it fits.
    fn make_room(&mut self, g: &mut Group, need: u64) -> Result<bool, StoreError> {
        let limits = self.limits;
        let (pruned, fits) = self.pruning(g).make_room(need, &limits)?;
        g.pruned.ceiling += pruned;
        Ok(fits)
    }

    /// One batch of the retention sweep, bounded by the cursor like the ceilings.
    pub(super) fn sweep(&mut self, g: &mut Group, sweep: &Sweep) -> Result<SweepBatch, StoreError> {
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
            tree: g.tree.as_ref().map(|t| t.origin()),
        }
    }
}

/// Why [`Writer::reserve`] found no room.
pub(crate) enum NoRoom {
    /// The outbox backlog or a ceiling: the caller hears `AuditBacklog`.
    Backlog,
    /// The oldest rows could not be read.
    Unreadable,
}

/// Refuse a change with `AuditBacklog` (`reason`: which limit) before it takes a seq.
fn refuse(g: &mut Group, reason: &'static str) -> NoRoom {
    g.refused += 1;
    telemetry::audit::change_refused(reason);
    NoRoom::Backlog
}
