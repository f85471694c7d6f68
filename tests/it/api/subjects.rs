//! Rate-limit overrides, quarantine entries and replay jobs through the admin API, over
//! real HTTP: one row per effective change with the right action, resource, revision and
//! detail; no row for anything that changes nothing.

use crate::support::node::*;
use chrono::{Duration, Utc};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const OVERRIDES: &str = "/admin/v1/tenants/t1/overrides";
const QUARANTINE: &str = "/admin/v1/tenants/t1/quarantine";
const REPLAYS: &str = "/admin/v1/tenants/t1/replay-jobs";

/// The row of a change, checked for the fields every row of an `alice` change shares.
async fn row_of(
    node: &TestNode,
    reply: &Reply,
    action: &str,
    resource: &str,
    revision: u64,
) -> Value {
    let row = node.row(reply.seq().expect("a row was written")).await;
    assert_eq!(row["actor"], "alice");
    assert_eq!(row["remote_ip"], "127.0.0.1");
    assert_eq!(row["request_id"], reply.request_id().as_str());
    assert_eq!(row["action"], action);
    assert_eq!(row["tenant"], "t1");
    assert_eq!(row["resource"], resource);
    assert_eq!(row["revision"], revision);
    assert_eq!(row["result"], "ok");
    assert_eq!(row["publish"], false, "only sources and routes publish");
    row
}

#[tokio::test]
async fn overrides_set_replace_and_delete() {
    let node = TestNode::start().await;
    let item = format!("{OVERRIDES}/client-7");
    let created = node
        .call(Method::PUT, &item, ADMIN, Some(json!({"rate": 100})))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(
        created.json(),
        json!({"key": "client-7", "tenant": "t1", "rate": 100, "burst": null, "revision": 1})
    );
    let r1 = row_of(&node, &created, "override.set", "overrides/client-7", 1).await;
    assert_eq!(r1["detail"], json!({"rate": 100}));
    assert_eq!(r1["before_hash"], Value::Null);

    let replaced = node
        .send(
            node.req(Method::PUT, &item, Some(ADMIN))
                .header("if-match", "\"1\"")
                .json(&json!({"rate": 250, "burst": 500})),
        )
        .await;
    assert_eq!(replaced.status, StatusCode::OK, "{}", replaced.text);
    let r2 = row_of(&node, &replaced, "override.set", "overrides/client-7", 2).await;
    assert_eq!(r2["detail"], json!({"rate": 250, "burst": 500}));
    assert_eq!(r2["before_hash"], r1["after_hash"]);

    // No-ops: the same values, a stale If-Match, a bad rate, a missing key, a reader.
    let same = node
        .call(
            Method::PUT,
            &item,
            ADMIN,
            Some(json!({"rate": 250, "burst": 500})),
        )
        .await;
    assert_eq!(same.status, StatusCode::OK);
    assert_eq!(same.seq(), None);
    let stale = node
        .send(
            node.req(Method::PUT, &item, Some(ADMIN))
                .header("if-match", "1")
                .json(&json!({"rate": 1})),
        )
        .await;
    assert_error(&stale, 409, "revision_mismatch");
    let zero = node
        .call(Method::PUT, &item, ADMIN, Some(json!({"rate": 0})))
        .await;
    assert_error(&zero, 422, "invalid_input");
    assert_eq!(zero.json()["field"], "rate");
    let missing = node
        .call(Method::DELETE, &format!("{OVERRIDES}/nope"), ADMIN, None)
        .await;
    assert_error(&missing, 404, "not_found");
    let reader = node
        .call(Method::PUT, &item, READER, Some(json!({"rate": 5})))
        .await;
    assert_error(&reader, 403, "forbidden");
    assert_eq!(node.rows().await.len(), 2);

    let listed = node.call(Method::GET, OVERRIDES, READER, None).await.json();
    assert_eq!(listed["items"].as_array().unwrap().len(), 1);
    assert_eq!(listed["next"], Value::Null);

    let deleted = node.call(Method::DELETE, &item, ADMIN, None).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    let r3 = row_of(&node, &deleted, "override.delete", "overrides/client-7", 3).await;
    assert_eq!(r3["after_hash"], Value::Null);
    assert_eq!(r3["detail"], json!({}));
    assert_eq!(node.rows().await.len(), 3);
    node.stop().await;
}

