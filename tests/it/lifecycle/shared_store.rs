//! The shared store as a distributed engine, seen from a node's API, its trail and its events:
//! changes made in Redis around the fleet (the drift check), and a node started again on a
//! Redis that lost everything meanwhile (what the node kept of the store: its name, its floor).

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::snapshot::{
    create_route, events_path, events_until, of_type, present, store_losses, version,
    with_file_sink,
};
use crate::support::node::*;
use crate::support::redis::RedisServer;

const VERIFY: &str = "/admin/v1/stores/verify";

/// A node with routes in the Redis at `url`, events in a file, the drift check on demand only.
fn on_redis(url: String) -> impl FnOnce(&mut Value) {
    move |v: &mut Value| {
        with_file_sink(v);
        v["routes"]["store"] = json!("redis");
        v["routes"]["redis_url"] = json!(url);
        v["routes"]["verify_interval"] = json!("0s");
        v["settlement"]["interval"] = json!("100ms");
    }
}

async fn redis_conn(url: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

fn rows_of<'a>(rows: &'a [Value], action: &str) -> Vec<&'a Value> {
    rows.iter().filter(|r| r["action"] == action).collect()
}

/// Four routes changed in Redis by hand: r1's destination edited, r2's JSON broken, r3 made
/// from nothing, r4's hash deleted. The drift check finds all four; r1 and r3 are adopted at
/// versions above every earlier one and r4 is published gone, each with a `route.drift` row
/// and a `route.refresh` row (reason `drift`) whose event a replica takes; r2 cannot be
/// published and gets its drift row once. A second check finds only r2 again, and writes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_changed_in_redis_by_hand_are_recorded_and_published() {
    let redis = RedisServer::start();
    let node = TestNode::start_with(on_redis(redis.url())).await;
    for id in ["r1", "r2", "r4"] {
        create_route(&node, "t1", id).await;
    }
    let clean = node.call(Method::POST, VERIFY, ADMIN, None).await;
    assert_eq!(clean.status, StatusCode::OK, "{}", clean.text);
    let report = &clean.json()["kinds"][0];
    assert_eq!(
        (report["kind"].clone(), report["scanned"].clone()),
        (json!("route"), json!(3))
    );
    assert_eq!(report["drifted"], 0, "what the fleet wrote is not drift");

    let mut conn = redis_conn(&redis.url()).await;
    let key = |id: &str| format!("ankusa:route:{{t1}}:{id}");
    let json: String = redis::cmd("HGET")
        .arg(key("r1"))
        .arg("json")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut edited: Value = serde_json::from_str(&json).unwrap();
    edited["destination"] = json!("https://example.test/by-hand");
    let () = redis::cmd("HSET")
        .arg(key("r1"))
        .arg("json")
        .arg(edited.to_string())
        .query_async(&mut conn)
        .await
        .unwrap();
    let () = redis::cmd("HSET")
        .arg(key("r2"))
        .arg("json")
        .arg("{not json")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut made = edited.clone();
    made["id"] = json!("r3");
    made["revision"] = json!(1);
    let () = redis::cmd("HSET")
        .arg(key("r3"))
        .arg("rev")
        .arg(1)
        .arg("ver")
        .arg(7)
        .arg("json")
        .arg(made.to_string())
        .query_async(&mut conn)
        .await
        .unwrap();
    let () = redis::cmd("DEL")
        .arg(key("r4"))
        .query_async(&mut conn)
        .await
        .unwrap();

    let found = node.call(Method::POST, VERIFY, ADMIN, None).await;
    assert_eq!(found.status, StatusCode::OK, "{}", found.text);
    let report = &found.json()["kinds"][0];
    assert_eq!(
        (&report["scanned"], &report["drifted"], &report["published"]),
        (&json!(3), &json!(4), &json!(3)),
        "{report}"
    );
    let rows = node.rows().await;
    let mut drifts: Vec<(String, bool, bool)> = rows_of(&rows, "route.drift")
        .iter()
        .map(|r| {
            assert_eq!(r["actor"], "system");
            assert!(r["detail"]["store"].as_str().unwrap().starts_with("redis:"));
            // A gone subject has nothing to sign.
            let gone = r["detail"]["gone"] == true;
            assert_eq!(r["detail"]["found_mac"].is_null(), gone, "{r}");
            if !gone {
                assert_eq!(r["detail"]["found_mac"].as_str().unwrap().len(), 64);
            }
            let readable = r["detail"]["readable"].as_bool().unwrap();
            assert_eq!(readable, r["after_hash"].is_string(), "{r}");
            let signed = r["detail"]["expected_mac"].is_string();
            (r["resource"].as_str().unwrap().to_owned(), readable, signed)
        })
        .collect();
    drifts.sort();
    assert_eq!(
        drifts,
        [
            ("routes/r1".to_owned(), true, true),
            ("routes/r2".to_owned(), false, true),
            ("routes/r3".to_owned(), true, false),
            ("routes/r4".to_owned(), false, false),
        ]
    );
    let refreshed: Vec<&Value> = rows_of(&rows, "route.refresh");
    assert_eq!(refreshed.len(), 3, "{refreshed:?}");
    assert!(refreshed.iter().all(|r| r["detail"]["reason"] == "drift"));

    let events = events_until(&events_path(&node), |e| {
        of_type(e, "io.ankusa.route.refreshed").len() == 3
    })
    .await;
    let created = of_type(&events, "io.ankusa.route.created");
    let newest = created.iter().map(|e| version(e)).max().unwrap();
    for e in of_type(&events, "io.ankusa.route.refreshed") {
        assert!(
            version(e) > newest.max(7),
            "adopted above every version: {e}"
        );
    }
    // A replica holds what Redis holds for r1 and r3, r2 as the fleet last wrote it, and
    // not r4.
    let held = present(&events);
    assert!(!held.contains_key("t1/routes/r4"), "{held:?}");
    let gone = node
        .call(Method::GET, "/admin/v1/tenants/t1/routes/r4", READER, None)
        .await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    assert_eq!(
        held["t1/routes/r1"]["destination"],
        "https://example.test/by-hand"
    );
    assert_eq!(held["t1/routes/r3"]["id"], "r3");
    assert_eq!(
        held["t1/routes/r2"]["destination"],
        "https://example.test/x"
    );
    for id in ["r1", "r3"] {
        let got = node
            .call(
                Method::GET,
                &format!("/admin/v1/tenants/t1/routes/{id}"),
                READER,
                None,
            )
            .await;
        assert_eq!(
            got.json(),
            held[&format!("t1/routes/{id}")],
            "the API and the replica agree"
        );
    }

    let again = node.call(Method::POST, VERIFY, ADMIN, None).await;
    let report = &again.json()["kinds"][0];
    assert_eq!(
        (&report["drifted"], &report["published"]),
        (&json!(1), &json!(0)),
        "{report}"
    );
    let rows = node.rows().await;
    assert_eq!(
        rows_of(&rows, "route.drift").len(),
        4,
        "r2's drift is recorded once"
    );
    node.stop().await;
}

