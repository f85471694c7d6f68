//! Restores and the subjects kept outside the store: a restore rolls the trail back, not the
//! route store, so the first boot after it publishes a state refresh for every route whose
//! present state the restored trail does not describe (`subjects::remote::refresh`).
//!
//! The consumer here (`replica`) is the one a downstream system would write: it dedupes by
//! event id, orders by (incarnation, seq), forgets on `instance.restored` what the lost store
//! did after the restored seq, and applies `route.refreshed` as "set the state" (or "delete
//! it", when the entity is null). It must rebuild exactly the routes the store holds.

use crate::support::eventually;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::support::publisher::{consumer_order, publish_all, read_events};
use crate::support::redis::RedisServer;
use crate::support::trail::{all_rows, ctx, open_trail_with_sinks};
use ankusa::audit::{Clock as _, CommitError, Row, SettleOptions, SystemClock, Trail};
use ankusa::store::backup::BackupDir;
use ankusa::store::restore::{restore, RestoreRequest};
use ankusa::store::{keys, keys::meta, Cf, Store};
use ankusa::subjects::remote::memory::MemoryStore;
use ankusa::subjects::remote::redis::RedisStore;
use ankusa::subjects::remote::refresh::{self, Counts, RefreshOptions, Refreshable, Report};
use ankusa::subjects::routes::{NewRoute, Route, RoutePatch, RouteStore, Routes};
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

// ---- a node: the trail, the routes, settlement and the refresh, wired as `node.rs` does ----

pub(crate) struct Node {
    pub(crate) trail: Trail,
    pub(crate) routes: Routes,
    stop: CancellationToken,
    settlement: Option<JoinHandle<()>>,
    pub(crate) refreshing: Option<JoinHandle<Option<Report>>>,
}

impl Node {
    pub(crate) fn boot(path: &Path, store: Arc<RouteStore>, options: RefreshOptions) -> Node {
        let trail = open_trail_with_sinks(path, &["file"]);
        let routes = Routes::new(store, trail.clone());
        let stop = CancellationToken::new();
        let settle = SettleOptions {
            interval: Duration::from_millis(50),
            window: Duration::from_secs(5),
        };
        let settlement =
            trail.start_settlement(routes.remote().reconcilers(), settle, stop.clone());
        let kinds: Vec<Arc<dyn Refreshable>> = vec![Arc::new(routes.remote().clone())];
        let refreshing = refresh::start(&trail, kinds, options, None, stop.clone());
        Node {
            trail,
            routes,
            stop,
            settlement,
            refreshing,
        }
    }

    /// Wait for the refresh to finish and return its report.
    pub(crate) async fn refreshed(&mut self) -> Report {
        let task = self.refreshing.take().expect("a refresh was started");
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("the refresh finishes")
            .expect("the refresh task")
            .expect("the refresh was not stopped")
    }

    pub(crate) async fn stop(mut self) {
        self.stop.cancel();
        if let Some(s) = self.settlement.take() {
            s.await.unwrap();
        }
        if let Some(r) = self.refreshing.take() {
            let _ = r.await;
        }
        self.trail.shutdown().await;
    }
}

pub(crate) fn options(retry: Duration) -> RefreshOptions {
    RefreshOptions::new(retry)
}

pub(crate) fn redis_store(url: &str) -> Arc<RouteStore> {
    Arc::new(RedisStore::<Route>::new(url, "ankusa:", Duration::from_secs(2)).unwrap())
}

// ---- route changes ----

pub(crate) async fn create(node: &Node, tenant: &str, id: &str, destination: &str) -> u64 {
    let input = NewRoute {
        id: id.into(),
        source: "s1".into(),
        destination: destination.into(),
        filter: Default::default(),
        enabled: true,
    };
    let out = node.routes.create(ctx("ops"), tenant.into(), input).await;
    out.unwrap().seq.expect("a row")
}

pub(crate) async fn update(node: &Node, tenant: &str, id: &str, patch: RoutePatch) -> u64 {
    let out = node
        .routes
        .update(ctx("ops"), tenant.into(), id.into(), patch, None)
        .await;
    out.unwrap().seq.expect("a row")
}

pub(crate) fn destination(d: &str) -> RoutePatch {
    RoutePatch {
        destination: Some(d.into()),
        ..RoutePatch::default()
    }
}

async fn delete(node: &Node, tenant: &str, id: &str) -> u64 {
    let out = node
        .routes
        .delete(ctx("ops"), tenant.into(), id.into(), None)
        .await;
    out.unwrap().seq.expect("a row")
}

