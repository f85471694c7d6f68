//! The lifecycle admin API cut short: an enable whose client went away.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::api::lifecycle::{read_until, with_a_disabled_sink};
use crate::support::node::*;

/// An operator's enable whose client goes away while its row is being written still enables
/// the sink: the row never stands without the enable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enable_whose_client_went_away_still_enables_the_sink() {
    let scenario = fail::FailScenario::setup();
    let (receiver, node) = with_a_disabled_sink().await;
    receiver.answer(200);
    // The next group is held in the syncer until the client has given up.
    fail::cfg("audit::inline", "return").unwrap();
    let held = crate::support::paused::PausedAt::new("audit::sync_delay");
    let gone = node
        .req(
            Method::POST,
            "/admin/v1/lifecycle/sinks/hook/enable",
            Some(WRITER),
        )
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(gone.unwrap_err().is_timeout());
    held.release();
    let s = read_until(&node, "/admin/v1/lifecycle", |s| {
        s["sinks"][0]["position"] == 3
    })
    .await;
    assert_eq!(s["sinks"][0]["state"], "running");
    let actions: Vec<Value> = node
        .rows()
        .await
        .iter()
        .map(|r| r["action"].clone())
        .collect();
    assert_eq!(
        actions,
        [
            json!("source.create"),
            json!("sink.disable"),
            json!("sink.enable")
        ]
    );
    node.stop().await;
    scenario.teardown();
}
