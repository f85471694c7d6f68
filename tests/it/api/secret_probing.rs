//! A change that names a source's secret answers the same whether or not the secret is the
//! one the source has: refused alike when the backlog is full (so a refusal cannot test a
//! guess), and a change with its row when there is room.

use std::time::Duration;

use crate::support::eventually;
use crate::support::node::*;
use crate::support::redis::RedisServer;
use ankusa_sinks::test_support::Receiver;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const SOURCES: &str = "/admin/v1/tenants/t1/sources";
const RIGHT: &str = "the-right-secret";
const WRONG: &str = "a-wrong-guess";

/// The one lifecycle sink is a webhook to `url` (retrying quickly), and one unconfirmed row
/// fills the outbox backlog.
fn backlog_of_one(v: &mut Value, url: &str) {
    v["lifecycle"]["sinks"] = json!(["hook"]);
    v["lifecycle"]["sink"]["hook"] = json!({
        "kind": "webhook", "url": url,
        "secrets": ["whsec_dGhlIHJlY2VpdmVyJ3Mga2V5LCAzMiBieXRlcyBsb25n"],
        "retry": {"initial": "5ms", "max": "20ms", "max_retry_after": "20ms"},
    });
    v["audit"]["outbox_max_backlog"] = json!(1);
}

async fn patch_secret(node: &TestNode, secret: &str) -> Reply {
    node.call(
        Method::PATCH,
        &format!("{SOURCES}/s1"),
        WRITER,
        Some(json!({"secret": secret})),
    )
    .await
}

async fn wait_backlog_empty(node: &TestNode) {
    eventually(
        "the backlog to drain",
        Duration::from_secs(10),
        async || {
            let s = node
                .call(Method::GET, "/admin/v1/lifecycle", ADMIN, None)
                .await
                .json();
            s["backlog"] == 0
        },
    )
    .await;
}

/// With the backlog full, a change naming the source's secret is refused the same way
/// whether the secret is the one it has or not; with room again, the same secret writes a
/// row. `store` places the sources (local or Redis).
async fn a_refused_secret_change_tells_nothing(store: impl Fn(&mut Value)) {
    let receiver = Receiver::answering(503).await;
    let url = receiver.url();
    let node = TestNode::start_with(|v| {
        backlog_of_one(v, &url);
        store(v);
    })
    .await;
    let source = json!({"id": "s1", "kind": "webhook", "secret": RIGHT, "config": {}});
    let created = node.call(Method::POST, SOURCES, ADMIN, Some(source)).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);

    // The sink answers 503: the create's row stays unconfirmed and fills the backlog.
    let right = patch_secret(&node, RIGHT).await;
    let wrong = patch_secret(&node, WRONG).await;
    assert_eq!(
        right.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        right.text
    );
    assert_eq!(
        (right.status, &right.text, right.seq()),
        (wrong.status, &wrong.text, wrong.seq()),
        "the answer tells whether the secret was right"
    );
    assert_eq!(right.header("retry-after"), wrong.header("retry-after"));
    assert_eq!(right.code(), "audit_backlog");
    assert_eq!(node.rows().await.len(), 1, "a refusal writes no row");

    // Room again: the same secret is a change like any other, with its row.
    receiver.answer(200);
    wait_backlog_empty(&node).await;
    let same = patch_secret(&node, RIGHT).await;
    assert_eq!(same.status, StatusCode::OK, "{}", same.text);
    let seq = same.seq().expect("the same secret again writes a row");
    assert_eq!(same.header("etag").as_deref(), Some("\"2\""));
    assert_eq!(same.text, "", "a write-only token is not shown the subject");
    let row = node.row(seq).await;
    assert_eq!(row["action"], "source.update");
    assert_eq!(row["detail"], json!({"fields": 1}));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_change_of_a_local_source_does_not_tell_whether_its_secret_matched() {
    a_refused_secret_change_tells_nothing(|_| {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_change_of_a_redis_source_does_not_tell_whether_its_secret_matched() {
    let redis = RedisServer::start();
    let url = redis.url();
    a_refused_secret_change_tells_nothing(move |v| {
        v["sources"]["store"] = json!("redis");
        v["sources"]["redis_url"] = json!(url);
        v["settlement"]["interval"] = json!("100ms");
    })
    .await;
}
