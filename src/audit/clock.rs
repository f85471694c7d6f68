//! Wall-clock time for row timestamps and retention, injectable so tests need not wait.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of unix time in milliseconds, and of monotonic time to check it against.
pub trait Clock: Send + Sync + Debug {
    /// Milliseconds since the unix epoch.
    fn now_ms(&self) -> u64;

    /// Milliseconds from a fixed start, never going back and never leaping (what the wall
    /// clock is checked against).
    fn monotonic_ms(&self) -> u64;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }

    fn monotonic_ms(&self) -> u64 {
        static START: LazyLock<Instant> = LazyLock::new(Instant::now);
        millis(START.elapsed())
    }
}

/// How far the wall clock may run ahead of the time the writer trusts before it is taken for
/// a leap: beyond timer slack and an NTP step.
pub const LEAP_MARGIN: Duration = Duration::from_secs(300);

/// How far the wall clock is ahead of the time the writer trusts, kept across restarts
/// (`m:clock_ahead`), so that a leap seen while the node ran is not undone by a restart.
///
/// Between two groups the trusted time moves with the monotonic clock. A wall clock that
/// reads more than [`LEAP_MARGIN`] past it has leapt: the trusted time goes on with the
/// monotonic clock, and `ahead` is how far the wall clock is past it. A wall clock that
/// comes back within the margin (or goes back) is followed again, and `ahead` is 0. After a
/// restart there is no monotonic link to the last group, so the trusted time starts at the
/// wall clock less the `ahead` kept, unless the wall clock reads before the trail's last row
/// (then it was set back while the node was stopped, and is trusted again).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClockGuard {
    /// The trusted time at the last reading, and the monotonic time it was read at.
    trusted: Option<(u64, u64)>,
    /// How far the wall clock was ahead of the trusted time at the last reading (ms).
    pub ahead: u64,
}

impl ClockGuard {
    /// The guard of a trail booted with `ahead` kept, its last row at `last_at`, the wall
    /// clock reading `wall`.
    pub fn resume(ahead: u64, last_at: u64, wall: u64) -> ClockGuard {
        let set_back = wall.saturating_add(millis(LEAP_MARGIN)) < last_at;
        ClockGuard {
            trusted: None,
            ahead: if set_back { 0 } else { ahead },
        }
    }

    /// Read the wall clock (`wall`, unix ms) at monotonic time `now` (ms): the time trusted.
    pub fn observe(&mut self, wall: u64, now: u64) -> u64 {
        let trusted = match self.trusted {
            None => wall.saturating_sub(self.ahead),
            Some((at, then)) => {
                let expected = at.saturating_add(now.saturating_sub(then));
                if wall > expected.saturating_add(millis(LEAP_MARGIN)) {
                    expected
                } else {
                    wall
                }
            }
        };
        self.trusted = Some((trusted, now));
        self.ahead = wall.saturating_sub(trusted);
        trusted
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A clock that only moves when told to (tests). Time passes with [`advance`] and a later
/// [`set`] (the monotonic clock moves with the wall clock); a wall clock that leaps or is set
/// back while no time passes is [`leap`] and an earlier [`set`].
///
/// [`advance`]: ManualClock::advance
/// [`set`]: ManualClock::set
/// [`leap`]: ManualClock::leap
#[derive(Debug, Default)]
pub struct ManualClock {
    wall: AtomicU64,
    monotonic: AtomicU64,
}

impl ManualClock {
    /// A clock standing at `ms`.
    pub fn new(ms: u64) -> ManualClock {
        ManualClock {
            wall: AtomicU64::new(ms),
            monotonic: AtomicU64::new(0),
        }
    }

    /// Let `ms` milliseconds pass.
    pub fn advance(&self, ms: u64) {
        self.wall.fetch_add(ms, Ordering::SeqCst);
        self.monotonic.fetch_add(ms, Ordering::SeqCst);
    }

    /// Set the wall clock to `ms`: time passes to a later one; an earlier one is the wall
    /// clock set back.
    pub fn set(&self, ms: u64) {
        let before = self.wall.swap(ms, Ordering::SeqCst);
        self.monotonic
            .fetch_add(ms.saturating_sub(before), Ordering::SeqCst);
    }

    /// Move the wall clock `ms` ahead while no time passes (a bad NTP step).
    pub fn leap(&self, ms: u64) {
        self.wall.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.wall.load(Ordering::SeqCst)
    }

    fn monotonic_ms(&self) -> u64 {
        self.monotonic.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 86_400_000;

    #[test]
    fn a_leap_is_not_followed_and_its_size_is_kept() {
        let mut guard = ClockGuard::default();
        assert_eq!(guard.observe(1000 * DAY, 5), 1000 * DAY);
        assert_eq!(guard.ahead, 0);
        // A minute later by the monotonic clock, the wall clock reads a year on.
        assert_eq!(guard.observe(1365 * DAY, 60_005), 1000 * DAY + 60_000);
        assert_eq!(guard.ahead, 365 * DAY - 60_000);
        // It stays ahead: the trusted time keeps to the monotonic clock.
        assert_eq!(
            guard.observe(1365 * DAY + 60_000, 120_005),
            1000 * DAY + 120_000
        );
        // A wall clock within the margin of it is followed: time passing, or set right.
        assert_eq!(
            guard.observe(1000 * DAY + 180_000, 180_005),
            1000 * DAY + 180_000
        );
        assert_eq!(guard.ahead, 0);
        assert_eq!(
            guard.observe(1000 * DAY + 400_000, 240_005),
            1000 * DAY + 400_000
        );
    }

    #[test]
    fn a_manual_clock_passes_time_or_leaps() {
        let clock = ManualClock::new(1000);
        clock.advance(10);
        clock.set(1100);
        assert_eq!((clock.now_ms(), clock.monotonic_ms()), (1100, 100));
        clock.leap(5000);
        clock.set(1200);
        assert_eq!((clock.now_ms(), clock.monotonic_ms()), (1200, 100));
    }

    #[test]
    fn a_restart_keeps_the_leap_unless_the_clock_was_set_back() {
        let now = 7;
        let mut resumed = ClockGuard::resume(365 * DAY, 1365 * DAY, 1366 * DAY);
        assert_eq!(resumed.observe(1366 * DAY, now), 1001 * DAY);
        let mut set_back = ClockGuard::resume(365 * DAY, 1365 * DAY, 1001 * DAY);
        assert_eq!(set_back.observe(1001 * DAY, now), 1001 * DAY);
        assert_eq!(set_back.ahead, 0);
    }
}
