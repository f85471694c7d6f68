//! Settlement of pending rows whose caller never finished them: a `Pending` dropped while the
//! node runs (its future cancelled mid-apply), and rows a stopped node left behind, with the
//! route store's Redis down at boot for a while or for longer than the window.

use std::sync::Arc;
use std::time::Duration;

use ankusa::audit::{Change, Finish, Row, RowResult, Trail};
use ankusa::store::{keys, Cf};
use ankusa::subjects::remote::memory::MemoryStore;
use ankusa::subjects::remote::RemoteSubject;
use ankusa::subjects::remote::Versioned;
use ankusa::subjects::routes::{Route, RoutePatch, RouteStore, Routes};
use serde_json::{json, Value};

use crate::routes::{
    entity, new_route, redis_store, route_rows, settling, wait_settled, PausedStore,
};
use crate::support::redis::RedisServer;
use crate::support::trail::{ctx, open_trail};

/// The change that sets route `id`'s destination, as `Routes::update` describes it (the
/// route before and after, and where settlement finds it), and the route after with the
/// version its compare-and-set expects.
async fn update_of(
    store: &Arc<RouteStore>,
    id: &str,
    destination: &str,
) -> (Versioned<Route>, Change) {
    let found = store.get("t1", id).await.unwrap();
    let version = found.version().expect("route exists");
    let before = found.into_subject().expect("route exists");
    let mut after = before.clone();
    after.destination = destination.into();
    after.revision += 1;
    let change = Change::new("route.update", format!("routes/{id}"))
        .tenant("t1")
        .states(
            Some(serde_json::to_value(&before).unwrap()),
            Some(serde_json::to_value(&after).unwrap()),
        )
        .revision(after.revision)
        .entity(after.view().unwrap().into_value())
        .locate("route", json!({"tenant": "t1", "id": id}));
    (
        Versioned {
            subject: after,
            version,
            state: None,
        },
        change,
    )
}

/// Leave a pending update of route `id` as a crash would: begun, applied to the store if
/// `apply`, never finished (the `Pending` is leaked, so that not even its Drop runs).
async fn leave_pending(trail: &Trail, store: &Arc<RouteStore>, id: &str, apply: bool) {
    let (after, change) = update_of(store, id, "https://example.test/b").await;
    let pending = trail.begin::<()>(ctx("alice"), change).await.unwrap();
    if apply {
        store
            .put(after.subject.clone(), None, Some(after.version))
            .await
            .unwrap();
    }
    std::mem::forget(pending);
}

