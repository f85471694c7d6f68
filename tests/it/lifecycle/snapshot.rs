//! Snapshots over real HTTP and a real file sink: an operator's snapshot publishes every
//! route and source between its two markers, each at its version; a memory route store that
//! starts again empty publishes an empty routes snapshot whose floor is above every route
//! version the last run published, so a consumer following the rule ends with no routes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::api::lifecycle::{create_source, read_until};
use crate::support::eventually;
use crate::support::node::*;
use crate::support::publisher::{read_events, seq_of};
use crate::support::schemas;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const SNAPSHOT: &str = "/admin/v1/lifecycle/snapshot";

/// A node that publishes to a file sink in its data dir.
pub(crate) fn with_file_sink(v: &mut Value) {
    let path = v["node"]["data_dir"].as_str().unwrap().to_owned() + "/events.jsonl";
    v["lifecycle"]["sinks"] = json!(["file"]);
    v["lifecycle"]["sink"]["file"]["path"] = json!(path);
}

pub(crate) fn events_path(node: &TestNode) -> PathBuf {
    node.data_dir().join("events.jsonl")
}

pub(crate) async fn create_route(node: &TestNode, tenant: &str, id: &str) {
    let body = json!({"id": id, "source": "s1", "destination": "https://example.test/x"});
    let path = format!("/admin/v1/tenants/{tenant}/routes");
    let r = node.call(Method::POST, &path, ADMIN, Some(body)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
}

/// The events of the file sink once `check` holds of them, each held to its schema.
pub(crate) async fn events_until(path: &Path, check: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let read = async || {
        let events = read_events(path);
        check(&events).then_some(events)
    };
    let what = format!("the expected events in {}", path.display());
    let events = eventually(&what, Duration::from_secs(30), read).await;
    schemas::check_all(&events);
    events
}

/// The `route.store_loss` rows of `node`, once there is one.
pub(crate) async fn store_losses(node: &TestNode) -> Vec<Value> {
    let rows = async || {
        let lost: Vec<Value> = node
            .rows()
            .await
            .into_iter()
            .filter(|r| r["action"] == "route.store_loss")
            .collect();
        (!lost.is_empty()).then_some(lost)
    };
    eventually("the loss's row", Duration::from_secs(10), rows).await
}

pub(crate) fn of_type<'a>(events: &'a [Value], ty: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == ty).collect()
}

pub(crate) fn version(e: &Value) -> u64 {
    e["subjectversion"].as_str().unwrap().parse().unwrap()
}

