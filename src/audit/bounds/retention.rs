//! The retention sweep: rows older than `audit.retention_days` are deleted, with their
//! lifecycle entities, oldest first, every `audit.sweep_interval`.
//!
//! The sweep does not delete anything itself: only the writer writes the audit column family.
//! It asks the writer for one bounded batch at a time ([`Trail::sweep_batch`]); each batch is
//! one request in the writer's queue, so the commits that arrive meanwhile are served between
//! two batches instead of waiting for a sweep of a million rows. While lifecycle sinks are
//! configured the writer never deletes a row at or above the cursor, however old: a sink that
//! is down longer than the retention keeps the events it has not seen. After every sweep the
//! expired rows so held back are counted (`blocked_by_cursor`), off the writer thread, and
//! reported with the pruned count. A sweep that deleted rows then compacts the range it
//! emptied, so that its tombstones are dropped rather than walked by every later scan from the
//! head of the trail (boot's checks, a recount, reading the trail from the start). Time comes
//! from the trail's clock, so tests need not wait.

use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::audit::Trail;
use crate::store::{keys, Cf, Store, StoreError};
use crate::telemetry;

/// What one whole sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Rows committed before this (unix ms) were expired.
    pub cutoff: u64,
    /// Rows deleted, each with its entity.
    pub pruned: u64,
    /// Bytes those rows and entities held.
    pub bytes: u64,
    /// Writer batches it took.
    pub batches: u64,
    /// The lifecycle cursor it stopped below (`None`: no sinks configured).
    pub cursor: Option<u64>,
    /// Expired rows kept because they are at or above the cursor.
    pub blocked_by_cursor: u64,
    /// How long it took, compaction included.
    pub elapsed: Duration,
    /// How long compacting the emptied range took.
    pub compaction: Duration,
}

/// Start the sweep task: a sweep at once, then one every `sweep_interval`, until `shutdown`
/// is cancelled. A failed sweep is logged and tried again at the next interval.
pub fn spawn(trail: Trail, shutdown: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(trail.limits().sweep_interval);
        // A sweep that ran long is not followed by a burst of catch-up sweeps.
        every.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = every.tick() => {}
                _ = shutdown.cancelled() => break,
            }
            if let Err(e) = sweep(&trail, Some(&shutdown)).await {
                if shutdown.is_cancelled() {
                    break;
                }
                telemetry::audit::retention_failed(&e);
            }
        }
    })
}

/// Sweep now: delete expired rows in batches of `sweep_batch` until none the cursor allows
/// is left (or `shutdown` is cancelled), then count what the cursor held back and report.
pub async fn sweep(
    trail: &Trail,
    shutdown: Option<&CancellationToken>,
) -> Result<SweepReport, StoreError> {
    let started = Instant::now();
    let limits = *trail.limits();
    let retention_ms = u64::try_from(limits.retention.as_millis()).unwrap_or(u64::MAX);
    let cutoff = trail.clock().now_ms().saturating_sub(retention_ms);
    let mut report = SweepReport {
        cutoff,
        ..SweepReport::default()
    };
    loop {
        let batch = trail.sweep_batch(cutoff, limits.sweep_batch.max(1)).await?;
        report.pruned += batch.pruned;
        report.bytes += batch.bytes;
        report.batches += 1;
        report.cursor = batch.cursor;
        if !batch.more || shutdown.is_some_and(CancellationToken::is_cancelled) {
            break;
        }
        // Let other tasks (and their commits, queued behind this batch) run in between.
        tokio::task::yield_now().await;
    }
    if report.pruned > 0 {
        report.compaction = compact_swept(trail).await?;
    }
    if let Some(cursor) = report.cursor {
        let store = trail.store().clone();
        report.blocked_by_cursor =
            tokio::task::spawn_blocking(move || count_blocked(&store, cursor, cutoff))
                .await
                .map_err(|e| StoreError::Unavailable(format!("counting held rows: {e}")))??;
    }
    report.elapsed = started.elapsed();
    let now = trail.clock().now_ms();
    trail.stats.update(|s| {
        s.blocked_by_cursor = report.blocked_by_cursor;
        s.last_sweep_at = Some(now);
    });
    telemetry::audit::retention_swept(&report);
    Ok(report)
}

/// Compact the range of rows and entities a sweep emptied (below the trail's `from`), so
/// that later scans from the head of the trail do not walk its tombstones; how long it took.
async fn compact_swept(trail: &Trail) -> Result<Duration, StoreError> {
    let compacting = Instant::now();
    let store = trail.store().clone();
    let from = trail.stats().usage.from;
    tokio::task::spawn_blocking(move || {
        store.compact_range(Cf::Audit, &keys::row_seek(0), &keys::row_seek(from));
        store.compact_range(Cf::Audit, &keys::outbox_key(0), &keys::outbox_key(from));
    })
    .await
    .map_err(|e| StoreError::Unavailable(format!("compacting swept rows: {e}")))?;
    Ok(compacting.elapsed())
}

/// Rows at or above `cursor` committed before `cutoff`: expired, but not yet seen by every
/// sink. Row times never decrease with seq, so the count stops at the first fresh row.
fn count_blocked(store: &Store, cursor: u64, cutoff: u64) -> Result<u64, StoreError> {
    let mut held = 0;
    store.scan(
        Cf::Audit,
        &[keys::ROW],
        &keys::row_seek(cursor),
        |k, _| match keys::decode_row_key(k) {
            Some((_, at)) if at < cutoff => {
                held += 1;
                true
            }
            Some(_) => false,
            None => true,
        },
    )?;
    Ok(held)
}
