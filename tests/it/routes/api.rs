//! The routes API over real HTTP, on the memory store and on Redis: every effective change
//! writes one row (finished from its pending row), refusals write none, and two nodes on one
//! Redis see one set of routes.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use ankusa::store::{keys, Cf};

use crate::support::node::*;
use crate::support::redis::RedisServer;

pub(crate) const ROUTES: &str = "/admin/v1/tenants/t1/routes";

/// Create, update and delete route `r1` through the API, checking every answer and row;
/// returns the bodies of the create's and the update's answers.
async fn lifecycle_of_one_route(node: &TestNode) -> [String; 2] {
    let create = node
        .send(
            node.req(Method::POST, ROUTES, Some(ADMIN))
                .header("x-request-id", "req-route-1")
                .json(&json!({"id": "r1", "source": "s1",
                              "destination": "https://example.test/in",
                              "filter": {"type": "order"}})),
        )
        .await;
    assert_eq!(create.status, StatusCode::CREATED, "{}", create.text);
    assert_eq!(create.header("etag").as_deref(), Some("\"1\""));
    let view = json!({"id": "r1", "tenant": "t1", "source": "s1",
                      "destination": "https://example.test/in", "filter": {"type": "order"},
                      "enabled": true, "revision": 1});
    assert_eq!(create.json(), view);
    let read = node
        .call(Method::GET, &format!("{ROUTES}/r1"), READER, None)
        .await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(read.json(), view);
    assert_eq!(read.header("etag").as_deref(), Some("\"1\""));

    // Refusals write nothing: bad input, an existing id, a stale If-Match, a missing route,
    // a token without admin:write.
    let bad = node
        .call(
            Method::POST,
            ROUTES,
            ADMIN,
            Some(json!({"id": "r2", "source": "s1", "destination": "https://u:p@h/x"})),
        )
        .await;
    assert_error(&bad, 422, "invalid_input");
    assert_eq!(bad.json()["field"], "destination");
    let again = node
        .call(
            Method::POST,
            ROUTES,
            ADMIN,
            Some(json!({"id": "r1", "source": "s1", "destination": "https://h/x"})),
        )
        .await;
    assert_error(&again, 409, "already_exists");
    let stale = node
        .send(
            node.req(Method::PATCH, &format!("{ROUTES}/r1"), Some(ADMIN))
                .header("if-match", "\"7\"")
                .json(&json!({"enabled": false})),
        )
        .await;
    assert_error(&stale, 409, "revision_mismatch");
    let missing = node
        .call(
            Method::PATCH,
            &format!("{ROUTES}/nope"),
            ADMIN,
            Some(json!({"enabled": false})),
        )
        .await;
    assert_error(&missing, 404, "not_found");
    let forbidden = node
        .call(Method::DELETE, &format!("{ROUTES}/r1"), READER, None)
        .await;
    assert_error(&forbidden, 403, "forbidden");

    let update = node
        .send(
            node.req(Method::PATCH, &format!("{ROUTES}/r1"), Some(ADMIN))
                .header("if-match", "\"1\"")
                .json(&json!({"enabled": false, "source": "s1"})),
        )
        .await;
    assert_eq!(update.status, StatusCode::OK, "{}", update.text);
    assert_eq!(update.json()["revision"], 2);
    assert_eq!(update.json()["enabled"], false);
    // The same values again: no change, no row, no seq.
    let noop = node
        .call(
            Method::PATCH,
            &format!("{ROUTES}/r1"),
            ADMIN,
            Some(json!({"enabled": false})),
        )
        .await;
    assert_eq!(noop.status, StatusCode::OK);
    assert_eq!(noop.seq(), None);
    let list = node.call(Method::GET, ROUTES, READER, None).await;
    assert_eq!(list.json()["items"][0]["revision"], 2);
    assert_eq!(list.json()["next"], Value::Null);
    let delete = node
        .call(Method::DELETE, &format!("{ROUTES}/r1"), ADMIN, None)
        .await;
    assert_eq!(delete.status, StatusCode::NO_CONTENT, "{}", delete.text);
    let gone = node
        .call(Method::GET, &format!("{ROUTES}/r1"), READER, None)
        .await;
    assert_error(&gone, 404, "not_found");

    let rows = node.rows().await;
    let actions: Vec<&str> = rows.iter().map(|r| r["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["route.create", "route.update", "route.delete"]);
    let seqs = [create.seq(), update.seq(), delete.seq()];
    for ((row, revision), seq) in rows.iter().zip([1, 2, 3]).zip(seqs) {
        assert_eq!(Some(row["seq"].as_u64().unwrap()), seq);
        assert_eq!(row["resource"], "routes/r1");
        assert_eq!(row["tenant"], "t1");
        assert_eq!(row["result"], "ok");
        assert_eq!(row["publish"], true);
        assert_eq!(row["revision"], revision);
        assert_eq!(row["actor"], "alice");
    }
    assert_eq!(rows[0]["request_id"], "req-route-1");
    assert_eq!(rows[0]["before_hash"], Value::Null);
    assert!(is_hash(&rows[0]["after_hash"]));
    assert_eq!(rows[1]["before_hash"], rows[0]["after_hash"]);
    assert_eq!(rows[2]["before_hash"], rows[1]["after_hash"]);
    assert_eq!(rows[2]["after_hash"], Value::Null);
    assert_eq!(rows[1]["detail"], json!({"fields": 1}));
    [create.text, update.text]
}

#[tokio::test]
async fn memory_store_routes_write_one_finished_row_per_change() {
    let node = TestNode::start().await;
    let answers = lifecycle_of_one_route(&node).await;
    let dir = node.stop().await;
    let store = ankusa::store::Store::open(&dir.path().join("data")).unwrap();
    assert!(ankusa::audit::pending_rows(&store).unwrap().is_empty());
    let rows = crate::support::trail::all_rows(&store);
    // A create's and an update's event carry the very bytes the API answered with.
    for (row, answer) in rows.iter().zip(answers) {
        let outbox = store.get(Cf::Audit, &keys::outbox_key(row.seq)).unwrap();
        assert_eq!(
            outbox.as_deref(),
            Some(answer.as_bytes()),
            "row {}",
            row.seq
        );
    }
    // The delete's event carries the route as it was, at the delete's revision.
    let deleted = crate::routes::entity(&store, rows[2].seq).expect("outbox entity");
    assert_eq!(deleted["revision"], 3);
    assert_eq!(deleted["enabled"], false);
}

#[tokio::test]
async fn redis_store_routes_are_shared_by_two_nodes() {
    let redis = RedisServer::start();
    let url = redis.url();
    let on_redis = |v: &mut Value| {
        v["routes"]["store"] = json!("redis");
        v["routes"]["redis_url"] = json!(url);
    };
    let a = TestNode::start_with(on_redis).await;
    lifecycle_of_one_route(&a).await;
    let b = TestNode::start_with(on_redis).await;
    let created = b
        .call(
            Method::POST,
            ROUTES,
            ADMIN,
            Some(json!({"id": "r9", "source": "s2", "destination": "http://h:8080/x"})),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let seen = a
        .call(Method::GET, &format!("{ROUTES}/r9"), READER, None)
        .await;
    assert_eq!(seen.json(), created.json());
    // A's stale view of r9 loses to B's update: 409, and A's trail says `failed`.
    let updated = b
        .call(
            Method::PATCH,
            &format!("{ROUTES}/r9"),
            ADMIN,
            Some(json!({"enabled": false})),
        )
        .await;
    assert_eq!(updated.json()["revision"], 2);
    let stale = a
        .send(
            a.req(Method::PATCH, &format!("{ROUTES}/r9"), Some(ADMIN))
                .header("if-match", "\"1\"")
                .json(&json!({"source": "s3"})),
        )
        .await;
    assert_error(&stale, 409, "revision_mismatch");
    assert_eq!(a.rows().await.len(), 3, "a refused If-Match writes no row");
    assert_eq!(b.rows().await.len(), 2);
    a.stop().await;
    b.stop().await;
}

/// Pages of routes come back in id order, `next` pointing past the last, on both stores.
#[tokio::test]
async fn routes_page_in_id_order_on_both_stores() {
    let redis = RedisServer::start();
    let url = redis.url();
    let memory = TestNode::start().await;
    let on_redis = TestNode::start_with(|v| {
        v["routes"]["store"] = json!("redis");
        v["routes"]["redis_url"] = json!(url);
    })
    .await;
    for node in [&memory, &on_redis] {
        for id in ["r3", "r1", "r5", "r2", "r4"] {
            let body = json!({"id": id, "source": "s1", "destination": "https://h/x"});
            let r = node.call(Method::POST, ROUTES, ADMIN, Some(body)).await;
            assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        }
        // Another tenant's routes never show.
        let other = json!({"id": "r0", "source": "s1", "destination": "https://h/x"});
        node.call(
            Method::POST,
            "/admin/v1/tenants/t2/routes",
            ADMIN,
            Some(other),
        )
        .await;
        let mut ids = Vec::new();
        let mut path = format!("{ROUTES}?limit=2");
        loop {
            let page = node.call(Method::GET, &path, READER, None).await.json();
            let items = page["items"].as_array().unwrap();
            assert!(items.len() <= 2);
            ids.extend(items.iter().map(|r| r["id"].as_str().unwrap().to_owned()));
            match page["next"].as_str() {
                Some(next) => path = format!("{ROUTES}?limit=2&after={next}"),
                None => break,
            }
        }
        assert_eq!(ids, ["r1", "r2", "r3", "r4", "r5"]);
        let bad = node
            .call(Method::GET, &format!("{ROUTES}?after=a/b"), READER, None)
            .await;
        assert_error(&bad, 422, "invalid_input");
    }
    memory.stop().await;
    on_redis.stop().await;
}
