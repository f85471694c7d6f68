//! A fleet, end to end: two nodes sharing one real Redis route store publish to one real
//! broker (tansu) and one webhook endpoint while writers on both change the same routes at
//! once (creates, updates, deletes, creates again) and each node's own sources; a node is
//! killed with -9 and started again; the other is restored from a backup; the webhook
//! consumer and the watcher over HTTP are down for a while (killed with -9). The replicas
//! `ankusa follow` keeps (Kafka, webhook, http) must equal what the nodes' admin APIs list;
//! and a consumer started after it all, at the end of the topic, bootstraps from snapshots to
//! the same state.

pub(crate) mod procs;
mod redis_failures;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use ankusa_sinks::test_support::Broker;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::Method;
use serde_json::json;

use crate::support::eventually;
use crate::support::node::ADMIN;
use crate::support::redis::RedisServer;
use crate::support::schemas;
use procs::{free_port, NodeProc, Proc, Shared};

pub(crate) const SECRET: &str = "whsec_dGhlIHJlY2VpdmVyJ3Mga2V5LCAzMiBieXRlcyBsb25n";
const ROUTES: u32 = 8;
const SOURCES: u32 = 4;
/// How long the topic stays quiet before its reader has read it all.
pub(crate) const QUIET: Duration = Duration::from_secs(5);

/// `ops` random changes through `node`'s API: routes shared with the other node, sources of
/// its own. Refusals (409, 404), and errors while a node is down, are part of the schedule.
pub(crate) async fn write(url: String, seed: u64, ops: usize) -> usize {
    acked(url, seed, ops).await.len()
}

/// [`write`], answering the `X-Audit-Seq` of every change the node acknowledged.
pub(crate) async fn acked(url: String, seed: u64, ops: usize) -> Vec<u64> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut applied = Vec::new();
    for i in 0..ops {
        let route = rng.random_bool(0.7);
        let (plural, n) = if route {
            ("routes", ROUTES)
        } else {
            ("sources", SOURCES)
        };
        let id = format!("{}{}", &plural[..1], rng.random_range(0..n));
        let base = format!("{url}/admin/v1/tenants/t1/{plural}");
        let (method, path, body) = match rng.random_range(0..10) {
            0..=2 => (Method::POST, base.clone(), Some(new(route, &id, i))),
            3..=7 => (
                Method::PATCH,
                format!("{base}/{id}"),
                Some(patch(route, seed, i)),
            ),
            _ => (Method::DELETE, format!("{base}/{id}"), None),
        };
        let mut request = client.request(method, path).bearer_auth(ADMIN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        if let Ok(r) = request.send().await {
            let seq = r
                .headers()
                .get("x-audit-seq")
                .and_then(|s| s.to_str().ok()?.parse::<u64>().ok());
            applied.extend(seq);
        }
    }
    applied
}

pub(crate) fn new(route: bool, id: &str, i: usize) -> serde_json::Value {
    match route {
        true => json!({"id": id, "source": "s1", "destination": format!("https://a.test/{i}")}),
        false => {
            json!({"id": id, "kind": "webhook", "secret": "hunter2-sekrit", "config": {"i": i}})
        }
    }
}

pub(crate) fn patch(route: bool, seed: u64, i: usize) -> serde_json::Value {
    match route {
        true => json!({"destination": format!("https://b.test/{seed}/{i}")}),
        false => json!({"config": {"seed": seed, "i": i}}),
    }
}

/// Writers on both nodes at once.
pub(crate) async fn both(a: &NodeProc, b: &NodeProc, seed: u64, ops: usize) -> usize {
    let (x, y) = tokio::join!(
        write(a.url.clone(), seed, ops),
        write(b.url.clone(), seed + 1, ops)
    );
    x + y
}

/// `ankusa follow verify` of `replica` against `node`, for the shared store and the node's
/// own: whether they are equal, and what it printed.
pub(crate) fn verify(replica: &Path, node: &NodeProc, shared: &str) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .args(["follow", "verify", "--replica"])
        .arg(replica)
        .args(["--url", &node.url, "--token", ADMIN, "--tenant", "t1"])
        .args(["--store", shared, "--store", &node.uri])
        .env_remove("ANKUSA_CONFIG")
        .output()
        .expect("run ankusa follow verify");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// What `replica` holds of `store`: the keys of the subjects that exist, sorted.
pub(crate) fn kept(replica: &Path, store: &str) -> Vec<String> {
    let file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(replica).expect("the replica file")).unwrap();
    let subjects = file["replica"]["subjects"][store].as_object().cloned();
    let mut keys: Vec<String> = subjects
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, s)| !s["entity"].is_null())
        .map(|(k, _)| k)
        .collect();
    keys.sort();
    keys
}

