//! `lifecycle::watch` on a real trail: caught-up watchers share the events one reader built
//! (one allocation, whoever asks), a watcher behind the tail reads the outbox itself, and
//! one whose rows a ceiling deleted while it was behind hears `Gone` with the oldest
//! position served.

use std::sync::Arc;
use std::time::Duration;

use crate::support::trail::{create_source, ctx, open_trail_with};
use ankusa::audit::{Limits, Trail, TrailOptions};
use ankusa::lifecycle::watch::{Filter, GoneWhy, Page, Watch, WatchError};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

fn trail(dir: &std::path::Path, max_rows: u64) -> Trail {
    let options = TrailOptions {
        lifecycle: true,
        limits: Limits {
            max_rows,
            ..Limits::default()
        },
        ..TrailOptions::default()
    };
    open_trail_with(dir, options)
}

fn seqs(page: &Page) -> Vec<u64> {
    page.events.iter().map(|e| e.seq).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caught_up_watchers_share_what_one_reader_built() {
    let dir = tempfile::tempdir().unwrap();
    let trail = trail(dir.path(), u64::MAX);
    create_source(&trail, ctx("ops"), "s1", "pw").await.unwrap();
    let stop = CancellationToken::new();
    let (watch, tail) = Watch::start(&trail, "urn:test", 8, stop.clone());
    let waiting: Vec<_> = (0..3)
        .map(|_| {
            let watcher = watch.join().unwrap();
            tokio::spawn(async move {
                let until = Instant::now() + Duration::from_secs(20);
                watcher
                    .next(1, &Filter::default(), 10, until)
                    .await
                    .unwrap()
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(watch.statuses().len(), 3);
    create_source(&trail, ctx("ops"), "s2", "pw").await.unwrap();
    let mut pages = Vec::new();
    for w in waiting {
        pages.push(w.await.unwrap());
    }
    for page in &pages {
        assert_eq!((seqs(page), page.position, page.latest), (vec![2], 2, 2));
        // Not a copy each: the event the tail built once.
        assert!(Arc::ptr_eq(&page.events[0], &pages[0].events[0]));
    }
    // A watcher behind the tail (it starts at the commit it was made at) reads the outbox:
    // the same bytes, another allocation.
    let behind = watch.join().unwrap();
    let page = behind
        .next(0, &Filter::default(), 10, Instant::now())
        .await
        .unwrap();
    assert_eq!(seqs(&page), vec![1, 2]);
    assert_eq!(page.events[1].json.get(), pages[0].events[0].json.get());
    assert!(!Arc::ptr_eq(&page.events[1], &pages[0].events[0]));
    drop(behind);
    assert!(watch.statuses().is_empty());
    stop.cancel();
    tail.await.unwrap();
    trail.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_whose_rows_were_deleted_while_it_was_behind_hears_gone() {
    let dir = tempfile::tempdir().unwrap();
    let trail = trail(dir.path(), 5);
    for i in 1..=3 {
        create_source(&trail, ctx("ops"), &format!("s{i}"), "pw")
            .await
            .unwrap();
    }
    let stop = CancellationToken::new();
    let (watch, tail) = Watch::start(&trail, "urn:test", 8, stop.clone());
    let watcher = watch.join().unwrap();
    let page = watcher
        .next(0, &Filter::default(), 1, Instant::now())
        .await
        .unwrap();
    assert_eq!((seqs(&page), page.position), (vec![1], 1));
    // The ceiling keeps the last 5 rows of 12: rows 2 to 7 go while the watcher is at 1.
    for i in 4..=12 {
        create_source(&trail, ctx("ops"), &format!("s{i}"), "pw")
            .await
            .unwrap();
    }
    match watcher
        .next(1, &Filter::default(), 10, Instant::now())
        .await
    {
        Err(WatchError::Gone {
            why,
            oldest,
            incarnation,
        }) => {
            assert_eq!((why, oldest), (GoneWhy::Deleted, 7));
            assert_eq!(incarnation, trail.history().current().id);
        }
        other => panic!("expected Gone, got {other:?}"),
    }
    // From the oldest position served, nothing is missing.
    let page = watcher
        .next(7, &Filter::default(), 10, Instant::now())
        .await
        .unwrap();
    assert_eq!(seqs(&page), vec![8, 9, 10, 11, 12]);
    drop(watcher);
    stop.cancel();
    tail.await.unwrap();
    trail.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_the_tail_holds_are_not_served_once_their_rows_are_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let trail = trail(dir.path(), 5);
    let stop = CancellationToken::new();
    let (watch, tail) = Watch::start(&trail, "urn:test", 8, stop.clone());
    // Watched from the first commit: the tail builds every event.
    let watcher = watch.join().unwrap();
    for i in 1..=8 {
        create_source(&trail, ctx("ops"), &format!("s{i}"), "pw")
            .await
            .unwrap();
    }
    let until = Instant::now() + Duration::from_secs(5);
    let page = watcher
        .next(7, &Filter::default(), 10, until)
        .await
        .unwrap();
    assert_eq!(seqs(&page), vec![8]);
    // Rows 1 to 3 are gone (the ceiling keeps 5): the same rule as for a watcher reading
    // the outbox, though the tail still holds their events.
    match watcher
        .next(0, &Filter::default(), 10, Instant::now())
        .await
    {
        Err(WatchError::Gone { why, oldest, .. }) => {
            assert_eq!((why, oldest), (GoneWhy::Deleted, 3))
        }
        other => panic!("expected Gone, got {other:?}"),
    }
    let page = watcher
        .next(3, &Filter::default(), 10, Instant::now())
        .await
        .unwrap();
    assert_eq!(seqs(&page), vec![4, 5, 6, 7, 8]);
    drop(watcher);
    stop.cancel();
    tail.await.unwrap();
    trail.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retention_sweep_that_passes_a_stopped_watcher_makes_it_relist() {
    use crate::trail::retention::{create_sources, limits, open, DAY, T0};
    use ankusa::audit::ManualClock;
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let trail = open(dir.path(), &[], limits(1, 100), &clock);
    create_sources(&trail, 1..6).await; // seqs 1..=5 at T0
    let stop = CancellationToken::new();
    let (watch, tail) = Watch::start(&trail, "urn:test", 8, stop.clone());
    let watcher = watch.join().unwrap();
    let page = watcher
        .next(0, &Filter::default(), 2, Instant::now())
        .await
        .unwrap();
    assert_eq!((seqs(&page), page.position), (vec![1, 2], 2));
    // The watcher stops at 2. Two days on, new rows come and the sweep deletes the old.
    drop(watcher);
    clock.set(T0 + 2 * DAY);
    create_sources(&trail, 6..9).await; // seqs 6..=8
    assert_eq!(trail.sweep_now().await.unwrap().pruned, 5);
    // It comes back at 2: gone, with the oldest position served (5: rows 6 on are kept).
    let watcher = watch.join().unwrap();
    match watcher.check(2, None).await {
        Err(WatchError::Gone { why, oldest, .. }) => {
            assert_eq!((why, oldest), (GoneWhy::Deleted, 5))
        }
        other => panic!("expected Gone, got {other:?}"),
    }
    // It relists: from the oldest position, every event retention kept.
    let page = watcher
        .next(5, &Filter::default(), 10, Instant::now())
        .await
        .unwrap();
    assert_eq!(seqs(&page), vec![6, 7, 8]);
    drop(watcher);
    stop.cancel();
    tail.await.unwrap();
    trail.shutdown().await;
}
