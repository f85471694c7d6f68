//! Changes that relieve a full outbox backlog are never refused by it, over real HTTP: a
//! sink disabled at its position (a 410) holds the cursor while changes fill the backlog;
//! an operator's ordinary change is then refused (503 `audit_backlog`), but enabling the
//! sink, redriving or dropping its dead letters and taking a backup are accepted, each with
//! its row by the operator.

use std::path::Path;

use super::lifecycle::{create_source, hook_sink, read_until};
use crate::support::node::*;
use ankusa_sinks::test_support::Receiver;
use reqwest::Method;
use serde_json::{json, Value};

const ENABLE: &str = "/admin/v1/lifecycle/sinks/hook/enable";

/// Sink `hook` (a webhook to `url`), a backlog of three, backups beside the store.
fn relief_node(v: &mut Value, url: &str) {
    hook_sink(v, json!(["hook"]), url);
    v["audit"]["outbox_max_backlog"] = json!(3);
    let data = v["node"]["data_dir"].as_str().unwrap().to_owned();
    let backups = Path::new(&data).parent().unwrap().join("backups");
    v["node"]["backup_dir"] = json!(backups);
}

/// Creating source `id` is refused: the backlog is full, and nothing is written.
async fn refused_for_the_backlog(node: &TestNode, id: &str) {
    let rows = node.rows().await.len();
    let source = json!({"id": id, "kind": "webhook", "secret": "sekrit", "config": {}});
    let sources = "/admin/v1/tenants/t1/sources";
    let r = node.call(Method::POST, sources, WRITER, Some(source)).await;
    assert_error(&r, 503, "audit_backlog");
    assert_eq!(
        node.rows().await.len(),
        rows,
        "a refused change writes no row"
    );
}

/// `(action, resource, actor)` of row `seq`.
async fn who_did(node: &TestNode, seq: u64) -> (String, String, String) {
    let row = node.row(seq).await;
    let s = |k: &str| row[k].as_str().unwrap_or_default().to_owned();
    (s("action"), s("resource"), s("actor"))
}

fn row_of(action: &str, resource: &str, actor: &str) -> (String, String, String) {
    (action.into(), resource.into(), actor.into())
}

/// The lifecycle cursor and the outbox backlog, as `GET /admin/v1/lifecycle` shows them.
async fn cursor_and_backlog(node: &TestNode) -> (Option<u64>, Option<u64>) {
    let s = node
        .call(Method::GET, "/admin/v1/lifecycle", ADMIN, None)
        .await
        .json();
    (s["cursor"].as_u64(), s["backlog"].as_u64())
}

/// The disabled sink's backlog fills; an ordinary change is refused, the enable is not (its
/// row is the operator's), the sink drains the backlog, and ordinary changes are accepted
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_disabled_behind_a_full_backlog_is_enabled_and_drains_it() {
    let receiver = Receiver::answering(410).await;
    let url = receiver.url();
    let node = TestNode::start_with(|v| relief_node(v, &url)).await;
    create_source(&node, "s1").await;
    read_until(&node, "/admin/v1/lifecycle", |s| {
        s["sinks"][0]["state"] == "disabled"
    })
    .await;
    assert_eq!(who_did(&node, 2).await.0, "sink.disable");
    // s1 and the disable row wait behind the cursor; s2 fills the backlog.
    create_source(&node, "s2").await;
    assert_eq!(cursor_and_backlog(&node).await, (Some(0), Some(3)));
    refused_for_the_backlog(&node, "s3").await;

    receiver.answer(200);
    let r = node.call(Method::POST, ENABLE, WRITER, None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json(), json!({"enabled": "hook", "audit_seq": 4}));
    assert_eq!(
        who_did(&node, 4).await,
        row_of("sink.enable", "sinks/hook", "writer")
    );
    // The backlog is the writer's, the position the sink's once the writer answered its
    // write: the two meet a moment apart.
    let s = read_until(&node, "/admin/v1/lifecycle", |s| {
        s["backlog"] == 0 && s["sinks"][0]["position"] == 4
    })
    .await;
    assert_eq!(s["sinks"][0]["state"], "running");
    // Two subjects, two keys: sent side by side, so in either order.
    let mut delivered = receiver.sequences();
    delivered.sort_unstable();
    assert_eq!(delivered, vec![1, 3]);
    assert_eq!(create_source(&node, "s3").await.seq(), Some(5));
    node.stop().await;
}

/// With the backlog full behind a disabled sink, dropping and redriving its dead letters and
/// taking a backup are accepted, each with its row by the operator; ordinary changes are
/// still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_and_backups_are_accepted_with_the_backlog_full() {
    let receiver = Receiver::answering(400).await;
    let url = receiver.url();
    let node = TestNode::start_with(|v| relief_node(v, &url)).await;
    // Two events refused for good: dead-lettered, the position passes them.
    for id in ["s1", "s2"] {
        create_source(&node, id).await;
    }
    read_until(&node, "/admin/v1/lifecycle", |s| {
        s["sinks"][0]["dead_lettered"] == 2 && s["sinks"][0]["position"] == 2
    })
    .await;
    // Then the destination is gone: the sink stops at 2, and s3, its disable row and s4
    // fill the backlog.
    receiver.answer(410);
    create_source(&node, "s3").await;
    read_until(&node, "/admin/v1/lifecycle", |s| {
        s["sinks"][0]["state"] == "disabled"
    })
    .await;
    create_source(&node, "s4").await;
    assert_eq!(cursor_and_backlog(&node).await, (Some(2), Some(3)));
    refused_for_the_backlog(&node, "s5").await;

    let r = node
        .call(Method::POST, "/admin/v1/backups", WRITER, None)
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let backup = r.json()["id"].as_u64().unwrap();
    assert_eq!(r.seq(), Some(6));
    let letters = "/admin/v1/lifecycle/sinks/hook/dead-letters";
    let r = node
        .call(Method::DELETE, &format!("{letters}/2"), WRITER, None)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json(), json!({"dropped": 2, "audit_seq": 7}));
    receiver.answer(200);
    let r = node
        .call(Method::POST, &format!("{letters}/redrive"), WRITER, None)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json(), json!({"delivered": 1, "remaining": 0}));
    assert_eq!(receiver.sequences(), vec![1]);
    let expected = [
        row_of("backup.create", &format!("backups/{backup}"), "writer"),
        row_of("dead_letter.drop", "sinks/hook/dead-letters/2", "writer"),
        row_of("dead_letter.redrive", "sinks/hook/dead-letters/1", "writer"),
    ];
    for (seq, row) in (6..).zip(expected) {
        assert_eq!(who_did(&node, seq).await, row);
    }
    // The sink is still disabled, so the backlog is still full: ordinary changes wait.
    refused_for_the_backlog(&node, "s5").await;
    node.stop().await;
}