// ---- backups and restores ----

pub(crate) fn back_up(trail: &Trail, backups: &Path) -> u64 {
    let info = BackupDir::create(backups)
        .unwrap()
        .back_up(trail.store(), SystemClock.now_ms())
        .unwrap();
    info.audit_seq.expect("the backup's seq")
}

pub(crate) fn restore_into(backups: &Path, target: &Path) {
    let req = RestoreRequest {
        from: backups,
        id: None,
        target,
        force: true,
        carry: &[],
    };
    restore(&req, SystemClock.now_ms(), &|_| {}).expect("restore");
}

// ---- what a consumer rebuilds, and what the store holds ----

/// The routes a downstream consumer rebuilds from `events`, by `<tenant>/routes/<id>`.
/// `refreshes`: whether it applies `route.refreshed` (a consumer that ignores them is the
/// control: it must be wrong after a restore that lost route changes).
pub(crate) fn replica(events: &[Value], refreshes: bool) -> BTreeMap<String, Value> {
    let applied = consumer_order(events);
    let mut state = BTreeMap::new();
    for e in applied {
        let key = e["partitionkey"].as_str().unwrap().to_owned();
        let entity = e["data"]["entity"].clone();
        match e["type"].as_str().unwrap() {
            "io.ankusa.route.created" | "io.ankusa.route.updated" => {
                state.insert(key, entity);
            }
            "io.ankusa.route.deleted" => {
                state.remove(&key);
            }
            "io.ankusa.route.refreshed" if refreshes => {
                if entity.is_null() {
                    state.remove(&key);
                } else {
                    state.insert(key, entity);
                }
            }
            _ => {}
        }
    }
    state
}

