//! A retention sweep cut short by a failed read.

use std::sync::Arc;

use ankusa::audit::{Clock, ManualClock};

use crate::trail::retention::{assert_counters_true, create_sources, limits, open, DAY, T0};

#[tokio::test]
async fn a_read_failure_mid_sweep_keeps_what_was_staged_counted() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let trail = open(dir.path(), &[], limits(1, 1000), &clock);
    let mut tasks = vec![];
    for w in 0..10 {
        let trail = trail.clone();
        tasks.push(tokio::spawn(async move {
            create_sources(&trail, w * 60..w * 60 + 60).await
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    clock.advance(2 * DAY);
    // A fresh row: a trail expires nothing within the retention of its newest row.
    create_sources(&trail, 600..601).await;
    // The first chunk of the oldest rows is read and staged, the next read fails: the batch
    // goes out with the deletions staged so far, and with the counters that count them out.
    fail::cfg("audit::prune_read", "1*off->return").unwrap();
    let failed = trail.sweep_batch(clock.now_ms() - DAY, 1000).await;
    fail::remove("audit::prune_read");
    assert!(failed.is_err());
    assert!(trail.usage().rows < 601, "the first chunk was deleted");
    assert_counters_true(&trail);
    let report = trail.sweep_now().await.unwrap();
    assert_eq!(
        trail.usage().rows,
        1,
        "only the fresh row is left: {report:?}"
    );
    assert_counters_true(&trail);
    trail.shutdown().await;
    scenario.teardown();
}
