//! `GET /admin/v1/audit` with `Accept: application/x-ndjson`, over real HTTP: the export of
//! a filtered window holds exactly the rows the JSON list pages give for the same filter, up
//! to its checkpoint's size, and every row is checked as a receiver without the node would:
//! its leaf input is the row, its proof verifies with ct-merkle against the checkpoint's
//! root, whose Ed25519 signature verifies with ring; a tampered leaf input does not.

use reqwest::Method;
use serde_json::{json, Value};

use crate::api::audit_proof::{leaf_input_of, proves, signed_root, tampered, verifier_key};
use crate::support::node::*;

/// The export of `query` with `token`, as sent.
pub(crate) async fn export(node: &TestNode, query: &str, token: &str) -> Reply {
    let rb = node
        .req(
            Method::GET,
            &format!("/admin/v1/audit?{query}"),
            Some(token),
        )
        .header("accept", "application/x-ndjson");
    node.send(rb).await
}

/// An export's lines, parsed.
pub(crate) fn lines(text: &str) -> Vec<Value> {
    assert!(text.ends_with('\n'), "every line ends: {text:?}");
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The rows of `query` through the JSON list, two a page, following `next`.
async fn listed(node: &TestNode, query: &str) -> Vec<Value> {
    let (mut rows, mut after) = (Vec::new(), 0);
    loop {
        let path = format!("/admin/v1/audit?{query}&limit=2&after={after}");
        let r = node.call(Method::GET, &path, AUDITOR, None).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let page = r.json();
        rows.extend(page["rows"].as_array().unwrap().iter().cloned());
        match page["next"].as_u64() {
            Some(next) => after = next,
            None => return rows,
        }
    }
}

/// The export of `query`, checked line by line; its rows and its end line.
async fn checked(node: &TestNode, query: &str, key: &str) -> (Vec<Value>, Value) {
    let r = export(node, query, AUDITOR).await;
    assert_eq!(r.status, 200, "{query}: {}", r.text);
    assert_eq!(r.header("content-type").unwrap(), "application/x-ndjson");
    let mut lines = lines(&r.text);
    let end = lines.pop().unwrap();
    let head = lines.remove(0);
    let served = node
        .call(Method::GET, "/admin/v1/audit/checkpoint", AUDITOR, None)
        .await
        .json();
    assert_eq!(head["checkpoint"], served, "the newest checkpoint");
    let root = signed_root(&head["checkpoint"], key);
    let first = head["first"].as_u64().unwrap();
    let mut rows = Vec::new();
    for line in lines {
        let row = &line["row"];
        let seq = row["seq"].as_u64().unwrap();
        assert_eq!(row, &node.row(seq).await, "the row as GET serves it");
        let input = leaf_input_of(&line["leaf_input"], row);
        let index = line["index"].as_u64().unwrap();
        assert_eq!(index, seq - first);
        assert!(proves(&root, &input, index, &line["proof"]), "row {seq}");
        assert!(!proves(&root, &tampered(&input), index, &line["proof"]));
        rows.push(row.clone());
    }
    assert_eq!(end["end"]["rows"], json!(rows.len()), "{end}");
    (rows, end["end"].clone())
}

fn seqs(rows: &[Value]) -> Vec<u64> {
    rows.iter().map(|r| r["seq"].as_u64().unwrap()).collect()
}

async fn create(node: &TestNode, token: &str, id: &str) {
    let body = json!({"id": id, "kind": "webhook", "secret": "pw", "config": {}});
    let path = "/admin/v1/tenants/t1/sources";
    let r = node.call(Method::POST, path, token, Some(body)).await;
    assert_eq!(r.status, 201, "{}", r.text);
}

/// A node whose checkpoint (row 7) covers rows 1 to 6, with row 8 after it: alice made rows
/// 1, 3, 5 and writer 2, 4, 6, 8; rows 1 and 4 are of `sources/s1`.
pub(crate) async fn exported_node() -> TestNode {
    let node = TestNode::start_with(|v| {
        v["audit"]["checkpoint_rows"] = json!(6);
        // No checkpoint by time, however slow the run: rows 7 and 8 stay as said.
        v["audit"]["checkpoint_interval"] = json!("1h");
    })
    .await;
    create(&node, ADMIN, "s1").await;
    create(&node, WRITER, "s2").await;
    create(&node, ADMIN, "s3").await;
    let patch = json!({"config": {"a": 1}});
    let path = "/admin/v1/tenants/t1/sources/s1";
    let r = node.call(Method::PATCH, path, WRITER, Some(patch)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    create(&node, ADMIN, "s4").await;
    create(&node, WRITER, "s5").await;
    create(&node, WRITER, "s6").await;
    let rows = node.rows().await;
    assert_eq!(rows[6]["action"], "trail.checkpoint", "row 7: {}", rows[6]);
    assert_eq!(rows.len(), 8);
    node
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_holds_the_lists_rows_each_proven_against_the_checkpoint() {
    let node = exported_node().await;
    let key = verifier_key(&node);
    // By actor: the list's rows up to the checkpoint's size; row 8 matches but is after it.
    let (rows, end) = checked(&node, "actor=writer", &key).await;
    let by_writer = listed(&node, "actor=writer").await;
    assert_eq!(seqs(&by_writer), vec![2, 4, 6, 8]);
    assert_eq!(rows, by_writer[..3]);
    assert_eq!(end, json!({"rows": 3, "next": 6, "reason": "checkpoint"}));
    // Every row, from `after`.
    let (rows, end) = checked(&node, "tenant=t1&after=2", &key).await;
    assert_eq!(seqs(&rows), vec![3, 4, 5, 6]);
    assert_eq!(end["reason"], "checkpoint");
    // A window that ends before the checkpoint: complete.
    let (rows, end) = checked(&node, "resource=sources/s1", &key).await;
    assert_eq!(rows, listed(&node, "resource=sources/s1").await);
    assert_eq!(seqs(&rows), vec![1, 4]);
    assert_eq!(end, json!({"rows": 2, "next": null, "reason": "complete"}));
    // `limit` caps the rows; `next` goes on.
    let (rows, end) = checked(&node, "actor=alice&limit=2", &key).await;
    assert_eq!(seqs(&rows), vec![1, 3]);
    assert_eq!(end, json!({"rows": 2, "next": 3, "reason": "limit"}));
    let (rows, _) = checked(&node, "actor=alice&after=3&result=ok", &key).await;
    assert_eq!(seqs(&rows), vec![5]);
    // The list itself is unchanged without the header.
    let r = node
        .call(Method::GET, "/admin/v1/audit?actor=writer", AUDITOR, None)
        .await;
    assert_eq!(r.header("content-type").unwrap(), "application/json");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_is_refused_without_a_checkpoint_a_tree_or_the_scope() {
    let node = TestNode::start().await;
    create(&node, ADMIN, "s1").await;
    // No checkpoint yet (one every 10,000 rows by default).
    let r = export(&node, "", AUDITOR).await;
    assert_error(&r, 404, "not_found");
    assert!(r.text.contains("checkpoint"), "{}", r.text);
    let r = export(&node, "", READER).await;
    assert_error(&r, 403, "forbidden");
    for query in ["limit=0", "limit=1001", "from=yesterday", "actor="] {
        let r = export(&node, query, AUDITOR).await;
        assert_error(&r, 400, "bad_request");
    }
    node.stop().await;
    let node = TestNode::start_with(|v| v["audit"]["tree"] = json!(false)).await;
    create(&node, ADMIN, "s1").await;
    let r = export(&node, "", AUDITOR).await;
    assert_error(&r, 409, "conflict");
    node.stop().await;
}