/// Drive `record` (a dual write whose apply never ends) until its apply signals `reached`,
/// then drop it, as a caller that gives up does.
async fn give_up_at<T>(
    record: impl std::future::Future<Output = T>,
    reached: tokio::sync::oneshot::Receiver<()>,
) {
    tokio::select! {
        _ = record => panic!("the apply never ends, yet record returned"),
        signal = reached => signal.expect("the apply ran"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_pending_is_settled_while_the_node_runs() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail(dir.path(), true);
    let store: Arc<RouteStore> = Arc::new(MemoryStore::<Route>::default());
    let settling = settling(
        &trail,
        store.clone(),
        Duration::from_millis(100),
        Duration::from_secs(10),
    );
    let routes = settling.routes.clone();
    for id in ["r1", "r2"] {
        routes
            .create(
                ctx("alice"),
                "t1".into(),
                new_route(id, "https://example.test/a"),
            )
            .await
            .unwrap();
    }
    // r1: the apply writes the store, then hangs; its caller gives up and drops the future.
    let (after, change) = update_of(&store, "r1", "https://example.test/b").await;
    let (put, written) = tokio::sync::oneshot::channel();
    let applied = trail.record::<(), (), _, _>(ctx("alice"), change, || {
        let store = store.clone();
        async move {
            store
                .put(after.subject.clone(), None, Some(after.version))
                .await
                .unwrap();
            let _ = put.send(());
            std::future::pending::<(Option<Finish>, ())>().await
        }
    });
    give_up_at(applied, written).await;
    // r2: the apply hangs before it writes anything.
    let (_, change) = update_of(&store, "r2", "https://example.test/b").await;
    let (entered, begun) = tokio::sync::oneshot::channel();
    let unapplied = trail.record::<(), (), _, _>(ctx("alice"), change, || {
        let _ = entered.send(());
        std::future::pending::<(Option<Finish>, ())>()
    });
    give_up_at(unapplied, begun).await;
    // A dual write of a kind no reconciler knows settles `interrupted` at once.
    let pending = trail
        .begin::<()>(ctx("alice"), Change::new("gadget.update", "gadgets/g1"))
        .await
        .unwrap();
    drop(pending);

    wait_settled(trail.store(), Duration::from_secs(10)).await;
    let r1 = route_rows(trail.store(), "r1");
    assert_eq!(r1.len(), 2);
    assert_eq!(r1[1].result, RowResult::Ok, "applied: ok");
    assert!(r1[1].publish && !r1[1].refresh);
    assert_eq!(r1[1].revision, Some(2));
    let published = entity(trail.store(), r1[1].seq).expect("entity");
    assert_eq!(published["destination"], "https://example.test/b");
    let r2 = route_rows(trail.store(), "r2");
    assert_eq!(r2[1].result, RowResult::Failed, "never applied: failed");
    assert!(!r2[1].publish && entity(trail.store(), r2[1].seq).is_none());
    // Settlements of different subjects may land in either order: find the gadget's row.
    let gadget = crate::support::trail::all_rows(trail.store())
        .into_iter()
        .find(|r| r.resource == "gadgets/g1")
        .expect("the gadget's row");
    assert_eq!(gadget.result, RowResult::Interrupted);
    assert!(!gadget.refresh && !gadget.publish);
    // The store says what the trail says.
    assert_eq!(
        store
            .get("t1", "r1")
            .await
            .unwrap()
            .into_subject()
            .unwrap()
            .revision,
        2
    );
    assert_eq!(
        store
            .get("t1", "r2")
            .await
            .unwrap()
            .into_subject()
            .unwrap()
            .revision,
        1
    );
    settling.stop().await;
    trail.shutdown().await;
}

/// A node that stopped with one applied, unfinished update of r1 on `redis`.
async fn stopped_with_pending(dir: &std::path::Path, url: &str) {
    stopped_with_pending_on(dir, redis_store(url)).await;
}

/// A node that stopped with one applied, unfinished update of r1 on `store`.
pub(crate) async fn stopped_with_pending_on(dir: &std::path::Path, store: Arc<RouteStore>) {
    let trail = open_trail(dir, true);
    let routes = Routes::new(store.clone(), trail.clone());
    routes
        .create(
            ctx("alice"),
            "t1".into(),
            new_route("r1", "https://example.test/a"),
        )
        .await
        .unwrap();
    leave_pending(&trail, &store, "r1", true).await;
    trail.shutdown().await;
}

/// Boot on `dir` and settle the one pending row a crash left there on route r1 of `store`,
/// holding no entity inside it and `beside` at `q`+id: the trail row it settled into (`ok`,
/// published) and the entity published with it. Neither `p`+id nor `q`+id stays.
async fn settle_left_row(
    dir: &std::path::Path,
    store: Arc<RouteStore>,
    beside: Option<&Value>,
) -> (Row, Option<Value>) {
    let trail = open_trail(dir, true);
    let read = |key: [u8; keys::SEQ_KEY_LEN]| {
        let bytes = trail.store().get(Cf::Audit, &key).unwrap();
        bytes.map(|b| serde_json::from_slice::<Value>(&b).unwrap())
    };
    let pending = ankusa::audit::pending_rows(trail.store()).unwrap();
    let id = pending[0].0;
    let row = read(keys::pending_key(id)).expect("the pending row");
    assert!(row.get("entity").is_none(), "{row}");
    assert_eq!(read(keys::pending_entity_key(id)).as_ref(), beside);
    let settling = settling(
        &trail,
        store,
        Duration::from_millis(100),
        Duration::from_secs(10),
    );
    wait_settled(trail.store(), Duration::from_secs(10)).await;
    let settled = route_rows(trail.store(), "r1").remove(1);
    assert_eq!((settled.result, settled.publish), (RowResult::Ok, true));
    assert_eq!(read(keys::pending_key(id)), None);
    assert_eq!(read(keys::pending_entity_key(id)), None);
    let published = entity(trail.store(), settled.seq);
    settling.stop().await;
    trail.shutdown().await;
    (settled, published)
}

/// A pending update never holds its entity, in it or beside it: settlement reads the route
/// back, and the route the change wrote has the change's view, which its event carries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_update_keeps_no_entity_and_settles_with_the_routes_view() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<RouteStore> = Arc::new(MemoryStore::<Route>::default());
    stopped_with_pending_on(dir.path(), store.clone()).await;
    let (settled, published) = settle_left_row(dir.path(), store.clone(), None).await;
    assert_eq!(settled.action, "route.update");
    let route = store.get("t1", "r1").await.unwrap().into_subject().unwrap();
    assert_eq!(route.destination, "https://example.test/b");
    assert_eq!(published, Some(route.view().unwrap().into_value()));
}

/// A pending delete's entity is beside it (`q`+id, same batch), never in it: the route is
/// gone by the time settlement reads it, and the event carries the route as it was. It moves
/// to the outbox with the row the pending row settles into.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_deletes_entity_is_beside_it_never_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<RouteStore> = Arc::new(MemoryStore::<Route>::default());
    let trail = open_trail(dir.path(), true);
    let routes = Routes::new(store.clone(), trail.clone());
    routes
        .create(
            ctx("alice"),
            "t1".into(),
            new_route("r1", "https://example.test/a"),
        )
        .await
        .unwrap();
    drop(routes);
    let found = store.get("t1", "r1").await.unwrap();
    let version = found.version().expect("route exists");
    let before = found.into_subject().expect("route exists");
    let mut was = before.view().unwrap().into_value();
    was["revision"] = json!(before.revision + 1);
    let change = Change::new("route.delete", "routes/r1")
        .tenant("t1")
        .states(Some(serde_json::to_value(&before).unwrap()), None)
        .revision(before.revision + 1)
        .entity(was.clone())
        .locate("route", json!({"tenant": "t1", "id": "r1"}));
    let pending = trail.begin::<()>(ctx("alice"), change).await.unwrap();
    store.delete("t1", "r1", version).await.unwrap();
    // A crash: the pending row is never finished, not even by its Drop.
    std::mem::forget(pending);
    trail.shutdown().await;
    drop(trail);
    let (settled, published) = settle_left_row(dir.path(), store, Some(&was)).await;
    assert_eq!(settled.action, "route.delete");
    assert_eq!(published, Some(was));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_at_boot_for_five_seconds_settles_once_it_is_back() {
    let mut redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    stopped_with_pending(dir.path(), &redis.url()).await;
    redis.stop();
    let trail = open_trail(dir.path(), true);
    let settling = settling(
        &trail,
        redis_store(&redis.url()),
        Duration::from_millis(250),
        Duration::from_secs(30),
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        ankusa::audit::pending_rows(trail.store()).unwrap().len(),
        1,
        "waits for Redis"
    );
    redis.restart();
    wait_settled(trail.store(), Duration::from_secs(15)).await;
    let rows = route_rows(trail.store(), "r1");
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].result, RowResult::Ok);
    assert!(rows[1].publish && !rows[1].refresh);
    assert_eq!(rows[1].actor, "alice");
    settling.stop().await;
    trail.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_longer_than_the_window_settles_interrupted() {
    let mut redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    stopped_with_pending(dir.path(), &redis.url()).await;
    redis.stop();
    let trail = open_trail(dir.path(), true);
    let settling = settling(
        &trail,
        redis_store(&redis.url()),
        Duration::from_millis(200),
        Duration::from_secs(2),
    );
    wait_settled(trail.store(), Duration::from_secs(15)).await;
    let rows = route_rows(trail.store(), "r1");
    assert_eq!(rows[1].result, RowResult::Interrupted);
    assert!(
        !rows[1].refresh && !rows[1].publish,
        "nothing read, nothing to refresh"
    );
    settling.stop().await;
    trail.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_by_someone_else_before_settlement_is_interrupted_with_refresh() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    stopped_with_pending(dir.path(), &redis.url()).await;
    // Another node changes r1 before this one comes back.
    let other = redis_store(&redis.url());
    let found = other.get("t1", "r1").await.unwrap();
    let version = found.version();
    let mut theirs = found.into_subject().unwrap();
    theirs.enabled = false;
    theirs.revision = 3;
    other.put(theirs.clone(), None, version).await.unwrap();
    let trail = open_trail(dir.path(), true);
    let settling = settling(
        &trail,
        redis_store(&redis.url()),
        Duration::from_millis(100),
        Duration::from_secs(5),
    );
    wait_settled(trail.store(), Duration::from_secs(10)).await;
    let rows = route_rows(trail.store(), "r1");
    assert_eq!(rows[1].result, RowResult::Interrupted);
    assert!(
        rows[1].refresh && rows[1].publish,
        "flagged for a state-refresh event"
    );
    let present = entity(trail.store(), rows[1].seq).expect("refresh entity");
    assert_eq!(present, serde_json::to_value(&theirs).unwrap());
    settling.stop().await;
    trail.shutdown().await;
}

