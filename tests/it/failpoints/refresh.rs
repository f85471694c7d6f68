//! The state refresh after a restore, cut short: the next boot finishes it with one row per
//! route.

use std::time::Duration;

use ankusa::audit::CommitError;
use ankusa::subjects::remote::refresh::{Counts, RefreshOptions};

use crate::restore::routes::{
    back_up, create, destination, marker, options, redis_store, refresh_rows, replica,
    restore_into, routes_in_store, update, Node,
};
use crate::support::publisher::{publish_all, read_events};
use crate::support::redis::RedisServer;
use crate::support::trail::ctx;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_cut_short_is_finished_by_the_next_boot_with_one_row_per_route() {
    let scenario = fail::FailScenario::setup();
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (path, events, backups) = (
        dir.path().join("store"),
        dir.path().join("events.jsonl"),
        dir.path().join("backups"),
    );
    let node = Node::boot(
        &path,
        redis_store(&redis.url()),
        options(Duration::from_millis(100)),
    );
    for i in 0..5 {
        create(&node, "t1", &format!("r{i}"), "https://a.test/").await;
    }
    create(&node, "t1", "r9", "https://a.test/").await;
    publish_all(&node.trail, &events).await;
    back_up(&node.trail, &backups);
    for i in 0..5 {
        update(
            &node,
            "t1",
            &format!("r{i}"),
            destination("https://lost.test/"),
        )
        .await;
    }
    publish_all(&node.trail, &events).await;
    node.stop().await;

    restore_into(&backups, &path);
    // One subject at a time; the third refresh row is the last before the "crash".
    fail::cfg("remote::refresh::after_row", "2*off->panic").unwrap();
    let one_by_one = RefreshOptions {
        page: 1,
        hold: Duration::from_millis(100),
        ..options(Duration::from_millis(100))
    };
    let mut node = Node::boot(&path, redis_store(&redis.url()), one_by_one);
    let task = node.refreshing.take().unwrap();
    assert!(task.await.unwrap_err().is_panic(), "cut short");
    fail::remove("remote::refresh::after_row");
    assert_eq!(refresh_rows(node.trail.store()).len(), 3);
    assert!(
        marker(node.trail.store()),
        "the marker stays until it is done"
    );
    let held = node
        .routes
        .update(
            ctx("ops"),
            "t1".into(),
            "r9".into(),
            destination("https://x.test/"),
            None,
        )
        .await;
    assert!(
        matches!(held, Err(CommitError::StoreUnavailable)),
        "{held:?}"
    );
    node.stop().await;

    let mut node = Node::boot(
        &path,
        redis_store(&redis.url()),
        options(Duration::from_millis(100)),
    );
    let report = node.refreshed().await;
    let counts = Counts {
        checked: 6,
        refreshed: 2,
    };
    assert_eq!(
        report.kinds,
        vec![("route", counts)],
        "only what still differed"
    );
    assert!(!marker(node.trail.store()));
    let rows = refresh_rows(node.trail.store());
    let mut resources: Vec<&str> = rows.iter().map(|r| r.resource.as_str()).collect();
    resources.sort();
    assert_eq!(
        resources,
        [
            "routes/r0",
            "routes/r1",
            "routes/r2",
            "routes/r3",
            "routes/r4"
        ],
        "exactly one refresh row per route that differed"
    );
    update(&node, "t1", "r9", destination("https://new.test/")).await;
    publish_all(&node.trail, &events).await;
    assert_eq!(
        replica(&read_events(&events), true),
        routes_in_store(&node.routes).await
    );
    node.stop().await;
    scenario.teardown();
}