#[tokio::test]
async fn quarantine_add_and_remove() {
    let node = TestNode::start().await;
    let until = (Utc::now() + Duration::days(1)).to_rfc3339();
    let entry = json!({"id": "q1", "resource": "sources/s1", "reason": "flooding", "until": until});
    let added = node
        .call(Method::POST, QUARANTINE, ADMIN, Some(entry.clone()))
        .await;
    assert_eq!(added.status, StatusCode::CREATED, "{}", added.text);
    assert_eq!(added.json()["resource"], "sources/s1");
    let r1 = row_of(&node, &added, "quarantine.add", "quarantine/q1", 1).await;
    assert!(r1["detail"]["until"].is_string(), "{r1}");
    assert!(
        !r1.to_string().contains("flooding"),
        "the reason is not in the row"
    );

    let again = node
        .call(Method::POST, QUARANTINE, ADMIN, Some(entry))
        .await;
    assert_error(&again, 409, "already_exists");
    let past = (Utc::now() - Duration::hours(1)).to_rfc3339();
    let expired = node
        .call(
            Method::POST,
            QUARANTINE,
            ADMIN,
            Some(json!({"id": "q2", "resource": "sources/s1", "reason": "x", "until": past})),
        )
        .await;
    assert_error(&expired, 422, "invalid_input");
    assert_eq!(expired.json()["field"], "until");
    let traversal = node
        .call(
            Method::POST,
            QUARANTINE,
            ADMIN,
            Some(json!({"id": "q3", "resource": "../../etc", "reason": "x", "until": until})),
        )
        .await;
    assert_error(&traversal, 422, "invalid_input");
    assert_eq!(traversal.json()["field"], "resource");
    let not_a_time = node
        .call(
            Method::POST,
            QUARANTINE,
            ADMIN,
            Some(json!({"id": "q4", "resource": "sources/s1", "reason": "x", "until": "soon"})),
        )
        .await;
    assert_error(&not_a_time, 422, "invalid_input");
    assert_eq!(not_a_time.json()["field"], "until");
    assert_eq!(node.rows().await.len(), 1);

    let got = node
        .call(Method::GET, &format!("{QUARANTINE}/q1"), READER, None)
        .await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.json()["reason"], "flooding");
    let removed = node
        .call(Method::DELETE, &format!("{QUARANTINE}/q1"), ADMIN, None)
        .await;
    assert_eq!(removed.status, StatusCode::NO_CONTENT, "{}", removed.text);
    let r2 = row_of(&node, &removed, "quarantine.remove", "quarantine/q1", 2).await;
    assert_eq!(r2["before_hash"], r1["after_hash"]);
    let twice = node
        .call(Method::DELETE, &format!("{QUARANTINE}/q1"), ADMIN, None)
        .await;
    assert_error(&twice, 404, "not_found");
    assert_eq!(node.rows().await.len(), 2);
    node.stop().await;
}

#[tokio::test]
async fn replay_jobs_create_and_cancel() {
    let node = TestNode::start().await;
    let from = (Utc::now() - Duration::hours(6)).to_rfc3339();
    let to = (Utc::now() - Duration::hours(1)).to_rfc3339();
    let job = json!({"id": "j1", "source": "s1", "from": from, "to": to});
    // The source must exist first: no row for a job on a missing source.
    let orphan = node
        .call(Method::POST, REPLAYS, ADMIN, Some(job.clone()))
        .await;
    assert_error(&orphan, 422, "invalid_input");
    assert_eq!(orphan.json()["field"], "source");
    assert!(node.rows().await.is_empty());

    let s1 = node
        .call(
            Method::POST,
            "/admin/v1/tenants/t1/sources",
            ADMIN,
            Some(json!({"id": "s1", "kind": "k"})),
        )
        .await;
    assert_eq!(s1.status, StatusCode::CREATED);
    let created = node
        .call(Method::POST, REPLAYS, ADMIN, Some(job.clone()))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.json()["state"], "pending");
    let r1 = row_of(&node, &created, "replay.create", "replay-jobs/j1", 1).await;
    assert_eq!(r1["detail"]["source"], "s1");
    assert!(r1["detail"]["from"].is_string() && r1["detail"]["to"].is_string());

    let backwards = node
        .call(
            Method::POST,
            REPLAYS,
            ADMIN,
            Some(json!({"id": "j2", "source": "s1", "from": to, "to": from})),
        )
        .await;
    assert_error(&backwards, 422, "invalid_input");
    assert_eq!(backwards.json()["field"], "to");
    let stale = node
        .send(
            node.req(Method::POST, &format!("{REPLAYS}/j1/cancel"), Some(ADMIN))
                .header("if-match", "\"5\""),
        )
        .await;
    assert_error(&stale, 409, "revision_mismatch");

    let cancelled = node
        .call(Method::POST, &format!("{REPLAYS}/j1/cancel"), ADMIN, None)
        .await;
    assert_eq!(cancelled.status, StatusCode::OK, "{}", cancelled.text);
    assert_eq!(cancelled.json()["state"], "cancelled");
    let r2 = row_of(&node, &cancelled, "replay.cancel", "replay-jobs/j1", 2).await;
    assert_eq!(r2["before_hash"], r1["after_hash"]);
    assert!(is_hash(&r2["after_hash"]));
    let again = node
        .call(Method::POST, &format!("{REPLAYS}/j1/cancel"), ADMIN, None)
        .await;
    assert_error(&again, 409, "conflict");
    let missing = node
        .call(Method::POST, &format!("{REPLAYS}/j9/cancel"), ADMIN, None)
        .await;
    assert_error(&missing, 404, "not_found");
    assert_eq!(
        node.rows().await.len(),
        3,
        "source.create, replay.create, replay.cancel"
    );

    let listed = node.call(Method::GET, REPLAYS, READER, None).await.json();
    assert_eq!(listed["items"][0]["state"], "cancelled");
    assert_eq!(listed["items"][0]["revision"], 2);
    node.stop().await;
}