/// A change whose caller goes away in the middle of its apply (a client that hung up, a
/// request timeout) still finishes its own row: the store's write goes on, and the row says
/// what it did. Settlement is not running here, so nothing else could write that row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_whose_caller_goes_away_mid_apply_still_finishes_its_row() {
    let dir = tempfile::tempdir().unwrap();
    let held = Arc::new(PausedStore::new(Arc::new(MemoryStore::<Route>::default())));
    let store: Arc<RouteStore> = held.clone();
    let trail = open_trail(dir.path(), true);
    let routes = Routes::new(store.clone(), trail.clone());
    let created = routes
        .create(
            ctx("alice"),
            "t1".into(),
            new_route("r1", "https://example.test/a"),
        )
        .await;
    assert_eq!(created.unwrap().revision, 1);

    held.arm_write();
    let patch = RoutePatch {
        destination: Some("https://example.test/b".into()),
        ..RoutePatch::default()
    };
    let update = routes.update(ctx("bob"), "t1".into(), "r1".into(), patch, None);
    tokio::select! {
        _ = update => panic!("the store's write is held"),
        () = held.reached() => {}
    }
    // The caller's future is dropped here, with the write held.
    held.release();

    let written = async || route_rows(trail.store(), "r1").len() == 2;
    crate::support::eventually("the update's own row", Duration::from_secs(10), written).await;
    let rows = route_rows(trail.store(), "r1");
    let update = &rows[1];
    assert_eq!(update.action, "route.update");
    assert_eq!(update.actor, "bob");
    assert_eq!(update.result, RowResult::Ok);
    assert_eq!(update.revision, Some(2));
    assert!(ankusa::audit::pending_rows(trail.store())
        .unwrap()
        .is_empty());
    let stored = store.get("t1", "r1").await.unwrap().into_subject().unwrap();
    assert_eq!(stored.destination, "https://example.test/b");
    assert_eq!(stored.revision, 2);
}

