//! The retention sweep: rows older than `audit.retention_days` are deleted, with their
//! lifecycle entities, oldest first, every `audit.sweep_interval`.
//!
//! The sweep does not delete anything itself: only the writer writes the audit column family.
//! It asks the writer for one bounded batch at a time ([`Trail::sweep_batch`]); each batch is
//! one request in the writer's queue, so the commits that arrive meanwhile are served between
//! two batches instead of waiting for a sweep of a million rows. Every 2 ms its batches take,
//! it rests as long ([`Pace`]): flat out, it would leave those commits a fraction of the node.
//! While lifecycle sinks are configured the writer never deletes a row at or above the
//! cursor, however old: a sink that is down longer than the retention keeps the events it has
//! not seen. After every sweep the expired rows so blocked back are counted
//! (`blocked_by_cursor`), off the writer thread, and reported with the pruned count. A sweep
//! that deleted rows then compacts the range it emptied, so that its tombstones are dropped
//! rather than walked by every later scan from the head of the trail (boot's checks, a
//! recount, reading the trail from the start). Time comes from the trail's clock, so tests
//! need not wait.
//!
//! The wall clock can jump (a bad NTP step, a VM resumed with a wrong time), and a sweep that
//! trusted it would delete every row at once, with nothing to hold them when no sink is
//! configured. So the cutoff is never later than the retention before the trail's newest row:
//! a clock far ahead expires nothing that is recent relative to the trail itself. A clock that
//! reads far past the trail's time, or before it, is logged and counted as a jump. Rows
//! committed while the clock is ahead carry its time (row times never decrease), so that
//! guard alone holds only until the first commit after the jump. The running sweep task
//! therefore also keeps a [`Timeline`]: the time it trusts, moved on by the monotonic clock
//! between sweeps, which a wall clock leaping ahead of it does not move. The writer keeps the
//! same guard at every group and stores how far ahead the wall clock is (`m:clock_ahead`,
//! [`ClockGuard`](crate::audit::clock::ClockGuard)), so a restart does not undo a leap the
//! node saw. A jump made while the node was stopped is blocked by the newest row alone.

use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::audit::Trail;
use crate::store::{blocking, keys, Cf, Store, StoreError};
use crate::telemetry;

/// How far the clock may read past the trail's time (its newest row or its last sweep,
/// whichever is later) beyond one sweep interval, or before that time, before a sweep calls
/// it a jump. One interval: a quiet trail's last sweep is at most that far behind the next.
/// Five minutes more: beyond timer slack and an NTP step, and a jump smaller than that moves
/// the cutoff by less than five minutes against a retention of at least a day.
pub const CLOCK_JUMP_MARGIN: Duration = Duration::from_secs(300);

/// What one whole sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Rows committed before this (unix ms) were expired: the retention before the clock, or
    /// before the trail's newest row when that is earlier.
    pub cutoff: u64,
    /// Rows deleted, each with its entity.
    pub pruned: u64,
    /// Bytes those rows and entities blocked.
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
        let (mut timeline, started) = (Timeline::default(), Instant::now());
        loop {
            tokio::select! {
                _ = every.tick() => {}
                _ = shutdown.cancelled() => break,
            }
            let trusted = timeline.trusted(trail.clock().now_ms(), started.elapsed());
            if let Err(e) = sweep_until(&trail, Some(&shutdown), Some(trusted)).await {
                if shutdown.is_cancelled() {
                    break;
                }
                telemetry::audit::retention_failed(&e);
            }
        }
    })
}

/// How long the sweep works before it rests as long: long enough for tokio's timer (1 ms),
/// short enough that a commit rarely waits behind more than one slice.
const PACE_SLICE: Duration = Duration::from_millis(2);

/// The sweep's pace: half the time its batches take, half resting.
#[derive(Debug, Default)]
struct Pace {
    worked: Duration,
}

impl Pace {
    /// After a batch that took `took`: the rest due, once a slice of work is done.
    fn after(&mut self, took: Duration) -> Option<Duration> {
        self.worked += took;
        (self.worked >= PACE_SLICE).then(|| std::mem::take(&mut self.worked))
    }
}

/// Sweep now: delete expired rows in batches of `sweep_batch` until none the cursor allows
/// is left (or `shutdown` is cancelled), then count what the cursor blocked back and report.
pub async fn sweep(
    trail: &Trail,
    shutdown: Option<&CancellationToken>,
) -> Result<SweepReport, StoreError> {
    sweep_until(trail, shutdown, None).await
}