/// A node with another `fleet_secret` than the store's other nodes is refused at its
/// connection (its reads and writes would all look like drift), with an error that says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_another_fleet_secret_is_refused() {
    let redis = RedisServer::start();
    let first = TestNode::start_with(on_redis(redis.url())).await;
    create_route(&first, "t1", "r1").await;
    let url = redis.url();
    let other = TestNode::start_with(move |v| {
        on_redis(url)(v);
        v["routes"]["fleet_secret"] = json!("another secret");
    })
    .await;
    let r = other
        .call(Method::GET, "/admin/v1/tenants/t1/routes/r1", READER, None)
        .await;
    assert_error(&r, 503, "store_unavailable");
    let ok = first
        .call(Method::GET, "/admin/v1/tenants/t1/routes/r1", READER, None)
        .await;
    assert_eq!(ok.status, StatusCode::OK);
    other.stop().await;
    first.stop().await;
}

/// A node stopped, Redis emptied (a restart without persistence), the node started again:
/// it gives Redis the store's id back (events keep the store's name), notices the loss (one
/// `route.store_loss` row, found by the id gone, and a snapshot), and issues versions above
/// every one it published before, though they were far above Redis's clock: the floor it
/// kept in its own store is what holds them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_started_on_an_emptied_redis_keeps_the_name_and_the_versions() {
    let redis = RedisServer::start();
    let mut conn = redis_conn(&redis.url()).await;
    // Versions a year of microseconds ahead of the clock: only the floor can hold them.
    let ahead = 1_000_000u64 * 86_400 * 365;
    let now: (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let () = redis::cmd("SET")
        .arg("ankusa:route:version")
        .arg(now.0 * 1_000_000 + ahead)
        .query_async(&mut conn)
        .await
        .unwrap();
    let node = TestNode::start_with(on_redis(redis.url())).await;
    create_route(&node, "t1", "before").await;
    let before = events_until(&events_path(&node), |e| !e.is_empty()).await;
    let (v1, store) = (version(&before[0]), before[0]["subjectstore"].clone());
    // What the node knows of the store is kept at the latest as it stops.
    let dir = node.stop().await;
    {
        let data = ankusa::store::Store::open(&dir.path().join("data")).unwrap();
        let recalled = ankusa::subjects::remote::Recalled::read_store(&data, "route").unwrap();
        assert!(recalled.floor >= v1, "{recalled:?} below {v1}");
        assert_eq!(json!(recalled.store), store);
    }
    let () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();

    let url = redis.url();
    let node = TestNode::start_on(dir, on_redis(url)).await;
    create_route(&node, "t1", "after").await;
    let lost = store_losses(&node).await;
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(lost[0]["detail"]["store"], store);
    assert_eq!(
        lost[0]["detail"]["found"],
        "the store's id was gone: it restarted empty or was flushed"
    );
    let events = events_until(&events_path(&node), |e| {
        !of_type(e, "io.ankusa.snapshot.finished").is_empty()
            && of_type(e, "io.ankusa.route.created")
                .iter()
                .any(|c| c["partitionkey"].as_str().unwrap().ends_with("/after"))
    })
    .await;
    let after = of_type(&events, "io.ankusa.route.created")
        .into_iter()
        .find(|e| e["partitionkey"].as_str().unwrap().ends_with("/after"))
        .expect("the route made after");
    assert!(
        version(after) > v1,
        "a version above every one published before"
    );
    assert_eq!(after["subjectstore"], store, "the store keeps its name");
    let held = present(&events);
    let keys: Vec<&str> = held.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["t1/routes/after"],
        "the snapshot drops what Redis lost"
    );
    node.stop().await;
}