/// What a consumer that follows the rule (`ankusa::replica`) holds after `events`, as
/// `(partitionkey, entity)`.
pub(crate) fn present(events: &[Value]) -> BTreeMap<String, Value> {
    let mut replica = ankusa::replica::Replica::default();
    for e in events {
        let event: cloudevents::Event = serde_json::from_value(e.clone()).expect("a CloudEvent");
        replica
            .apply_event(&event)
            .expect("an event of the contract");
    }
    replica
        .present()
        .map(|(_, key, entry)| (key.to_owned(), entry.entity.clone().unwrap()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_snapshot_publishes_every_subject_between_its_markers() {
    let node = TestNode::start_with(with_file_sink).await;
    for (tenant, id) in [("t1", "r1"), ("t1", "r2"), ("t2", "r3")] {
        create_route(&node, tenant, id).await;
    }
    let gone = node
        .call(
            Method::DELETE,
            "/admin/v1/tenants/t1/routes/r2",
            ADMIN,
            None,
        )
        .await;
    assert_eq!(gone.status, StatusCode::NO_CONTENT, "{}", gone.text);
    for id in ["s1", "s2"] {
        create_source(&node, id).await;
    }
    let bad = node
        .call(
            Method::POST,
            SNAPSHOT,
            ADMIN,
            Some(json!({"kinds": ["gadget"]})),
        )
        .await;
    assert_error(&bad, 422, "invalid_input");
    let null = node
        .call(Method::POST, SNAPSHOT, ADMIN, Some(json!({"kinds": null})))
        .await;
    assert_error(&null, 422, "invalid_input");
    let reader = node.call(Method::POST, SNAPSHOT, READER, None).await;
    assert_eq!(reader.status, StatusCode::FORBIDDEN);

    let asked = node.call(Method::POST, SNAPSHOT, ADMIN, None).await;
    assert_eq!(asked.status, StatusCode::ACCEPTED, "{}", asked.text);
    let id = asked.json()["snapshot"]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        asked.json()["snapshot"]["kinds"],
        json!(["route", "source"])
    );
    assert_eq!(asked.json()["snapshot"]["reason"], "request");
    let status = read_until(&node, SNAPSHOT, |s| s["last"]["state"] == "finished").await;
    assert_eq!(status["last"]["id"], id.as_str());
    assert_eq!(status["last"]["items"], 4);
    assert_eq!(status["running"], Value::Null);

    let path = events_path(&node);
    let events = events_until(&path, |e| {
        !of_type(e, "io.ankusa.snapshot.finished").is_empty()
    })
    .await;
    let source = events[0]["source"].as_str().unwrap().to_owned();
    let started = of_type(&events, "io.ankusa.snapshot.started");
    let finished = of_type(&events, "io.ankusa.snapshot.finished");
    assert_eq!((started.len(), finished.len()), (1, 1));
    let (started, finished) = (started[0], finished[0]);
    // Keys of their own: a compacted topic keeps both markers.
    assert_eq!(started["partitionkey"], format!("snapshots/{id}/start"));
    assert_eq!(finished["partitionkey"], format!("snapshots/{id}/finish"));
    assert_eq!(started["snapshot"], id.as_str());
    assert_eq!(finished["data"]["entity"], json!({"id": id, "count": 4}));
    let stores = started["data"]["entity"]["stores"].as_array().unwrap();
    let kinds: Vec<(&str, &str)> = stores
        .iter()
        .map(|s| (s["kind"].as_str().unwrap(), s["store"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [("route", source.as_str()), ("source", source.as_str())]
    );
    let floors: Vec<u64> = stores
        .iter()
        .map(|s| s["floor"].as_str().unwrap().parse().unwrap())
        .collect();

    let items: Vec<&Value> = events
        .iter()
        .filter(|e| {
            e["snapshot"] == id.as_str()
                && e["type"] != started["type"]
                && e["type"] != finished["type"]
        })
        .collect();
    let keys: Vec<(&str, &str)> = items
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap(),
                e["partitionkey"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        [
            ("io.ankusa.route.refreshed", "t1/routes/r1"),
            ("io.ankusa.route.refreshed", "t2/routes/r3"),
            ("io.ankusa.source.refreshed", "t1/sources/s1"),
            ("io.ankusa.source.refreshed", "t1/sources/s2"),
        ]
    );
    for item in &items {
        assert!(seq_of(started) < seq_of(item) && seq_of(item) < seq_of(finished));
        let key = item["partitionkey"].as_str().unwrap();
        let created = events
            .iter()
            .find(|e| e["partitionkey"] == key && e["type"].as_str().unwrap().ends_with(".created"))
            .unwrap();
        assert_eq!(item["data"]["entity"], created["data"]["entity"], "{key}");
        if key.contains("/routes/") {
            // A route's item is at the version its store keeps: its create's.
            assert_eq!(version(item), version(created));
            assert!(version(item) <= floors[0]);
        } else {
            // A local source's item is a row of its own, above the floor.
            assert!(version(item) > floors[1] && version(created) <= floors[1]);
        }
    }
    // A consumer that follows the rule holds exactly the node's subjects.
    let held: Vec<String> = present(&events).into_keys().collect();
    assert_eq!(
        held,
        [
            "t1/routes/r1",
            "t1/sources/s1",
            "t1/sources/s2",
            "t2/routes/r3"
        ]
    );
    // One audit row for the request; the snapshot's own rows are the system's.
    let rows = node.rows().await;
    let request: Vec<&Value> = rows
        .iter()
        .filter(|r| r["action"] == "snapshot.request")
        .collect();
    assert_eq!(request.len(), 1);
    assert_eq!(request[0]["actor"], "alice");
    assert_eq!(request[0]["resource"], format!("snapshots/{id}"));
    assert_eq!(request[0]["detail"], json!({"kinds": ["route", "source"]}));
    assert_eq!(
        request[0]["seq"].as_u64(),
        asked.seq(),
        "X-Audit-Seq names it"
    );
    let marker = rows
        .iter()
        .find(|r| r["action"] == "snapshot.start")
        .unwrap();
    assert_eq!(marker["actor"], "system");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_route_store_started_again_empties_every_replica() {
    let node = TestNode::start_with(with_file_sink).await;
    for id in ["r1", "r2"] {
        create_route(&node, "t1", id).await;
    }
    let path = events_path(&node);
    let before = events_until(&path, |e| e.len() >= 2).await;
    assert_eq!(present(&before).len(), 2);
    let last_version = before.iter().map(version).max().unwrap();
    let dir = node.stop().await;

    let node = TestNode::start_on(dir, with_file_sink).await;
    let events = events_until(&path, |e| {
        !of_type(e, "io.ankusa.snapshot.finished").is_empty()
    })
    .await;
    let started = of_type(&events, "io.ankusa.snapshot.started");
    let stores = &started[0]["data"]["entity"]["stores"];
    assert_eq!(stores.as_array().unwrap().len(), 1, "routes only");
    assert_eq!(stores[0]["kind"], "route");
    let floor: u64 = stores[0]["floor"].as_str().unwrap().parse().unwrap();
    assert!(floor >= last_version, "{floor} < {last_version}");
    let finished = of_type(&events, "io.ankusa.snapshot.finished");
    assert_eq!(finished[0]["data"]["entity"]["count"], 0);
    assert_eq!(present(&events), BTreeMap::new(), "no route is left");
    let status = node.call(Method::GET, SNAPSHOT, READER, None).await.json();
    assert_eq!(status["last"]["reason"], "memory_store");
    // A route created now is above the floor and stays. (Events published before the stop
    // may come again: the rule makes a redelivery harmless.)
    create_route(&node, "t1", "r1").await;
    let events = events_until(&path, |e| {
        let created = e.iter().filter(|e| e["type"] == "io.ankusa.route.created");
        created
            .map(|e| &e["id"])
            .collect::<std::collections::HashSet<_>>()
            .len()
            == 3
    })
    .await;
    assert_eq!(
        present(&events).into_keys().collect::<Vec<_>>(),
        ["t1/routes/r1"]
    );
    node.stop().await;
}

/// A node restored from a backup takes a snapshot of every kind: a consumer that followed the
/// lost life (a source created and one changed after the backup) and then the restored node
/// ends with the backup's sources, at versions the lost life never issued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_node_snapshots_and_replicas_forget_the_lost_life() {
    let backups = tempfile::tempdir().unwrap();
    let backup_dir = backups.path().join("b");
    let events = backups.path().join("events.jsonl");
    let sinks = |v: &mut Value| {
        v["lifecycle"]["sinks"] = json!(["file"]);
        v["lifecycle"]["sink"]["file"]["path"] = json!(events);
        v["node"]["backup_dir"] = json!(backup_dir);
    };
    let node = TestNode::start_with(sinks).await;
    for id in ["s1", "s2"] {
        create_source(&node, id).await;
    }
    let made = node
        .call(Method::POST, "/admin/v1/backups", ADMIN, None)
        .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.text);
    // The lost life: s3 created, s1 changed, s2 deleted, all published.
    create_source(&node, "s3").await;
    let patch = json!({"config": {"lost": true}});
    let r = node
        .call(
            Method::PATCH,
            "/admin/v1/tenants/t1/sources/s1",
            ADMIN,
            Some(patch),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = node
        .call(
            Method::DELETE,
            "/admin/v1/tenants/t1/sources/s2",
            ADMIN,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let lost = events_until(&events, |e| e.len() >= 5).await;
    let versioned = lost.iter().filter(|e| e.get("subjectversion").is_some());
    assert_eq!(versioned.count(), 5);
    let dir = node.stop().await;

    let data = dir.path().join("data");
    let restored = crate::restore::backup_cli::ankusa(&[
        "backup",
        "restore",
        "--from",
        backup_dir.to_str().unwrap(),
        "--store",
        data.to_str().unwrap(),
        "--force",
    ]);
    crate::restore::backup_cli::ok(&restored);
    let node = TestNode::start_on(dir, sinks).await;
    let all = events_until(&events, |e| {
        !of_type(e, "io.ankusa.snapshot.finished").is_empty()
    })
    .await;
    let finished = of_type(&all, "io.ankusa.snapshot.finished");
    assert_eq!(finished[0]["data"]["entity"]["count"], 2);
    let held = present(&all);
    assert_eq!(
        held.keys().collect::<Vec<_>>(),
        ["t1/sources/s1", "t1/sources/s2"]
    );
    // What the replica holds is what the node's API lists.
    let listed = node
        .call(Method::GET, "/admin/v1/tenants/t1/sources", READER, None)
        .await
        .json();
    let listed: BTreeMap<String, Value> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                format!("t1/sources/{}", s["id"].as_str().unwrap()),
                s.clone(),
            )
        })
        .collect();
    assert_eq!(held, listed);
    node.stop().await;
}

/// A node with a file sink and its routes in the Redis at `url`, checking it every 100 ms.
async fn on_redis(url: &str) -> TestNode {
    TestNode::start_with(|v| {
        with_file_sink(v);
        v["routes"]["store"] = json!("redis");
        v["routes"]["redis_url"] = json!(url);
        v["settlement"]["interval"] = json!("100ms");
    })
    .await
}

/// Redis restarted empty under a node (routes there): the node notices at its next change
/// (the version counter below what it saw), writes one `route.store_loss` row, answers
/// `/readyz` 503 `store_lost` until a snapshot of routes has finished, and that snapshot's
/// floor is above every version published before, so a consumer following the rule drops the
/// route Redis lost and keeps the one made after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_lost_its_routes_is_recorded_and_snapshotted() {
    let redis = crate::support::redis::RedisServer::start();
    let url = redis.url();
    let node = on_redis(&url).await;
    create_route(&node, "t1", "lost").await;
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    create_route(&node, "t1", "after").await;

    let lost = store_losses(&node).await;
    assert_eq!(lost.len(), 1, "one row per loss: {lost:?}");
    assert_eq!(lost[0]["actor"], "system");
    assert_eq!(lost[0]["resource"], "stores/route");
    assert!(lost[0]["detail"]["seen"].as_u64() > lost[0]["detail"]["counter"].as_u64());
    let path = events_path(&node);
    let events = events_until(&path, |e| {
        !of_type(e, "io.ankusa.snapshot.finished").is_empty()
    })
    .await;
    let ready = async || {
        let r = node.send(node.req(Method::GET, "/readyz", None)).await;
        (r.status == StatusCode::OK).then_some(())
    };
    eventually(
        "ready again once snapshotted",
        Duration::from_secs(10),
        ready,
    )
    .await;
    // A consumer that follows the rule holds the route made after the loss, not the lost one.
    let held = present(&events);
    let keys: Vec<&str> = held.keys().map(String::as_str).collect();
    assert_eq!(keys, ["t1/routes/after"], "{held:?}");
    node.stop().await;
}

/// A Redis that lost the last changes of a route (a failover that lost the tail of the
/// writes, here its keys put back as they were before the change) still holds the route, at
/// a version below the lost change's, which consumers applied. The loss's snapshot carries
/// its items at its floor, above every version published, so a consumer by the rule ends
/// with what the store holds (without it, the lost change stays in every replica).
#[tokio::test]
async fn a_redis_that_lost_a_routes_last_change_is_snapshotted_above_it() {
    let redis = crate::support::redis::RedisServer::start();
    let url = redis.url();
    let node = on_redis(&url).await;
    create_route(&node, "t1", "r").await;
    // What a replica that lagged behind the next change holds.
    let (mut conn, keys) = crate::support::redis::keys(&url).await;
    let mut before = Vec::new();
    for key in keys {
        let dump: Vec<u8> = redis::cmd("DUMP")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        before.push((key, dump));
    }
    let patch = json!({"destination": "https://lost.test/"});
    let r = node
        .call(
            Method::PATCH,
            "/admin/v1/tenants/t1/routes/r",
            ADMIN,
            Some(patch),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let path = events_path(&node);
    events_until(&path, |e| !of_type(e, "io.ankusa.route.updated").is_empty()).await;
    for (key, dump) in &before {
        let () = redis::cmd("RESTORE")
            .arg(key)
            .arg(0)
            .arg(dump.as_slice())
            .arg("REPLACE")
            .query_async(&mut conn)
            .await
            .unwrap();
    }

    let lost = store_losses(&node).await;
    assert_eq!(lost.len(), 1, "one row per loss: {lost:?}");
    let events = events_until(&path, |e| {
        !of_type(e, "io.ankusa.snapshot.finished").is_empty()
    })
    .await;
    let updated = of_type(&events, "io.ankusa.route.updated");
    let items: Vec<&Value> = of_type(&events, "io.ankusa.route.refreshed")
        .into_iter()
        .filter(|e| e["snapshot"].is_string())
        .collect();
    assert_eq!(items.len(), 1, "{items:?}");
    assert!(
        version(items[0]) > version(updated[0]),
        "{items:?} {updated:?}"
    );
    let api = node
        .call(Method::GET, "/admin/v1/tenants/t1/routes/r", ADMIN, None)
        .await;
    let api: Value = serde_json::from_str(&api.text).unwrap();
    assert_eq!(api["destination"], "https://example.test/x");
    // A consumer that follows the rule holds what the store holds, not the lost change.
    let held = present(&events);
    assert_eq!(
        held["t1/routes/r"]["destination"], "https://example.test/x",
        "{held:?}"
    );
    node.stop().await;
}