/// [`sweep`], with the clock read no later than `trusted` (a [`Timeline`]'s time).
pub async fn sweep_until(
    trail: &Trail,
    shutdown: Option<&CancellationToken>,
    trusted: Option<u64>,
) -> Result<SweepReport, StoreError> {
    let started = Instant::now();
    let limits = *trail.limits();
    let wall = trail.clock().now_ms();
    // A leap the writer saw, this run or before a restart, is not followed either.
    let guarded = wall.saturating_sub(trail.stats().clock_ahead);
    let now = trusted.map_or(guarded, |t| t.min(guarded));
    let newest = newest_row_at(trail).await?;
    // A timeline or a guard that does not follow the wall clock has already reported the leap.
    if now == wall {
        check_clock(
            wall,
            newest,
            trail.stats().last_sweep_at,
            limits.sweep_interval,
        );
    }
    let cutoff = cutoff(now, newest, millis(limits.retention));
    let mut report = SweepReport {
        cutoff,
        ..SweepReport::default()
    };
    let mut pace = Pace::default();
    loop {
        let asked = Instant::now();
        let batch = trail.sweep_batch(cutoff, limits.sweep_batch.max(1)).await?;
        report.pruned += batch.pruned;
        report.bytes += batch.bytes;
        report.batches += 1;
        report.cursor = batch.cursor;
        if !batch.more || shutdown.is_some_and(CancellationToken::is_cancelled) {
            break;
        }
        // Let other tasks (and their commits, queued behind this batch) run in between.
        match pace.after(asked.elapsed()) {
            Some(rest) => tokio::time::sleep(rest).await,
            None => tokio::task::yield_now().await,
        }
    }
    if report.pruned > 0 {
        report.compaction = compact_swept(trail).await?;
    }
    if let Some(cursor) = report.cursor {
        let store = trail.store().clone();
        report.blocked_by_cursor =
            blocking::try_run("counting the rows the cursor keeps", move || {
                count_blocked(&store, cursor, cutoff)
            })
            .await?;
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

/// The time a running sweep task trusts: the wall clock, as long as it moves with the
/// monotonic clock. A wall clock that leaps more than [`CLOCK_JUMP_MARGIN`] ahead of where the
/// monotonic clock has taken the trusted time is not followed; the trusted time goes on with
/// the monotonic clock instead, so that rows committed meanwhile (stamped with the leapt time)
/// do not make the sweep expire the rows before them. A wall clock that goes back is
/// followed: an earlier cutoff deletes less.
#[derive(Debug, Default, Clone, Copy)]
pub struct Timeline {
    /// The time trusted at the last reading, and the monotonic reading it was taken at.
    last: Option<(u64, Duration)>,
    /// Whether the wall clock is ahead of the trusted time now (a jump is logged once).
    ahead: bool,
}

impl Timeline {
    /// The trusted time, given the wall clock (`wall`, unix ms) and a monotonic reading
    /// (`mono`, from any fixed start).
    pub fn trusted(&mut self, wall: u64, mono: Duration) -> u64 {
        let trusted = match self.last {
            Some((at, then)) => {
                let expected = at.saturating_add(millis(mono.saturating_sub(then)));
                let leapt = wall > expected.saturating_add(millis(CLOCK_JUMP_MARGIN));
                if leapt && !self.ahead {
                    telemetry::audit::clock_jumped("ahead", wall - expected, wall, expected);
                }
                self.ahead = leapt;
                if leapt {
                    expected
                } else {
                    wall
                }
            }
            None => wall,
        };
        self.last = Some((trusted, mono));
        trusted
    }
}

/// Rows committed before this are expired: `retention_ms` before the clock (`now`), but
/// never later than that before the trail's newest row (committed at `newest`), so that a
/// clock far ahead cannot expire rows that are recent relative to the trail itself.
fn cutoff(now: u64, newest: Option<u64>, retention_ms: u64) -> u64 {
    newest
        .map_or(now, |n| n.min(now))
        .saturating_sub(retention_ms)
}

/// Log and count a clock jump: the clock (`now`) reads more than a sweep `interval` and
/// [`CLOCK_JUMP_MARGIN`] past the trail's time (its `newest` row or its `last_sweep`,
/// whichever is later), or more than the margin before it. The last sweep's time moves with
/// the clock, so a jump ahead is counted once; a clock behind is counted at every sweep
/// until it passes the newest row again.
fn check_clock(now: u64, newest: Option<u64>, last_sweep: Option<u64>, interval: Duration) {
    let Some(trail_at) = newest.max(last_sweep) else {
        return;
    };
    let margin = millis(CLOCK_JUMP_MARGIN);
    let ahead = now.saturating_sub(trail_at);
    if ahead > millis(interval).saturating_add(margin) {
        telemetry::audit::clock_jumped("ahead", ahead, now, trail_at);
    }
    let behind = trail_at.saturating_sub(now);
    if behind > margin {
        telemetry::audit::clock_jumped("behind", behind, now, trail_at);
    }
}

/// `d` in whole milliseconds, saturating.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The commit time of the trail's newest row (`None`: the trail holds no row).
async fn newest_row_at(trail: &Trail) -> Result<Option<u64>, StoreError> {
    let store = trail.store().clone();
    blocking::try_run("reading the newest row", move || {
        let last = store.last(Cf::Audit, &[keys::ROW])?;
        Ok(last
            .and_then(|(k, _)| keys::decode_row_key(&k))
            .map(|(_, at)| at))
    })
    .await
}

/// Compact the range of rows and entities a sweep emptied (below the trail's `from`), so
/// that later scans from the head of the trail do not walk its tombstones; how long it took.
async fn compact_swept(trail: &Trail) -> Result<Duration, StoreError> {
    let compacting = Instant::now();
    let store = trail.store().clone();
    let from = trail.stats().usage.from;
    blocking::run("compacting swept rows", move || {
        store.compact_range(Cf::Audit, &keys::row_seek(0), &keys::row_seek(from));
        store.compact_range(Cf::Audit, &keys::outbox_key(0), &keys::outbox_key(from));
    })
    .await?;
    Ok(compacting.elapsed())
}

/// Rows at or above `cursor` committed before `cutoff`: expired, but not yet seen by every
/// sink. Row times never decrease with seq, so the count stops at the first fresh row.
fn count_blocked(store: &Store, cursor: u64, cutoff: u64) -> Result<u64, StoreError> {
    let mut blocked = 0;
    store.scan(
        Cf::Audit,
        &[keys::ROW],
        &keys::row_seek(cursor),
        |k, _| match keys::decode_row_key(k) {
            Some((_, at)) if at < cutoff => {
                blocked += 1;
                true
            }
            Some(_) => false,
            None => true,
        },
    )?;
    Ok(blocked)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    const T0: u64 = 1_700_000_000_000;

    #[test]
    fn the_sweep_rests_as_long_as_it_worked_once_a_slice_is_done() {
        let mut pace = Pace::default();
        let us = Duration::from_micros;
        assert_eq!(pace.after(us(700)), None);
        assert_eq!(pace.after(us(700)), None);
        assert_eq!(pace.after(us(900)), Some(us(2300)));
        // The count starts again after a rest.
        assert_eq!(pace.after(us(1500)), None);
        assert_eq!(pace.after(us(5000)), Some(us(6500)));
    }

    #[test]
    fn a_timeline_follows_a_wall_clock_in_step_with_the_monotonic_one() {
        let mut t = Timeline::default();
        assert_eq!(t.trusted(T0, Duration::ZERO), T0);
        // A minute of NTP slew either way is followed.
        assert_eq!(t.trusted(T0 + 3_660_000, HOUR), T0 + 3_660_000);
        assert_eq!(t.trusted(T0 + 7_140_000, 2 * HOUR), T0 + 7_140_000);
    }

    #[test]
    fn a_timeline_does_not_follow_a_wall_clock_that_leaps_ahead() {
        let mut t = Timeline::default();
        t.trusted(T0, Duration::ZERO);
        let decade = 10 * 365 * 24 * 3_600_000;
        assert_eq!(t.trusted(T0 + decade, HOUR), T0 + 3_600_000);
        // It goes on with the monotonic clock while the wall clock stays ahead.
        assert_eq!(t.trusted(T0 + decade + 3_600_000, 2 * HOUR), T0 + 7_200_000);
        // A wall clock set right again is followed.
        assert_eq!(t.trusted(T0 + 10_800_000, 3 * HOUR), T0 + 10_800_000);
    }

    #[test]
    fn a_timeline_follows_a_wall_clock_that_goes_back() {
        let mut t = Timeline::default();
        t.trusted(T0, Duration::ZERO);
        assert_eq!(t.trusted(T0 - 86_400_000, HOUR), T0 - 86_400_000);
    }
}