/// A Redis emptied while its nodes were stopped, and named again by a node that never knew
/// it: a node that knew it finds another id, records it as a loss (`route.store_loss`) and
/// snapshots routes under the name the store has now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_named_again_by_a_new_node_is_a_loss_to_the_nodes_that_knew_it() {
    let redis = RedisServer::start();
    let mut conn = redis_conn(&redis.url()).await;
    let knew = TestNode::start_with(on_redis(redis.url())).await;
    create_route(&knew, "t1", "before").await;
    let dir = knew.stop().await;
    let () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    let fresh = TestNode::start_with(on_redis(redis.url())).await;
    create_route(&fresh, "t1", "fresh").await;
    fresh.stop().await;

    let knew = TestNode::start_on(dir, on_redis(redis.url())).await;
    let lost = store_losses(&knew).await;
    let id: String = redis::cmd("GET")
        .arg("ankusa:store_id")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(lost[0]["detail"]["store"], format!("redis:{id}"));
    assert!(
        lost[0]["detail"]["found"]
            .as_str()
            .unwrap()
            .starts_with("the store's id is not the one this node knew"),
        "{lost:?}"
    );
    let events = events_until(&events_path(&knew), |e| {
        !of_type(e, "io.ankusa.snapshot.finished").is_empty()
    })
    .await;
    let started = of_type(&events, "io.ankusa.snapshot.started");
    assert_eq!(
        started[0]["data"]["entity"]["stores"][0]["store"],
        format!("redis:{id}")
    );
    knew.stop().await;
}

/// The drift check runs by itself every `verify_interval`: a route edited by hand gets its
/// drift row and its refreshed event with no one asking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drift_check_runs_every_verify_interval() {
    let redis = RedisServer::start();
    let url = redis.url();
    let node = TestNode::start_with(move |v| {
        on_redis(url)(v);
        v["routes"]["verify_interval"] = json!("200ms");
    })
    .await;
    create_route(&node, "t1", "r1").await;
    let mut conn = redis_conn(&redis.url()).await;
    let key = "ankusa:route:{t1}:r1";
    let json: String = redis::cmd("HGET")
        .arg(key)
        .arg("json")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut edited: Value = serde_json::from_str(&json).unwrap();
    edited["enabled"] = json!(false);
    let () = redis::cmd("HSET")
        .arg(key)
        .arg("json")
        .arg(edited.to_string())
        .query_async(&mut conn)
        .await
        .unwrap();
    let events = events_until(&events_path(&node), |e| {
        !of_type(e, "io.ankusa.route.refreshed").is_empty()
    })
    .await;
    assert_eq!(present(&events)["t1/routes/r1"]["enabled"], false);
    let rows = node.rows().await;
    assert_eq!(rows_of(&rows, "route.drift").len(), 1, "{rows:?}");
    node.stop().await;
}