/// An operator's change of a route while settlement is between reading it and settling its
/// pending row waits for that row: the rows (and the events a replica applies in seq order)
/// end with the operator's state, which the store holds. Settled after the change, the row
/// would have put the older state it read last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_waits_for_the_settlement_of_its_subject_in_progress() {
    let dir = tempfile::tempdir().unwrap();
    let slow = Arc::new(PausedStore::new(Arc::new(MemoryStore::<Route>::default())));
    let store: Arc<RouteStore> = slow.clone();
    stopped_with_pending_on(dir.path(), store.clone()).await;

    slow.arm();
    let trail = open_trail(dir.path(), true);
    let settling = settling(
        &trail,
        store.clone(),
        Duration::from_millis(100),
        Duration::from_secs(5),
    );
    slow.reached().await;
    // Settlement has read r1 and holds it; its row waits 300 ms, the change meanwhile.
    let release = tokio::spawn({
        let slow = slow.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            slow.release();
        }
    });
    let patch = RoutePatch {
        destination: Some("https://example.test/c".into()),
        ..RoutePatch::default()
    };
    let changed = settling
        .routes
        .update(ctx("bob"), "t1".into(), "r1".into(), patch, None)
        .await
        .unwrap();
    assert_eq!(changed.revision, 3);
    release.await.unwrap();
    wait_settled(trail.store(), Duration::from_secs(10)).await;

    let rows = route_rows(trail.store(), "r1");
    let order: Vec<(RowResult, Option<u64>, &str)> = rows
        .iter()
        .map(|r| (r.result, r.revision, r.actor.as_str()))
        .collect();
    assert_eq!(
        order,
        vec![
            (RowResult::Ok, Some(1), "alice"),
            (RowResult::Ok, Some(2), "alice"),
            (RowResult::Ok, Some(3), "bob"),
        ]
    );
    let last = entity(trail.store(), rows[2].seq).expect("entity");
    assert_eq!(last["destination"], "https://example.test/c");
    settling.stop().await;
    trail.shutdown().await;
}

