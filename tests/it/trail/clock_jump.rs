//! A wall clock that jumps: the retention sweep never expires a row committed less than the
//! retention before the trail's newest row, so a clock far ahead cannot delete what is recent
//! relative to the trail itself; a clock far ahead of the trail, or behind it, is logged and
//! counted (`ankusa_audit_clock_jumps_total`).

use std::sync::Arc;
use std::time::Duration;

use crate::support::trail::*;
use crate::trail::retention::{assert_counters_true, create_sources, limits, open, DAY, T0};
use ankusa::audit::retention::{sweep_until, Timeline};
use ankusa::audit::{Clock, ManualClock, Trail};

const YEAR: u64 = 365 * DAY;

fn seqs(trail: &Trail) -> Vec<u64> {
    all_rows(trail.store()).iter().map(|r| r.seq).collect()
}

/// How many clock jumps in `direction` the node has counted (0: none yet).
fn jumps(direction: &str) -> u64 {
    let prefix = format!("ankusa_audit_clock_jumps_total{{direction=\"{direction}\"}} ");
    ankusa::telemetry::render()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix).map(|n| n.parse().unwrap()))
        .unwrap_or(0)
}

#[tokio::test]
async fn a_clock_ten_years_ahead_expires_nothing_within_the_retention_of_the_newest_row() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let trail = open(dir.path(), &[], limits(30, 1000), &clock);
    create_sources(&trail, 1..4).await; // seqs 1..=3 at T0
    clock.set(T0 + 10 * DAY);
    create_sources(&trail, 4..7).await; // seqs 4..=6
    clock.set(T0 + 29 * DAY);
    create_sources(&trail, 7..10).await; // seqs 7..=9, the newest
    let report = trail.sweep_now().await.unwrap();
    assert_eq!(report.pruned, 0);
    assert_eq!(jumps("ahead"), 0, "a clock in step is no jump");

    // No sinks: nothing but the guard holds the rows.
    clock.advance(10 * YEAR);
    let report = trail.sweep_now().await.unwrap();
    assert_eq!(report.pruned, 0, "{report:?}");
    assert_eq!(report.cutoff, T0 + 29 * DAY - 30 * DAY);
    assert_eq!(seqs(&trail), (1..=9).collect::<Vec<_>>());
    assert_eq!(jumps("ahead"), 1);
    assert_eq!(jumps("behind"), 0);

    // The next sweep still holds them, and does not count the same jump again.
    let report = trail.sweep_now().await.unwrap();
    assert_eq!(report.pruned, 0);
    assert_eq!(jumps("ahead"), 1);
    assert_counters_true(&trail);
    trail.shutdown().await;
}

#[tokio::test]
async fn rows_older_than_the_newest_row_minus_the_retention_are_still_swept() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let trail = open(dir.path(), &[], limits(1, 1000), &clock);
    create_sources(&trail, 1..6).await; // seqs 1..=5 at T0
    clock.set(T0 + 2 * DAY);
    create_sources(&trail, 6..11).await; // seqs 6..=10, the newest
    clock.advance(10 * YEAR);
    let report = trail.sweep_now().await.unwrap();
    assert_eq!(report.cutoff, T0 + 2 * DAY - DAY);
    assert_eq!(report.pruned, 5, "{report:?}");
    assert_eq!(seqs(&trail), (6..=10).collect::<Vec<_>>());
    assert_eq!(jumps("ahead"), 1);
    assert_counters_true(&trail);
    trail.shutdown().await;
}

#[tokio::test]
async fn a_clock_behind_the_newest_row_is_counted_and_expires_nothing_early() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let trail = open(dir.path(), &[], limits(1, 1000), &clock);
    create_sources(&trail, 1..6).await; // seqs 1..=5 at T0
    clock.set(T0 - 2 * DAY);
    let report = trail.sweep_now().await.unwrap();
    assert_eq!(report.pruned, 0);
    assert_eq!(jumps("behind"), 1);
    assert_eq!(jumps("ahead"), 0);
    // A clock a little behind (an NTP step) is no jump.
    clock.set(T0 - 1000);
    trail.sweep_now().await.unwrap();
    assert_eq!(jumps("behind"), 1);
    assert_eq!(seqs(&trail), (1..=5).collect::<Vec<_>>());
    trail.shutdown().await;
}

