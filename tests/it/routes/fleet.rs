//! Two nodes, each with its own trail, sharing one Redis route store, updating the same
//! routes at once: no update is lost, every change that took effect is in exactly one node's
//! trail, and each route's revisions go up by one per applied change.

use std::collections::BTreeMap;
use std::time::Duration;

use ankusa::audit::{CommitError, RowResult};
use ankusa::subjects::routes::{RoutePatch, Routes};
use ankusa::subjects::SubjectError;
use serde_json::json;

use crate::routes::{new_route, redis_store};
use crate::support::redis::RedisServer;
use crate::support::trail::{all_rows, ctx, open_trail};

const ROUTES: [&str; 3] = ["r0", "r1", "r2"];
const UPDATES: usize = 40;

/// Apply `UPDATES` updates to every route from `writer`, each retried until it wins the
/// compare-and-set; returns how many attempts lost.
async fn hammer(routes: Routes, writer: usize) -> usize {
    let mut lost = 0;
    for i in 0..UPDATES {
        for id in ROUTES {
            let mut filter = serde_json::Map::new();
            filter.insert("by".into(), json!(format!("n{writer}-{i}")));
            loop {
                let patch = RoutePatch {
                    filter: Some(filter.clone()),
                    ..RoutePatch::default()
                };
                match routes
                    .update(ctx("alice"), "t1".into(), id.into(), patch, None)
                    .await
                {
                    Ok(outcome) => {
                        assert!(outcome.seq.is_some());
                        break;
                    }
                    Err(CommitError::Refused(SubjectError::RevisionMismatch { .. })) => lost += 1,
                    Err(e) => panic!("update failed: {e}"),
                }
            }
        }
    }
    lost
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_on_one_redis_never_lose_an_update() {
    let redis = RedisServer::start();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (trail_a, trail_b) = (
        open_trail(dir_a.path(), true),
        open_trail(dir_b.path(), true),
    );
    let a = Routes::new(redis_store(&redis.url()), trail_a.clone());
    let b = Routes::new(redis_store(&redis.url()), trail_b.clone());
    for id in ROUTES {
        a.create(
            ctx("alice"),
            "t1".into(),
            new_route(id, "https://example.test/a"),
        )
        .await
        .unwrap();
    }
    // Two writers per node, all on the same three routes.
    let tasks: Vec<_> = [
        (a.clone(), 0),
        (a.clone(), 1),
        (b.clone(), 2),
        (b.clone(), 3),
    ]
    .into_iter()
    .map(|(routes, w)| tokio::spawn(hammer(routes, w)))
    .collect();
    let mut lost = 0;
    for t in tasks {
        lost += tokio::time::timeout(Duration::from_secs(120), t)
            .await
            .expect("writers finish")
            .unwrap();
    }
    let rows: Vec<_> = all_rows(trail_a.store())
        .into_iter()
        .chain(all_rows(trail_b.store()))
        .collect();
    let failed = rows
        .iter()
        .filter(|r| r.result == RowResult::Failed)
        .count();
    // A lost race is refused by the store: it changed nothing, so it has no row at all.
    assert!(lost > 0, "the writers raced");
    assert_eq!(failed, 0, "a lost race writes no row");
    assert!(rows.iter().all(|r| r.result != RowResult::Interrupted));
    for id in ROUTES {
        let stored = a
            .store()
            .get("t1", id)
            .await
            .unwrap()
            .into_subject()
            .unwrap();
        // 1 create + 4 writers x UPDATES updates, none lost.
        assert_eq!(stored.revision, 1 + 4 * UPDATES as u64, "{id}");
        let mut applied: BTreeMap<u64, usize> = BTreeMap::new();
        for row in rows.iter().filter(|r| r.resource == format!("routes/{id}")) {
            if row.result == RowResult::Ok {
                *applied.entry(row.revision.unwrap()).or_default() += 1;
            }
        }
        // Each revision from 1 to the last was applied once, in exactly one trail.
        assert_eq!(
            applied.keys().copied().collect::<Vec<_>>(),
            (1..=stored.revision).collect::<Vec<_>>(),
            "{id}"
        );
        assert!(applied.values().all(|n| *n == 1), "{id}: {applied:?}");
    }
    // Within one trail, a route's applied revisions only go up.
    for trail in [&trail_a, &trail_b] {
        for id in ROUTES {
            let revs: Vec<u64> = all_rows(trail.store())
                .iter()
                .filter(|r| r.resource == format!("routes/{id}") && r.result == RowResult::Ok)
                .map(|r| r.revision.unwrap())
                .collect();
            assert!(revs.windows(2).all(|w| w[0] < w[1]), "{id}: {revs:?}");
        }
    }
    assert!(ankusa::audit::pending_rows(trail_a.store())
        .unwrap()
        .is_empty());
    assert!(ankusa::audit::pending_rows(trail_b.store())
        .unwrap()
        .is_empty());
    trail_a.shutdown().await;
    trail_b.shutdown().await;
}