/// What `node`'s API lists in tenant t1 under `plural`, as replica keys, sorted.
pub(crate) async fn listed(node: &NodeProc, plural: &str) -> Vec<String> {
    let page = node
        .get(&format!("/admin/v1/tenants/t1/{plural}?limit=1000"))
        .await;
    let Some(items) = page["items"].as_array().map(|i| i.iter()) else {
        panic!("not a page of {plural} from {}: {page}", node.url);
    };
    let mut keys: Vec<String> = items
        .map(|s| format!("t1/{plural}/{}", s["id"].as_str().unwrap()))
        .collect();
    keys.sort();
    keys
}

/// Wait until `replica` equals both nodes' state.
pub(crate) async fn converged(what: &str, replica: &Path, nodes: [&NodeProc; 2], shared: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let differences: Vec<String> = nodes
            .iter()
            .map(|node| verify(replica, node, shared))
            .filter(|(equal, _)| !equal)
            .map(|(_, text)| text)
            .collect();
        if differences.is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} did not converge: {}",
            differences.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The webhook follower (`ankusa follow webhook`) on a free port, its replica in `dir`: the
/// process, the URL the nodes send to, and the replica file.
pub(crate) fn webhook_follower(dir: &Path) -> (Proc, String, std::path::PathBuf) {
    let port = free_port();
    let out = dir.join("webhook.json");
    let args = [
        "follow",
        "webhook",
        "--listen",
        &format!("127.0.0.1:{port}"),
    ]
    .into_iter()
    .map(str::to_owned)
    .chain(["--secret".into(), SECRET.into(), "--out".into()])
    .chain([out.to_str().unwrap().to_owned()])
    .collect();
    let hook = Proc::new(args, dir.join("webhook.log"));
    (hook, format!("http://127.0.0.1:{port}/"), out)
}

/// `ankusa follow http` of `nodes` into `http.json`, and that file.
pub(crate) fn http_follower(dir: &Path, nodes: [&NodeProc; 2]) -> (Proc, std::path::PathBuf) {
    let out = dir.join("http.json");
    let mut args: Vec<String> = vec!["follow".into(), "http".into()];
    for node in nodes {
        args.extend(["--url".into(), node.url.clone()]);
    }
    args.extend(["--out".into(), out.to_str().unwrap().into()]);
    args.extend(["--token".into(), ADMIN.into(), "--wait".into(), "2s".into()]);
    (Proc::new(args, dir.join("http.log")), out)
}