#[tokio::test]
async fn on_a_running_node_rows_committed_after_a_jump_do_not_expire_the_rows_before_them() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let trail = open(dir.path(), &[], limits(30, 1000), &clock);
    let mut timeline = Timeline::default();
    create_sources(&trail, 1..4).await; // seqs 1..=3 at T0
    let trusted = timeline.trusted(clock.now_ms(), Duration::ZERO);
    assert_eq!(
        sweep_until(&trail, None, Some(trusted))
            .await
            .unwrap()
            .pruned,
        0
    );

    // The wall clock leaps ten years; the node goes on committing, at the leapt time.
    clock.advance(10 * YEAR);
    create_sources(&trail, 4..7).await; // seqs 4..=6
    let hour = Duration::from_secs(3600);
    let trusted = timeline.trusted(clock.now_ms(), hour);
    assert_eq!(
        trusted,
        T0 + 3_600_000,
        "the monotonic clock's hour, not the leap"
    );
    assert_eq!(jumps("ahead"), 1);
    let report = sweep_until(&trail, None, Some(trusted)).await.unwrap();
    assert_eq!(report.pruned, 0, "{report:?}");
    assert_eq!(seqs(&trail), (1..=6).collect::<Vec<_>>());
    assert_eq!(jumps("ahead"), 1, "one leap, reported once");

    // Thirty-one days on by the monotonic clock, the rows of T0 expire as they should.
    let trusted = timeline.trusted(clock.now_ms(), hour + Duration::from_secs(31 * 86_400));
    let report = sweep_until(&trail, None, Some(trusted)).await.unwrap();
    assert_eq!(report.pruned, 3, "{report:?}");
    assert_eq!(seqs(&trail), (4..=6).collect::<Vec<_>>());
    assert_counters_true(&trail);
    trail.shutdown().await;
}

/// A leap the node saw while it ran is not undone by a restart: the writer keeps how far
/// the wall clock is ahead (`m:clock_ahead`), and the first sweep after the restart expires
/// nothing that the time the node trusts keeps. Once the wall clock is set right, the node
/// trusts it again.
#[tokio::test]
async fn a_leap_seen_while_running_is_not_undone_by_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let trail = open(dir.path(), &[], limits(365, 1000), &clock);
    create_sources(&trail, 1..4).await; // seqs 1..=3 at T0
    clock.advance(DAY);
    // The wall clock leaps 400 days while a second passes; the node commits at the leapt time.
    clock.leap(400 * DAY);
    clock.advance(1000);
    create_sources(&trail, 4..7).await; // seqs 4..=6
    let ahead = trail.stats().clock_ahead;
    assert_eq!(ahead, 400 * DAY, "the writer saw the leap");
    assert_eq!(
        trail
            .store()
            .meta_u64(ankusa::store::keys::meta::CLOCK_AHEAD)
            .unwrap(),
        400 * DAY
    );
    trail.shutdown().await;
    drop(trail);

    // Restarted with the wall clock still ahead: the rows of T0 are a day old, not 401.
    let trail = open(dir.path(), &[], limits(365, 1000), &clock);
    assert_eq!(trail.stats().clock_ahead, 400 * DAY);
    let report = trail.sweep_now().await.unwrap();
    assert_eq!(report.pruned, 0, "{report:?}");
    assert_eq!(report.cutoff, T0 + DAY + 1000 - 365 * DAY);
    assert_eq!(seqs(&trail), (1..=6).collect::<Vec<_>>());
    trail.shutdown().await;
    drop(trail);

    // Set right while the node was stopped (before the rows of the leap): trusted again,
    // and the rows of T0 expire when they are a retention old.
    clock.set(T0 + DAY + 2000);
    let trail = open(dir.path(), &[], limits(365, 1000), &clock);
    assert_eq!(trail.stats().clock_ahead, 0);
    create_sources(&trail, 7..8).await;
    assert_eq!(
        trail
            .store()
            .meta_u64(ankusa::store::keys::meta::CLOCK_AHEAD)
            .unwrap(),
        0
    );
    clock.set(T0 + 366 * DAY);
    let report = trail.sweep_now().await.unwrap();
    assert_eq!(report.pruned, 3, "{report:?}");
    trail.shutdown().await;
}