/// The node itself (config, boot, settlement task) settles what a crash left, while it
/// serves: the row shows up through the audit API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_booting_node_settles_what_the_last_run_left() {
    use crate::support::node::{config, AUDITOR};

    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    stopped_with_pending(&data, &redis.url()).await;
    let url = redis.url();
    let config = config(&data, |v| {
        v["routes"]["store"] = json!("redis");
        v["routes"]["redis_url"] = json!(url);
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let node = tokio::spawn(ankusa::node::serve(config, listener, async {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    let settled = async || {
        let reply = client
            .get(format!("{base}/admin/v1/audit?resource=routes/"))
            .bearer_auth(AUDITOR)
            .send()
            .await
            .ok()?;
        let page: serde_json::Value = reply.json().await.unwrap_or_default();
        let two = page["rows"].as_array().is_some_and(|r| r.len() == 2);
        two.then(|| page["rows"].clone())
    };
    let bound = Duration::from_secs(15);
    let rows = crate::support::eventually("the two route rows, settled", bound, settled).await;
    assert_eq!(rows[1]["action"], "route.update");
    assert_eq!(rows[1]["result"], "ok");
    assert_eq!(rows[1]["publish"], true);
    let _ = stop.send(());
    node.await.unwrap().unwrap();
}

/// A write whose answer never came (its connection closed on the node's side) lands in Redis
/// after settlement read the route back and recorded `failed`: the change is fenced before
/// that read, so the late script is refused, and the row stays true. (A proxy holds the
/// script's bytes and delivers them late on the connection the node gave up.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_lands_after_its_settlement_is_refused() {
    let redis = RedisServer::start();
    let proxy = crate::support::proxy::Proxy::start(redis.port).await;
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail(dir.path(), true);
    let settling = settling(
        &trail,
        redis_store(&proxy.redis_url()),
        Duration::from_millis(100),
        Duration::from_secs(10),
    );
    let routes = settling.routes.clone();
    let create = new_route("r1", "https://example.test/a");
    routes
        .create(ctx("alice"), "t1".into(), create)
        .await
        .unwrap();

    // The update's script is held on its way; the node sees its connection close.
    proxy.hold_next(b"EVALSHA");
    let patch = RoutePatch {
        destination: Some("https://example.test/b".into()),
        ..RoutePatch::default()
    };
    let update = routes.update(ctx("alice"), "t1".into(), "r1".into(), patch, None);
    assert!(update.await.is_err(), "no answer from the store");
    assert_eq!(proxy.withheld(), 1);
    wait_settled(trail.store(), Duration::from_secs(15)).await;
    let rows = route_rows(trail.store(), "r1");
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].action, "route.update");
    assert_eq!(rows[1].result, RowResult::Failed, "read back as it was");

    // Now the script arrives, late: it must not change what the row says did not happen.
    proxy.release().await;
    let direct = redis_store(&redis.url());
    let found = direct
        .get("t1", "r1")
        .await
        .unwrap()
        .into_subject()
        .unwrap();
    assert_eq!(found.destination, "https://example.test/a");
    assert_eq!(found.revision, 1);
    settling.stop().await;
    trail.shutdown().await;
}
