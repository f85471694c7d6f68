//! A fleet on a Redis that fails as Redis does: two nodes share routes in a primary with two
//! replicas behind a sentinel (`min_replicas = 1`), publish to tansu and a webhook follower,
//! and take writes on both at once while, one at a time, the primary is killed with -9 (the
//! sentinel promotes a replica), the primary is restarted empty, a route is edited with
//! `redis-cli`, and the replicas are hung (writes answer 503 and settle). After each: every
//! change a node acknowledged has its row, `ok`; no version is issued for two subjects; a hand
//! edit has its drift row; and both followers' replicas equal what the nodes' APIs list.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use ankusa_sinks::test_support::Broker;
use reqwest::Method;
use serde_json::Value;

use super::procs::{NodeProc, Shared};
use super::{acked, converged, kafka_follower, listed, webhook_follower, QUIET, SECRET};
use crate::routes::sentinel::{in_sync, role};
use crate::support::eventually;
use crate::support::node::ADMIN;
use crate::support::redis::{RedisServer, SentinelServer};
use crate::support::schemas;

/// Writers on both nodes at once; the seqs each acknowledged.
async fn both(a: &NodeProc, b: &NodeProc, seed: u64, ops: usize) -> [(String, Vec<u64>); 2] {
    let (x, y) = tokio::join!(
        acked(a.url.clone(), seed, ops),
        acked(b.url.clone(), seed + 1, ops)
    );
    [(a.url.clone(), x), (b.url.clone(), y)]
}

/// Every acknowledged change has its row, `ok`, at the seq the node answered.
async fn recorded(nodes: [&NodeProc; 2], acks: &[(String, Vec<u64>)]) {
    for node in nodes {
        let seqs: Vec<u64> = acks
            .iter()
            .filter(|(url, _)| *url == node.url)
            .flat_map(|(_, seqs)| seqs.iter().copied())
            .collect();
        for seq in seqs {
            let row = node.get(&format!("/admin/v1/audit/{seq}")).await;
            assert_eq!(
                row["result"], "ok",
                "the row of an acknowledged change: {row}"
            );
        }
    }
}

/// Both followers hold what both nodes list, and the routes are shared.
async fn in_step(
    what: &str,
    a: &NodeProc,
    b: &NodeProc,
    replicas: [&std::path::Path; 2],
    store: &str,
) {
    reading(a).await;
    reading(b).await;
    a.drained().await;
    b.drained().await;
    assert_eq!(
        listed(a, "routes").await,
        listed(b, "routes").await,
        "{what}: routes are shared"
    );
    for replica in replicas {
        converged(
            &format!("{what}: {}", replica.display()),
            replica,
            [a, b],
            store,
        )
        .await;
    }
}

/// Wait until `node` reads its routes from the store again (the sentinels name a primary that
/// answers).
async fn reading(node: &NodeProc) {
    let client = reqwest::Client::new();
    let url = format!("{}/admin/v1/tenants/t1/routes", node.url);
    let answers = async || {
        let r = client.get(&url).bearer_auth(ADMIN).send().await;
        r.is_ok_and(|r| r.status().is_success())
    };
    eventually("the routes read again", Duration::from_secs(30), answers).await;
}

/// The store's name, as the nodes write it in their events.
async fn store_name(port: u16) -> String {
    let id: String = crate::routes::sentinel::ask(port, redis::cmd("GET").arg("ankusa:store_id"))
        .await
        .unwrap();
    format!("redis:{id}")
}

