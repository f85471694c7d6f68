//! The console at `/console/`: its HTTP rules (sessions, CSRF, scopes, headers, off) with a
//! plain client, and its pages in a real browser.

mod browser;
mod http;
mod pages;

use ankusa_sinks::test_support::Receiver;
use serde_json::json;

use crate::api::lifecycle::{create_source, hook_sink, read_until};
use crate::support::node::TestNode;

/// A node whose webhook sink `hook` its receiver disabled (a 410) at the first event: rows
/// 1 (`source.create` of s1) and 2 (`sink.disable`).
async fn with_a_disabled_sink() -> (Receiver, TestNode) {
    let receiver = Receiver::answering(410).await;
    let url = receiver.url();
    let node = TestNode::start_with(|v| hook_sink(v, json!(["hook"]), &url)).await;
    create_source(&node, "s1").await;
    read_until(&node, "/admin/v1/lifecycle", |s| {
        s["sinks"][0]["state"] == "disabled"
    })
    .await;
    (receiver, node)
}
