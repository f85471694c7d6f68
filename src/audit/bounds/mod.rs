//! Bounding the trail: what limits it, how much it holds, and the only code that deletes
//! rows.
//!
//! `limits.rs` is configuration (`[audit]`: retention, sweep, ceilings, outbox backlog) and
//! the stats reported against it; `usage.rs` is `m:audit_usage`, the rows and bytes kept in
//! every batch that adds or deletes rows; `prune.rs` deletes the oldest rows, inside the
//! writer's group batch, for the ceilings and for retention, never at or above the lifecycle
//! cursor; `retention.rs` is the task that asks the writer for one sweep batch at a time.
//!
//! The `Trail` methods of this part (sweep, stats, usage, limits) are here.

pub(crate) mod limits;
pub(crate) mod prune;
pub mod retention;
pub(crate) mod usage;

use limits::{Limits, TrailStats};
use prune::SweepBatch;
use retention::SweepReport;
use usage::Usage;

use crate::audit::writer::{Request, Sweep};
use crate::audit::Trail;
use crate::store::StoreError;

impl Trail {
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
}
