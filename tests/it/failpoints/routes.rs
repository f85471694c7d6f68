//! Route and source dual writes cut short: a store write never answered, a settlement the
//! store refused.

use std::sync::Arc;
use std::time::Duration;

use ankusa::audit::{CommitError, RowResult};
use ankusa::subjects::remote::memory::MemoryStore;
use ankusa::subjects::routes::{Route, RouteStore};
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::routes::api::ROUTES;
use crate::routes::settle::stopped_with_pending_on;
use crate::routes::sources_redis::{on_redis, SOURCES};
use crate::routes::{entity, new_route};
use crate::routes::{route_rows, settling, wait_settled};
use crate::support::node::*;
use crate::support::redis::RedisServer;
use crate::support::trail::{all_rows, ctx, open_trail};

/// A route store that does not answer the write: 503, and the pending row is settled by
/// reading the route back (here: never written, so `failed`) while the node runs.
#[tokio::test]
async fn an_unanswered_store_write_is_503_and_settled_by_reconcile() {
    let node = TestNode::start_with(|v| v["settlement"]["interval"] = json!("100ms")).await;
    let create = node
        .call(
            Method::POST,
            ROUTES,
            ADMIN,
            Some(json!({"id": "r1", "source": "s1", "destination": "https://h/x"})),
        )
        .await;
    assert_eq!(create.status, StatusCode::CREATED);
    fail::cfg("remote::apply", "return").unwrap();
    let lost = node
        .call(
            Method::PATCH,
            &format!("{ROUTES}/r1"),
            ADMIN,
            Some(json!({"enabled": false})),
        )
        .await;
    fail::remove("remote::apply");
    assert_error(&lost, 503, "store_unavailable");
    let settled = async || Some(node.rows().await).filter(|rows| rows.len() == 2);
    let bound = std::time::Duration::from_secs(10);
    let rows = crate::support::eventually("the route's two rows", bound, settled).await;
    assert_eq!(rows.len(), 2, "settled while the node runs");
    assert_eq!(rows[1]["action"], "route.update");
    assert_eq!(rows[1]["result"], "failed");
    assert_eq!(rows[1]["publish"], false);
    let metrics = node
        .send(node.req(Method::GET, "/metrics", None))
        .await
        .text;
    for line in [
        "ankusa_audit_pending_begun_total 2",
        "ankusa_audit_pending_settled_total{by=\"finish\",result=\"ok\"} 1",
        "ankusa_audit_pending_settled_total{by=\"reconcile\",result=\"failed\"} 1",
        "ankusa_audit_pending_abandoned_total 1",
        // The create's read (whether it exists) and the update's; both pending rows and both
        // store writes (the lost one too); the create's row alone.
        "ankusa_audit_dual_write_seconds_count{stage=\"read\"} 2",
        "ankusa_audit_dual_write_seconds_count{stage=\"begin\"} 2",
        "ankusa_audit_dual_write_seconds_count{stage=\"store\"} 2",
        "ankusa_audit_dual_write_seconds_count{stage=\"finish\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    node.stop().await;
}

/// A settlement the store refused to write is not left for the next boot: it is tried again
/// and lands, once, with what the subject holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_the_store_refused_is_tried_again() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<RouteStore> = Arc::new(MemoryStore::<Route>::default());
    stopped_with_pending_on(dir.path(), store.clone()).await;
    let trail = open_trail(dir.path(), true);
    // Every batch, the settlement's, is refused until the store takes writes again.
    fail::cfg("audit::write", "return").unwrap();
    let settling = settling(
        &trail,
        store,
        Duration::from_millis(100),
        Duration::from_secs(10),
    );
    // The boot's settlement is through once the row was tried (what waits for it, a
    // restore's refresh, is not held while the row is tried again).
    tokio::time::timeout(Duration::from_secs(30), trail.boot_settled())
        .await
        .expect("boot settled after the first attempt");
    assert_eq!(ankusa::audit::pending_rows(trail.store()).unwrap().len(), 1);
    fail::remove("audit::write");
    wait_settled(trail.store(), Duration::from_secs(10)).await;
    let rows = route_rows(trail.store(), "r1");
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[1].result, RowResult::Ok);
    assert!(rows[1].publish && !rows[1].refresh);
    settling.stop().await;
    trail.shutdown().await;
    scenario.teardown();
}

/// The writer keeps each pending row it begins until it moves into the trail. A begin whose
/// batch was not written leaves nothing; a change whose finish was not written is settled
/// from the store, once, with the entity it was begun with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwritten_begins_leave_nothing_and_unwritten_finishes_settle_from_the_store() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<RouteStore> = Arc::new(MemoryStore::<Route>::default());
    let trail = open_trail(dir.path(), true);
    let settling = settling(
        &trail,
        store,
        Duration::from_millis(100),
        Duration::from_secs(10),
    );
    let create = |id: &str, destination: &str| {
        settling
            .routes
            .create(ctx("alice"), "t1".into(), new_route(id, destination))
    };
    fail::cfg("audit::write", "return").unwrap();
    let refused = create("r1", "https://example.test/a").await;
    fail::remove("audit::write");
    assert!(
        matches!(refused, Err(CommitError::StoreUnavailable)),
        "{refused:?}"
    );
    // The begin's batch is written, its finish's is not, settlement's is.
    fail::cfg("audit::write", "1*off->1*return->off").unwrap();
    let created = create("r2", "https://example.test/b").await.unwrap();
    assert_eq!(created.seq, None, "its row is settlement's");
    wait_settled(trail.store(), Duration::from_secs(10)).await;
    // Settlement of the begin not written found nothing to settle.
    tokio::time::sleep(Duration::from_millis(500)).await;
    fail::remove("audit::write");
    let rows = all_rows(trail.store());
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0].seq, rows[0].resource.as_str(), rows[0].result),
        (1, "routes/r2", RowResult::Ok)
    );
    assert!(rows[0].publish && !rows[0].refresh);
    let published = entity(trail.store(), 1).expect("row 1's entity");
    assert_eq!(
        (&published["id"], &published["destination"]),
        (&json!("r2"), &json!("https://example.test/b"))
    );
    let again = create("r1", "https://example.test/a").await.unwrap();
    assert_eq!(again.seq, Some(2));
    assert_eq!(route_rows(trail.store(), "r1").len(), 1);
    settling.stop().await;
    trail.shutdown().await;
    scenario.teardown();
}

#[tokio::test]
async fn an_unanswered_source_write_is_settled_by_reading_it_back() {
    let redis = RedisServer::start();
    let node = TestNode::start_with(on_redis(redis.url())).await;
    let body = json!({"id": "s1", "kind": "webhook"});
    fail::cfg("remote::apply", "return").unwrap();
    let lost = node.call(Method::POST, SOURCES, ADMIN, Some(body)).await;
    fail::remove("remote::apply");
    assert_error(&lost, 503, "store_unavailable");
    let settled = async || Some(node.rows().await).filter(|rows| !rows.is_empty());
    let bound = std::time::Duration::from_secs(10);
    let rows = crate::support::eventually("the source's row", bound, settled).await;
    assert_eq!(rows.len(), 1, "settled while the node runs");
    assert_eq!(rows[0]["action"], "source.create");
    assert_eq!(rows[0]["result"], "failed", "Redis never got it");
    let missing = node
        .call(Method::GET, &format!("{SOURCES}/s1"), READER, None)
        .await;
    assert_error(&missing, 404, "not_found");
    node.stop().await;
}
