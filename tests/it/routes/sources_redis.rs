//! Sources kept in Redis (`[sources] store = "redis"`): the sources API unchanged, every change
//! a dual write recorded in the trail of the node that made it, the secret in Redis only as its
//! verifier, and an unanswered write settled by reading the source back.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::node::*;
use crate::support::redis::RedisServer;

pub(crate) const SOURCES: &str = "/admin/v1/tenants/t1/sources";

pub(crate) fn on_redis(url: String) -> impl Fn(&mut Value) {
    move |v: &mut Value| {
        v["sources"]["store"] = json!("redis");
        v["sources"]["redis_url"] = json!(url);
        v["settlement"]["interval"] = json!("100ms");
    }
}

/// Every key and value Redis holds, as text.
async fn redis_dump(url: &str) -> String {
    let (mut conn, keys) = crate::support::redis::keys(url).await;
    let mut dump = String::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        let value: Vec<String> = match kind.as_str() {
            "hash" => redis::cmd("HGETALL")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap(),
            "string" => redis::cmd("GET")
                .arg(&key)
                .query_async::<String>(&mut conn)
                .await
                .map(|v| vec![v])
                .unwrap(),
            _ => redis::cmd("ZRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .query_async(&mut conn)
                .await
                .unwrap(),
        };
        dump.push_str(&format!("{key} {value:?}\n"));
    }
    dump
}

#[tokio::test]
async fn sources_in_redis_are_shared_and_each_change_is_in_one_trail() {
    let redis = RedisServer::start();
    let a = TestNode::start_with(on_redis(redis.url())).await;
    let b = TestNode::start_with(on_redis(redis.url())).await;
    let create = a
        .call(
            Method::POST,
            SOURCES,
            ADMIN,
            Some(
                json!({"id": "s1", "kind": "webhook", "secret": "hunter2-sekrit",
                        "config": {"url": "https://example.test/hook"}}),
            ),
        )
        .await;
    assert_eq!(create.status, StatusCode::CREATED, "{}", create.text);
    assert_eq!(create.json()["secret"], "[redacted]");
    let seen = b
        .call(Method::GET, &format!("{SOURCES}/s1"), READER, None)
        .await;
    assert_eq!(seen.json(), create.json());
    assert_eq!(seen.header("etag").as_deref(), Some("\"1\""));
    let update = b
        .send(
            b.req(Method::PATCH, &format!("{SOURCES}/s1"), Some(ADMIN))
                .header("if-match", "\"1\"")
                .json(&json!({"secret": "hunter3-sekrit"})),
        )
        .await;
    assert_eq!(update.status, StatusCode::OK, "{}", update.text);
    let stale = a
        .send(
            a.req(Method::PATCH, &format!("{SOURCES}/s1"), Some(ADMIN))
                .header("if-match", "\"1\"")
                .json(&json!({"kind": "kafka"})),
        )
        .await;
    assert_error(&stale, 409, "revision_mismatch");
    let list = a.call(Method::GET, SOURCES, READER, None).await;
    assert_eq!(list.json()["items"][0]["revision"], 2);
    let dump = redis_dump(&redis.url()).await;
    assert!(dump.contains("source:{t1}:s1"), "{dump}");
    assert!(!dump.contains("hunter"), "no secret in Redis: {dump}");
    let delete = a
        .call(Method::DELETE, &format!("{SOURCES}/s1"), ADMIN, None)
        .await;
    assert_eq!(delete.status, StatusCode::NO_CONTENT, "{}", delete.text);

    let (rows_a, rows_b) = (a.rows().await, b.rows().await);
    let actions = |rows: &[Value]| -> Vec<String> {
        rows.iter()
            .map(|r| format!("{} {} {}", r["action"], r["result"], r["revision"]))
            .collect()
    };
    assert_eq!(
        actions(&rows_a),
        ["\"source.create\" \"ok\" 1", "\"source.delete\" \"ok\" 3"]
    );
    assert_eq!(actions(&rows_b), ["\"source.update\" \"ok\" 2"]);
    // Each node hashes with its own store's key: the hashes of one trail chain, across
    // trails they do not compare. A's delete saw B's update: not what A created.
    assert_ne!(rows_a[1]["before_hash"], rows_a[0]["after_hash"]);
    assert!(rows_a.iter().chain(&rows_b).all(|r| r["publish"] == true));
    // Nothing in the nodes' own source column families.
    let dir = a.stop().await;
    b.stop().await;
    let store = ankusa::store::Store::open(&dir.path().join("data")).unwrap();
    assert!(crate::support::trail::all_keys(&store, ankusa::store::Cf::Sources).is_empty());
}

/// With sources in Redis, a replay job's source is looked up there: a job on a source another
/// node created is accepted, one on a missing source is refused by name with no row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_jobs_find_their_source_in_redis() {
    let redis = RedisServer::start();
    let a = TestNode::start_with(on_redis(redis.url())).await;
    let b = TestNode::start_with(on_redis(redis.url())).await;
    let source = json!({"id": "s1", "kind": "webhook", "config": {}});
    let created = a.call(Method::POST, SOURCES, ADMIN, Some(source)).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);

    let replays = "/admin/v1/tenants/t1/replay-jobs";
    let from = (chrono::Utc::now() - chrono::Duration::hours(2)).to_rfc3339();
    let to = (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    let orphan = json!({"id": "j0", "source": "s9", "from": from, "to": to});
    let r = b.call(Method::POST, replays, ADMIN, Some(orphan)).await;
    assert_error(&r, 422, "invalid_input");
    assert_eq!(r.json()["field"], "source");
    assert!(b.rows().await.is_empty());

    let job = json!({"id": "j1", "source": "s1", "from": from, "to": to});
    let r = b.call(Method::POST, replays, ADMIN, Some(job)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let rows = b.rows().await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["action"], "replay.create");
    assert_eq!(rows[0]["detail"]["source"], "s1");
    a.stop().await;
    b.stop().await;
}