/// Every route the store holds, as its events carry it (redacted), by
/// `<tenant>/routes/<id>`.
pub(crate) async fn routes_in_store(routes: &Routes) -> BTreeMap<String, Value> {
    let mut state = BTreeMap::new();
    for tenant in routes.store().tenants().await.unwrap() {
        let mut after: Option<String> = None;
        loop {
            let page = routes
                .remote()
                .list(&tenant, after.as_deref(), 2)
                .await
                .unwrap();
            for item in page.items {
                let view = item.into_value();
                let id = view["id"].as_str().unwrap().to_owned();
                state.insert(format!("{tenant}/routes/{id}"), view);
            }
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
    }
    state
}

pub(crate) fn refresh_rows(store: &Store) -> Vec<Row> {
    all_rows(store)
        .into_iter()
        .filter(|r| r.action == "route.refresh")
        .collect()
}

pub(crate) fn marker(store: &Store) -> bool {
    store.meta(meta::REFRESH_PENDING).unwrap().is_some()
}

fn entity(store: &Store, seq: u64) -> Value {
    let v = store.get(Cf::Audit, &keys::outbox_key(seq)).unwrap();
    serde_json::from_slice(&v.expect("an outbox entity")).unwrap()
}

// ---- the tests ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restore_a_consumer_rebuilds_exactly_the_routes_in_redis() {
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
    assert!(node.refreshing.is_none(), "a new store refreshes nothing");
    for i in 0..5 {
        create(&node, "t1", &format!("r{i}"), "https://a.test/").await;
    }
    create(&node, "t2", "r5", "https://a.test/").await;
    update(&node, "t1", "r0", destination("https://b.test/")).await;
    // N = 8 events, published; the backup holds them.
    assert_eq!(delete(&node, "t1", "r4").await, 8);
    publish_all(&node.trail, &events).await;
    assert_eq!(back_up(&node.trail, &backups), 8);

    // M = 6 more route changes, published, then lost with the store.
    update(&node, "t1", "r1", destination("https://lost.test/")).await;
    delete(&node, "t1", "r2").await;
    create(&node, "t1", "r6", "https://lost.test/").await;
    let disable = RoutePatch {
        enabled: Some(false),
        ..RoutePatch::default()
    };
    update(&node, "t2", "r5", disable).await;
    create(&node, "t2", "r9", "https://lost.test/").await;
    assert_eq!(delete(&node, "t2", "r9").await, 14);
    publish_all(&node.trail, &events).await;
    let published = read_events(&events);
    assert_eq!(published.len(), 14);
    let lost: HashSet<String> = published[8..]
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    let old_ids: HashSet<String> = published
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    node.stop().await;

    restore_into(&backups, &path);
    let mut node = Node::boot(
        &path,
        redis_store(&redis.url()),
        options(Duration::from_millis(100)),
    );
    let report = node.refreshed().await;
    // In the store: r0 r1 r3 (t1), r5 r6 (t2 and t1); only the trail knows r2 (exists) and
    // r4 (deleted). Differ: r1, r5 (updated), r6 (created), r2 (deleted) after the backup.
    let counts = Counts {
        checked: 7,
        refreshed: 4,
    };
    assert_eq!(report.kinds, vec![("route", counts)]);
    assert!(!marker(node.trail.store()), "the marker is gone once done");
    let rows = refresh_rows(node.trail.store());
    let resources: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r.tenant.as_deref().unwrap(), r.resource.as_str()))
        .collect();
    let mut sorted = resources.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            ("t1", "routes/r1"),
            ("t1", "routes/r2"),
            ("t1", "routes/r6"),
            ("t2", "routes/r5")
        ]
    );
    for row in &rows {
        assert!(row.refresh && row.publish, "{row:?}");
        assert_eq!(row.actor, "system");
    }
    let gone = rows.iter().find(|r| r.resource == "routes/r2").unwrap();
    assert_eq!(entity(node.trail.store(), gone.seq), Value::Null);
    assert_eq!(gone.after_hash, None);

    // K = 4 changes in the new incarnation.
    update(&node, "t1", "r1", destination("https://new.test/")).await;
    delete(&node, "t1", "r6").await;
    create(&node, "t1", "r7", "https://new.test/").await;
    update(&node, "t1", "r3", destination("https://new.test/")).await;
    publish_all(&node.trail, &events).await;

    let all = read_events(&events);
    let after = &all[published.len()..];
    assert_eq!(after[0]["type"], "io.ankusa.instance.restored");
    for e in after {
        let id = e["id"].as_str().unwrap();
        assert!(!old_ids.contains(id), "a new incarnation's id is new: {e}");
    }
    let refreshed: Vec<&Value> = after
        .iter()
        .filter(|e| e["type"] == "io.ankusa.route.refreshed")
        .collect();
    assert_eq!(refreshed.len(), 4);
    let in_store = routes_in_store(&node.routes).await;
    assert_eq!(in_store.len(), 5);
    assert_eq!(
        replica(&all, true),
        in_store,
        "the replica is the exact route state"
    );
    assert_ne!(
        replica(&all, false),
        in_store,
        "without the refresh events it would not be"
    );
    // And the lost events are not what it applied: ignoring them changes nothing.
    let without_lost: Vec<Value> = all
        .iter()
        .filter(|e| !lost.contains(e["id"].as_str().unwrap()))
        .cloned()
        .collect();
    assert_eq!(replica(&without_lost, true), in_store);
    node.stop().await;

    // The next boot has no refresh to do.
    let node = Node::boot(
        &path,
        redis_store(&redis.url()),
        options(Duration::from_millis(100)),
    );
    assert!(node.refreshing.is_none());
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_with_no_route_change_after_the_backup_writes_no_refresh_row() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (path, backups) = (dir.path().join("store"), dir.path().join("backups"));
    let node = Node::boot(
        &path,
        redis_store(&redis.url()),
        options(Duration::from_millis(100)),
    );
    for i in 0..3 {
        create(&node, "t1", &format!("r{i}"), "https://a.test/").await;
    }
    update(&node, "t1", "r0", destination("https://b.test/")).await;
    delete(&node, "t1", "r2").await;
    back_up(&node.trail, &backups);
    node.stop().await;

    restore_into(&backups, &path);
    let mut node = Node::boot(
        &path,
        redis_store(&redis.url()),
        options(Duration::from_millis(100)),
    );
    let report = node.refreshed().await;
    let counts = Counts {
        checked: 3,
        refreshed: 0,
    };
    assert_eq!(report.kinds, vec![("route", counts)]);
    assert!(refresh_rows(node.trail.store()).is_empty());
    assert!(!marker(node.trail.store()));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_route_store_comes_back_empty_so_every_route_the_trail_knew_is_refreshed_absent() {
    let dir = tempfile::tempdir().unwrap();
    let (path, events, backups) = (
        dir.path().join("store"),
        dir.path().join("events.jsonl"),
        dir.path().join("backups"),
    );
    let memory = || -> Arc<RouteStore> { Arc::new(MemoryStore::<Route>::default()) };
    let node = Node::boot(&path, memory(), options(Duration::from_millis(100)));
    for i in 0..3 {
        create(&node, "t1", &format!("r{i}"), "https://a.test/").await;
    }
    create(&node, "t2", "r0", "https://a.test/").await;
    delete(&node, "t1", "r2").await;
    publish_all(&node.trail, &events).await;
    back_up(&node.trail, &backups);
    node.stop().await;

    restore_into(&backups, &path);
    let mut node = Node::boot(&path, memory(), options(Duration::from_millis(100)));
    let report = node.refreshed().await;
    // t1/r0, t1/r1, t2/r0 existed: gone now. t1/r2 was deleted: nothing to say.
    let counts = Counts {
        checked: 4,
        refreshed: 3,
    };
    assert_eq!(report.kinds, vec![("route", counts)]);
    let rows = refresh_rows(node.trail.store());
    assert_eq!(rows.len(), 3);
    for row in &rows {
        assert_eq!(row.after_hash, None, "absent: {row:?}");
        assert!(row.before_hash.is_some(), "what the trail said: {row:?}");
        assert_eq!(entity(node.trail.store(), row.seq), Value::Null);
    }
    create(&node, "t1", "r5", "https://new.test/").await;
    publish_all(&node.trail, &events).await;
    let in_store = routes_in_store(&node.routes).await;
    assert_eq!(in_store.len(), 1);
    assert_eq!(replica(&read_events(&events), true), in_store);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_wait_for_the_refresh_which_retries_while_redis_is_down() {
    let mut redis = RedisServer::start();
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
    for id in ["r1", "r2"] {
        create(&node, "t1", id, "https://a.test/").await;
    }
    publish_all(&node.trail, &events).await;
    back_up(&node.trail, &backups);
    update(&node, "t1", "r2", destination("https://lost.test/")).await;
    publish_all(&node.trail, &events).await;
    node.stop().await;

    restore_into(&backups, &path);
    redis.stop();
    // Retried every second; a change waits up to 4 s for it.
    let slow = RefreshOptions {
        retry: Duration::from_secs(1),
        hold: Duration::from_secs(4),
        page: 100,
    };
    let mut node = Node::boot(&path, redis_store(&redis.url()), slow);
    let failures = || {
        ankusa::telemetry::render()
            .lines()
            .any(|l| l.starts_with("ankusa_remote_refresh_failures_total{kind=\"route\"}"))
    };
    let failed = async || failures();
    eventually("a failed refresh attempt", Duration::from_secs(30), failed).await;
    assert!(failures(), "the first attempt failed: Redis is down");
    assert!(!node.routes.remote().gate().is_open());
    // While Redis stays down every attempt fails: a change waits its 4 s, then is refused,
    // no row.
    let rows = all_rows(node.trail.store()).len();
    let held = node
        .routes
        .update(
            ctx("ops"),
            "t1".into(),
            "r1".into(),
            destination("https://x.test/"),
            None,
        )
        .await;
    assert!(
        matches!(held, Err(CommitError::StoreUnavailable)),
        "{held:?}"
    );
    assert_eq!(
        all_rows(node.trail.store()).len(),
        rows,
        "a held change writes no row"
    );
    redis.restart();
    // This one waits, and the refresh (tried again every second) opens the gate within its
    // wait: it lands after the refresh row of its route, never before.
    let seq = update(&node, "t1", "r2", destination("https://new.test/")).await;
    let report = node.refreshed().await;
    let counts = Counts {
        checked: 2,
        refreshed: 1,
    };
    assert_eq!(report.kinds, vec![("route", counts)]);
    let refresh = refresh_rows(node.trail.store());
    assert_eq!(refresh.len(), 1);
    assert_eq!(refresh[0].resource, "routes/r2");
    assert!(refresh[0].seq < seq, "the change follows the refresh row");
    publish_all(&node.trail, &events).await;
    assert_eq!(
        replica(&read_events(&events), true),
        routes_in_store(&node.routes).await
    );
    node.stop().await;
}

/// The same through a running node (`node::serve`), with sources in Redis too: it refreshes
/// both kinds after a restore, while serving, and takes their changes once done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_node_refreshes_its_redis_routes_and_sources_then_takes_their_changes() {
    use crate::support::node::{TestNode, ADMIN};
    use reqwest::{Method, StatusCode};
    use serde_json::json;

    let redis = RedisServer::start();
    let url = redis.url();
    let on_redis = |v: &mut Value| {
        v["routes"]["store"] = json!("redis");
        v["routes"]["redis_url"] = json!(url);
        v["sources"]["store"] = json!("redis");
        v["sources"]["redis_url"] = json!(url);
        v["settlement"]["interval"] = json!("100ms");
    };
    const ROUTES: &str = "/admin/v1/tenants/t1/routes";
    const SOURCES: &str = "/admin/v1/tenants/t1/sources";
    let source = |id: &str| {
        json!({"id": id, "kind": "webhook", "secret": "hunter2-sekrit",
               "config": {"url": "https://example.test/hook"}})
    };
    let route = |id: &str| json!({"id": id, "source": "s1", "destination": "https://a.test/"});
    let node = TestNode::start_with(on_redis).await;
    for id in ["r1", "r2"] {
        let r = node
            .call(Method::POST, ROUTES, ADMIN, Some(route(id)))
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        let r = node
            .call(Method::POST, SOURCES, ADMIN, Some(source(id)))
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    }
    let dir = node.stop().await;
    let (data, backups) = (dir.path().join("data"), dir.path().join("backups"));
    {
        let store = Store::open(&data).unwrap();
        let info = BackupDir::create(&backups)
            .unwrap()
            .back_up(&store, SystemClock.now_ms())
            .unwrap();
        assert_eq!(info.audit_seq, Some(4));
    }
    let node = TestNode::start_on(dir, on_redis).await;
    let patch = json!({"destination": "https://lost.test/"});
    let r = node
        .call(Method::PATCH, &format!("{ROUTES}/r1"), ADMIN, Some(patch))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = node
        .call(Method::DELETE, &format!("{ROUTES}/r2"), ADMIN, None)
        .await;
    assert!(r.status.is_success(), "{}", r.text);
    let r = node
        .call(Method::POST, ROUTES, ADMIN, Some(route("r3")))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let secret = json!({"secret": "hunter3-sekrit"});
    let r = node
        .call(Method::PATCH, &format!("{SOURCES}/r1"), ADMIN, Some(secret))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let dir = node.stop().await;

    restore_into(&dir.path().join("backups"), &dir.path().join("data"));
    let node = TestNode::start_on(dir, on_redis).await;
    let patch = json!({"destination": "https://new.test/"});
    let changed = node
        .call(Method::PATCH, &format!("{ROUTES}/r1"), ADMIN, Some(patch))
        .await;
    assert_eq!(changed.status, StatusCode::OK, "{}", changed.text);
    // Sources are refreshed after routes: their change waits for that.
    let secret = json!({"secret": "hunter4-sekrit"});
    let source_changed = node
        .call(Method::PATCH, &format!("{SOURCES}/r1"), ADMIN, Some(secret))
        .await;
    assert_eq!(
        source_changed.status,
        StatusCode::OK,
        "{}",
        source_changed.text
    );
    // Then the restore's snapshot of every kind; the marker goes once it is finished.
    let snapshot = crate::api::lifecycle::read_until(&node, "/admin/v1/lifecycle/snapshot", |s| {
        s["last"]["state"] == "finished"
    })
    .await;
    assert_eq!(snapshot["last"]["reason"], "restore");
    assert_eq!(snapshot["last"]["kinds"], json!(["route", "source"]));
    let rows = node.rows().await;
    let (items, rows): (Vec<Value>, Vec<Value>) =
        rows.into_iter().partition(|r| r.get("snapshot").is_some());
    let items: Vec<&str> = items
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(items.first(), Some(&"snapshot.start"));
    assert_eq!(items.last(), Some(&"snapshot.finish"));
    let refreshes: Vec<&Value> = rows
        .iter()
        .filter(|r| r["action"] == "route.refresh")
        .collect();
    let sources: Vec<&Value> = rows
        .iter()
        .filter(|r| r["action"] == "source.refresh")
        .collect();
    assert_eq!(sources.len(), 1, "only the source whose secret changed");
    assert_eq!(sources[0]["resource"], "sources/r1");
    assert_eq!(sources[0]["refresh"], true);
    assert!(sources[0]["seq"].as_u64() < source_changed.seq());
    let mut resources: Vec<&str> = refreshes
        .iter()
        .map(|r| r["resource"].as_str().unwrap())
        .collect();
    resources.sort();
    assert_eq!(resources, ["routes/r1", "routes/r2", "routes/r3"]);
    for r in &refreshes {
        assert_eq!(r["refresh"], true, "{r}");
        assert_eq!(r["actor"], "system", "{r}");
        assert!(
            r["seq"].as_u64() < changed.seq(),
            "the change follows the refresh"
        );
    }
    let dir = node.stop().await;
    let store = Store::open(&dir.path().join("data")).unwrap();
    assert!(!marker(&store), "done: the marker is gone");
}