/// The primary's port, as the sentinel names it.
async fn primary_port(sentinel: &SentinelServer) -> u16 {
    let addr: Vec<String> = crate::routes::sentinel::ask(
        sentinel.port,
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg("ankusa"),
    )
    .await
    .unwrap();
    addr[1].parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_of_a_fleet_stay_exact_through_what_redis_does() {
    let dir = tempfile::tempdir().unwrap();
    let mut primary = RedisServer::start();
    let mut replicas = [
        RedisServer::start_replica_of(primary.port),
        RedisServer::start_replica_of(primary.port),
    ];
    for replica in &replicas {
        in_sync(replica).await;
    }
    let sentinel = SentinelServer::start("ankusa", primary.port, 1000);
    let broker = Broker::start();
    let topic = "lifecycle";
    broker.create_topic(topic, 3).await;
    let (mut hook, hook_url, webhook_out) = webhook_follower(dir.path());
    hook.start();
    let mut follower = kafka_follower(dir.path(), &broker.address, topic, "g1", &[]);
    follower.start();
    let routes = format!(
        "sentinels = [\"127.0.0.1:{}\"]\nsentinel_master = \"ankusa\"\nmin_replicas = 1\n\
         min_replicas_timeout = \"1s\"\nfleet_secret = \"the fleet's secret\"\n\
         verify_interval = \"0s\"",
        sentinel.port
    );
    let shared = Shared {
        redis_url: "redis://127.0.0.1:1/0",
        routes: &routes,
        brokers: &broker.address,
        topic,
        hook_url: &hook_url,
        hook_secret: SECRET,
    };
    let mut a = NodeProc::new(dir.path(), "node-a", &shared);
    let mut b = NodeProc::new(dir.path(), "node-b", &shared);
    a.start().await;
    b.start().await;
    let kafka_out = dir.path().join("g1.json");
    let outs = [kafka_out.as_path(), webhook_out.as_path()];
    let mut acks = Vec::new();

    // A steady start.
    acks.extend(both(&a, &b, 21, 30).await);
    let store = store_name(primary.port).await;
    in_step("the start", &a, &b, outs, &store).await;

    // The primary killed with -9 under the writers: the sentinel promotes a replica, and
    // changes are taken again on it.
    let writers = tokio::spawn({
        let (a_url, b_url) = (a.url.clone(), b.url.clone());
        async move { tokio::join!(acked(a_url, 31, 60), acked(b_url, 32, 60)) }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    primary.stop();
    let (x, y) = writers.await.unwrap();
    acks.push((a.url.clone(), x));
    acks.push((b.url.clone(), y));
    let promoted = async || {
        let port = primary_port(&sentinel).await;
        (port != primary.port && role(port).await.as_deref() == Some("master")).then_some(port)
    };
    let new_primary = eventually("a replica promoted", Duration::from_secs(30), promoted).await;
    for node in [&a, &b] {
        reading(node).await;
    }
    acks.extend(both(&a, &b, 33, 30).await);
    assert_eq!(
        store_name(new_primary).await,
        store,
        "the store keeps its name"
    );
    in_step("after the failover", &a, &b, outs, &store).await;

    // The primary restarted empty: its replica copies the empty set. The nodes notice (a
    // store_loss row each, a snapshot each) and versions go on above all published.
    let current = replicas
        .iter_mut()
        .find(|r| r.port == new_primary)
        .expect("the promoted replica");
    current.restart_empty();
    acks.extend(both(&a, &b, 41, 40).await);
    // The first node to touch the emptied store notices (its id gone, or its counter below
    // what the node saw); the other may find it already named again and past what it saw.
    // One snapshot of the shared kind tells every consumer.
    let lost = async || {
        for node in [&a, &b] {
            let rows = node
                .get("/admin/v1/audit?action=route.store_loss&limit=10")
                .await;
            if !rows["rows"].as_array()?.is_empty() {
                return Some(());
            }
        }
        None
    };
    eventually("a store_loss row", Duration::from_secs(20), lost).await;
    // The sentinel may have promoted the other replica meanwhile (the restart took longer
    // than down-after): what follows goes to whichever is the primary now.
    let primary = async || {
        let port = primary_port(&sentinel).await;
        (role(port).await.as_deref() == Some("master")).then_some(port)
    };
    in_step("after the restart empty", &a, &b, outs, &store).await;
    let new_primary = eventually("the primary now", Duration::from_secs(30), primary).await;
    assert_eq!(
        store_name(new_primary).await,
        store,
        "the lost id given back"
    );

    // A route edited with redis-cli, then the drift check on one node.
    let ids: Vec<String> = crate::routes::sentinel::ask(
        new_primary,
        redis::cmd("ZRANGE").arg("ankusa:routes:{t1}").arg(0).arg(0),
    )
    .await
    .unwrap();
    let id = ids.first().expect("a route to edit").clone();
    let key = format!("ankusa:route:{{t1}}:{id}");
    let json: String =
        crate::routes::sentinel::ask(new_primary, redis::cmd("HGET").arg(&key).arg("json"))
            .await
            .unwrap();
    let mut edited: Value = serde_json::from_str(&json).unwrap();
    edited["destination"] = Value::from("https://edited.test/by-hand");
    let out = std::process::Command::new("redis-cli")
        .args([
            "-p",
            &new_primary.to_string(),
            "HSET",
            &key,
            "json",
            &edited.to_string(),
        ])
        .output()
        .expect("redis-cli (Debian's redis-tools, with redis-server)");
    // redis-cli exits 0 on an error reply: it is on stdout.
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        !said.contains("ERR") && !said.contains("READONLY"),
        "{said}"
    );
    // A pass whose adoption a replica did not hold within min_replicas_timeout answers 503
    // and leaves its mark: the next pass publishes it, as an operator's retry would.
    let verify = async || {
        let verified = reqwest::Client::new()
            .post(format!("{}/admin/v1/stores/verify", a.url))
            .bearer_auth(ADMIN)
            .send()
            .await
            .ok()?;
        let status = verified.status();
        let body: Value = verified.json().await.ok()?;
        if status == 503 {
            eprintln!("verify answered 503 (to be tried again): {body}");
            return None;
        }
        assert_eq!(status, 200, "{body}");
        Some(body)
    };
    let report = eventually("a verify pass", Duration::from_secs(20), verify).await;
    assert_eq!(report["kinds"][0]["published"], 1, "{report}");
    let drift = a.get("/admin/v1/audit?action=route.drift&limit=10").await;
    assert_eq!(
        drift["rows"][0]["resource"],
        format!("routes/{id}"),
        "{drift}"
    );
    in_step("after the hand edit", &a, &b, outs, &store).await;
    let got = a.get(&format!("/admin/v1/tenants/t1/routes/{id}")).await;
    assert_eq!(got["destination"], "https://edited.test/by-hand");

    // Every replica hung: with min_replicas = 1 a change is answered 503 and settled by
    // reading it back; taken again once they answer.
    for replica in &replicas {
        if replica.port != new_primary {
            replica.signal("STOP");
        }
    }
    let refused = reqwest::Client::new()
        .request(
            Method::POST,
            format!("{}/admin/v1/tenants/t1/routes", a.url),
        )
        .bearer_auth(ADMIN)
        .json(&super::new(true, "hung", 0))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503, "a change no replica holds");
    for replica in &replicas {
        if replica.port != new_primary {
            replica.signal("CONT");
        }
    }
    // The change is on the primary: its row settles `ok`, and it is published.
    let settled = async || {
        let rows = a.get("/admin/v1/audit?resource=routes/hung&limit=10").await;
        let rows = rows["rows"].as_array()?.clone();
        rows.iter()
            .any(|r| r["action"] == "route.create" && r["result"] == "ok")
            .then_some(())
    };
    eventually(
        "the 503'd change settled ok",
        Duration::from_secs(20),
        settled,
    )
    .await;
    acks.extend(both(&a, &b, 51, 30).await);
    in_step("after the replicas hung", &a, &b, outs, &store).await;
    recorded([&a, &b], &acks).await;
    assert!(
        acks.iter().map(|(_, s)| s.len()).sum::<usize>() > 100,
        "the schedule made changes"
    );

    // No version was issued for two routes: every change event of the topic, by version.
    // (A refreshed event of a route that is gone carries the store's version at its read,
    // which a change of another route may have taken: not an issue of it.)
    let mut by_version: BTreeMap<(String, String), String> = BTreeMap::new();
    let events: Vec<HashMap<String, String>> =
        schemas::check_topic(&broker.address, topic, 3, QUIET).await;
    let changes = ["io.ankusa.route.created", "io.ankusa.route.updated"];
    let change = |h: &&HashMap<String, String>| {
        changes.contains(&h.get("ce_type").map_or("", String::as_str))
    };
    for headers in events.iter().filter(change) {
        let (Some(store), Some(version), Some(key)) = (
            headers.get("ce_subjectstore"),
            headers.get("ce_subjectversion"),
            headers.get("ce_partitionkey"),
        ) else {
            continue;
        };
        let seen = by_version
            .entry((store.clone(), version.clone()))
            .or_insert_with(|| key.clone());
        assert_eq!(
            seen, key,
            "version {version} of {store} issued for two subjects"
        );
    }
    assert!(
        !by_version.is_empty(),
        "route changes were read from the topic"
    );
    drop((follower, hook));
}
