//! A sink's dead letters have a ceiling (`lifecycle.max_dead_letters`), over real HTTP: a
//! receiver that refuses everything for good fills it, then the sink stops at the first
//! event it can no longer dead-letter (retrying, `dead_letters_full`) rather than pass over
//! it, until an operator drops (or redrives) dead letters.

use std::time::Duration;

use super::lifecycle::{create_source, hook_sink, read_until};
use crate::support::node::*;
use ankusa_sinks::test_support::Receiver;
use reqwest::Method;
use serde_json::{json, Value};

const LETTERS: &str = "/admin/v1/lifecycle/sinks/hook/dead-letters";

/// The seqs of the sink's dead letters.
async fn letters(node: &TestNode) -> Vec<u64> {
    let page = node.call(Method::GET, LETTERS, ADMIN, None).await.json();
    let letters = page["dead_letters"].as_array().unwrap();
    letters.iter().map(|l| l["seq"].as_u64().unwrap()).collect()
}

/// The value of the dead-letter gauge of sink `hook`, as `/metrics` shows it.
async fn letters_gauge(node: &TestNode) -> Option<String> {
    let metrics = node.metrics().await;
    let prefix = r#"ankusa_lifecycle_dead_letters{sink="hook"} "#;
    let line = metrics.lines().find(|l| l.starts_with(prefix))?;
    Some(line[prefix.len()..].to_owned())
}

/// Whether sink `hook` is retrying because its dead letters are full, after a few attempts.
fn stopped_full(s: &Value) -> bool {
    let sink = &s["sinks"][0];
    sink["state"] == "retrying"
        && sink["last_error"] == "dead_letters_full"
        && sink["retries"].as_u64() >= Some(3)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_stops_at_its_dead_letter_ceiling_until_an_operator_drops_some() {
    let receiver = Receiver::answering(401).await;
    let url = receiver.url();
    let node = TestNode::start_with(|v| {
        hook_sink(v, json!(["hook"]), &url);
        v["lifecycle"]["max_dead_letters"] = json!(3);
    })
    .await;
    for id in ["s1", "s2", "s3", "s4", "s5"] {
        create_source(&node, id).await;
    }
    // Three dead letters fill the ceiling; the fourth event is not passed over.
    let s = read_until(&node, "/admin/v1/lifecycle", stopped_full).await;
    assert_eq!(s["sinks"][0]["position"], 3);
    assert_eq!(s["sinks"][0]["dead_lettered"], 3);
    assert_eq!(s["cursor"], 3);
    assert_eq!(letters(&node).await, vec![1, 2, 3]);
    assert_eq!(letters_gauge(&node).await.as_deref(), Some("3"));
    // Still there a while later: retried, never passed over.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let s = node
        .call(Method::GET, "/admin/v1/lifecycle", ADMIN, None)
        .await
        .json();
    assert_eq!(s["sinks"][0]["position"], 3);
    assert_eq!(letters(&node).await, vec![1, 2, 3]);
    assert!(receiver.requests().len() > 4, "the fourth event is retried");

    // The operator drops two (rows 6 and 7): the sink dead-letters the fourth and fifth
    // events and goes on, over the drops' rows, which publish nothing.
    for seq in [1, 2] {
        let r = node
            .call(Method::DELETE, &format!("{LETTERS}/{seq}"), WRITER, None)
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    let s = read_until(&node, "/admin/v1/lifecycle", |s| {
        s["sinks"][0]["position"] == 7
    })
    .await;
    assert_eq!(s["sinks"][0]["state"], "running");
    assert_eq!(s["sinks"][0]["dead_lettered"], 5);
    assert_eq!(letters(&node).await, vec![3, 4, 5]);
    assert_eq!(letters_gauge(&node).await.as_deref(), Some("3"));
    // The drops' rows are the operator's; no sink.disable row: the sink was never disabled.
    let actions: Vec<Value> = node
        .rows()
        .await
        .iter()
        .map(|r| r["action"].clone())
        .collect();
    assert_eq!(
        actions[5..],
        [json!("dead_letter.drop"), json!("dead_letter.drop")]
    );

    // A receiver that accepts again: the next event is delivered, the ceiling aside.
    receiver.answer(200);
    create_source(&node, "s6").await;
    read_until(&node, "/admin/v1/lifecycle", |s| {
        s["sinks"][0]["position"] == 8 && s["sinks"][0]["state"] == "running"
    })
    .await;
    assert_eq!(receiver.sequences(), vec![8]);
    node.stop().await;
}