/// The Kafka follower of `topic` in group `group` into `out`.
pub(crate) fn kafka_follower(
    dir: &Path,
    brokers: &str,
    topic: &str,
    group: &str,
    extra: &[&str],
) -> Proc {
    let out = dir.join(format!("{group}.json"));
    let mut args: Vec<String> = ["follow", "kafka", "--brokers", brokers, "--topic", topic]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(["--group".into(), group.into(), "--out".into()]);
    args.push(out.to_str().unwrap().into());
    args.extend(["--batch-ms".into(), "100".into()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    Proc::new(args, dir.join(format!("{group}.log")))
}

/// One schedule of the fleet (see the module doc), from `seed`.
async fn schedule(seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start();
    let broker = Broker::start();
    let topic = "lifecycle";
    broker.create_topic(topic, 3).await;
    let (mut hook, hook_url, webhook_out) = webhook_follower(dir.path());
    hook.start();
    let mut follower = kafka_follower(dir.path(), &broker.address, topic, "g1", &[]);
    follower.start();
    let shared = Shared {
        redis_url: &redis.url(),
        routes: "",
        brokers: &broker.address,
        topic,
        hook_url: &hook_url,
        hook_secret: SECRET,
    };
    let mut a = NodeProc::new(dir.path(), "node-a", &shared);
    let mut b = NodeProc::new(dir.path(), "node-b", &shared);
    a.start().await;
    b.start().await;
    let (mut watcher, http_out) = http_follower(dir.path(), [&a, &b]);
    watcher.start();

    // Writers on both; A is killed with -9 in the middle and started again.
    let mut applied = both(&a, &b, seed, 60).await;
    a.proc.kill9();
    applied += write(b.url.clone(), seed + 2, 30).await;
    a.start().await;
    applied += both(&a, &b, seed + 3, 60).await;

    // B is backed up; the webhook consumer goes down; more changes; B is killed and restored.
    let backup = reqwest::Client::new()
        .post(format!("{}/admin/v1/backups", b.url))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(backup.status(), 201);
    let backed_up = backup.json::<serde_json::Value>().await.unwrap()["audit_seq"]
        .as_u64()
        .unwrap();
    hook.kill9();
    applied += both(&a, &b, seed + 4, 60).await;
    // The watcher has read B past its backup when it is killed: the restore takes those
    // seqs back, and B then answers its position 410.
    let past_backup = async || {
        let file: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&http_out).ok()?).ok()?;
        let at = file["progress"]["http"][&b.url]["position"].as_u64()?;
        (at > backed_up).then_some(())
    };
    eventually(
        "the watcher past B's backup",
        Duration::from_secs(30),
        past_backup,
    )
    .await;
    watcher.kill9();
    b.proc.kill9();
    let restored = std::process::Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .args(["backup", "restore", "--from"])
        .arg(&b.backups)
        .arg("--store")
        .arg(&b.data)
        .arg("--force")
        .env_remove("ANKUSA_CONFIG")
        .output()
        .unwrap();
    assert!(restored.status.success(), "{restored:?}");
    b.start().await;
    hook.start();
    // It resumes from its file; B answers 410 (restored behind it), and it relists.
    watcher.start();
    applied += both(&a, &b, seed + 5, 40).await;
    assert!(applied > 100, "the schedule made changes: {applied}");

    a.drained().await;
    b.drained().await;
    let store: String = {
        let client = redis::Client::open(redis.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        redis::cmd("GET")
            .arg("ankusa:store_id")
            .query_async(&mut conn)
            .await
            .unwrap()
    };
    let shared_store = format!("redis:{store}");
    // The schedule did what it says: B runs a restored store, and there is state to keep.
    let b_status = b.get("/admin/v1/lifecycle").await;
    assert_eq!(b_status["incarnations"].as_array().unwrap().len(), 2);
    let routes = listed(&a, "routes").await;
    assert_eq!(routes, listed(&b, "routes").await, "routes are shared");
    let (a_sources, b_sources) = (listed(&a, "sources").await, listed(&b, "sources").await);
    assert!(!routes.is_empty() && !a_sources.is_empty() && !b_sources.is_empty());
    let kafka_out = dir.path().join("g1.json");
    converged("the Kafka replica", &kafka_out, [&a, &b], &shared_store).await;
    converged("the webhook replica", &webhook_out, [&a, &b], &shared_store).await;
    converged("the http replica", &http_out, [&a, &b], &shared_store).await;
    let http_log = std::fs::read_to_string(dir.path().join("http.log")).unwrap();
    assert!(
        http_log.contains("position gone (410); relisting"),
        "the watcher relisted from B's restored store: {http_log}"
    );
    for replica in [&kafka_out, &webhook_out, &http_out] {
        assert_eq!(
            kept(replica, &shared_store),
            routes,
            "{}",
            replica.display()
        );
        assert_eq!(kept(replica, &a.uri), a_sources, "{}", replica.display());
        assert_eq!(kept(replica, &b.uri), b_sources, "{}", replica.display());
    }

    // A consumer that starts now, at the end of the topic, learns the state from snapshots.
    let mut late = kafka_follower(
        dir.path(),
        &broker.address,
        topic,
        "g2",
        &["--start", "end"],
    );
    late.start();
    // Its positions are at the end of every partition once it says it follows them.
    let log = dir.path().join("g2.log");
    let at_end = async || {
        let text = std::fs::read_to_string(&log).ok()?;
        text.contains("following every partition").then_some(())
    };
    eventually(
        "the late follower at the end",
        Duration::from_secs(20),
        at_end,
    )
    .await;
    for node in [&a, &b] {
        let r = reqwest::Client::new()
            .post(format!("{}/admin/v1/lifecycle/snapshot", node.url))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
        let id = r.json::<serde_json::Value>().await.unwrap()["snapshot"]["id"].clone();
        let finished = async || {
            let last = &node.get("/admin/v1/lifecycle/snapshot").await["last"];
            last["id"] == id && last["state"] == "finished"
        };
        eventually("the snapshot to finish", Duration::from_secs(60), finished).await;
    }
    let late_out = dir.path().join("g2.json");
    converged("the late replica", &late_out, [&a, &b], &shared_store).await;
    assert_eq!(
        kept(&late_out, &shared_store),
        routes,
        "every route, from snapshots"
    );
    assert_eq!(kept(&late_out, &a.uri), a_sources);
    assert_eq!(kept(&late_out, &b.uri), b_sources);
    // Every event the fleet published matches the schema its `dataschema` names, and the
    // schedule made every type of a change, a restore and a snapshot (checkpoints come on
    // the trail's own schedule).
    let types: BTreeSet<String> = schemas::check_topic(&broker.address, topic, 3, QUIET)
        .await
        .into_iter()
        .map(|headers| headers["ce_type"].clone())
        .collect();
    let expected: BTreeSet<String> = ankusa::api::schemas::SCHEMAS
        .iter()
        .filter_map(|s| s.event_type)
        .filter(|t| *t != "io.ankusa.trail.checkpoint")
        .map(str::to_owned)
        .collect();
    let missing: Vec<&String> = expected.difference(&types).collect();
    assert!(missing.is_empty(), "never published: {missing:?}");
    drop((late, follower, hook, watcher));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_of_a_fleet_equal_its_state_through_crashes_restores_and_outages() {
    for seed in [11, 4242] {
        schedule(seed).await;
    }
}
