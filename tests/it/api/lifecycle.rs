//! `/admin/v1/lifecycle` over real HTTP: the publisher's status, a sink's dead letters
//! listed, redriven (same id, one audit row each) and dropped, and a sink its destination
//! disabled enabled again.

use std::time::Duration;

use crate::support::eventually;
use crate::support::node::*;
use crate::support::schemas;
use ankusa_sinks::test_support::Receiver;
use reqwest::Method;
use serde_json::{json, Value};

/// The JSON `path` answers, once `check` holds of it.
pub(crate) async fn read_until(
    node: &TestNode,
    path: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let read = async || {
        let value = node.call(Method::GET, path, ADMIN, None).await.json();
        check(&value).then_some(value)
    };
    let what = format!("GET {path} to answer as expected");
    eventually(&what, Duration::from_secs(30), read).await
}

/// The value of `series` (a name and its labels, as rendered) in a `/metrics` text.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Lists `sinks` and defines sink `hook`: a webhook to `url` that retries quickly.
pub(crate) fn hook_sink(v: &mut Value, sinks: Value, url: &str) {
    v["lifecycle"]["sinks"] = sinks;
    v["lifecycle"]["sink"]["hook"] = json!({
        "kind": "webhook", "url": url,
        "secrets": ["whsec_dGhlIHJlY2VpdmVyJ3Mga2V5LCAzMiBieXRlcyBsb25n"],
        "retry": {"initial": "5ms", "max": "20ms", "max_retry_after": "20ms"},
    });
}

/// A node whose webhook sink `hook` its receiver disabled (a 410) at the first event: rows
/// 1 (`source.create` of s1) and 2 (`sink.disable`).
pub(crate) async fn with_a_disabled_sink() -> (Receiver, TestNode) {
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

/// Creates source `id` of tenant t1 (a lifecycle event) and returns the reply.
pub(crate) async fn create_source(node: &TestNode, id: &str) -> Reply {
    create_source_with(node, id, json!({})).await
}

/// Creates source `id` of tenant t1 with `config` and returns the reply.
pub(crate) async fn create_source_with(node: &TestNode, id: &str, config: Value) -> Reply {
    let source = json!({"id": id, "kind": "webhook", "secret": "sekrit", "config": config});
    let r = node
        .call(
            Method::POST,
            "/admin/v1/tenants/t1/sources",
            ADMIN,
            Some(source),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_dead_letters_redrive_and_drop() {
    let receiver = Receiver::answering(400).await;
    let url = receiver.url();
    let node = TestNode::start_with(|v| {
        let path = v["node"]["data_dir"].as_str().unwrap().to_owned() + "/events.jsonl";
        hook_sink(v, json!(["file", "hook"]), &url);
        v["lifecycle"]["sink"]["file"]["path"] = json!(path);
    })
    .await;
    for id in ["s1", "s2"] {
        create_source(&node, id).await;
    }
    // Both events reach the file sink; the webhook refuses both for good (400).
    let s = read_until(&node, "/admin/v1/lifecycle", |s| {
        s["sinks"]
            .as_array()
            .is_some_and(|a| a.iter().all(|k| k["position"] == 2))
    })
    .await;
    assert_eq!(s["enabled"], true);
    assert_eq!(s["audit_seq"], 2);
    assert_eq!(s["cursor"], 2);
    assert_eq!(s["backlog"], 0);
    assert_eq!(s["sinks"][0]["name"], "file");
    assert_eq!(s["sinks"][0]["delivered"], 2);
    assert_eq!(s["sinks"][1]["name"], "hook");
    assert_eq!(s["sinks"][1]["dead_lettered"], 2);
    assert_eq!(s["incarnations"].as_array().unwrap().len(), 1);
    assert_eq!(s["trail"]["usage"]["rows"], 2);
    assert_eq!(s["trail"]["ceilings"]["max_rows"], 10_000_000);
    assert_eq!(s["trail"]["refused"], 0);
    // The same figures as Prometheus metrics, per sink.
    let metrics = node.metrics().await;
    for line in [
        r#"ankusa_lifecycle_delivered_total{sink="file"} 2"#,
        // Each event, delivered or dead-lettered, from its commit to its confirmation.
        r#"ankusa_lifecycle_confirmed_seconds_count{sink="file"} 2"#,
        r#"ankusa_lifecycle_confirmed_seconds_count{sink="hook"} 2"#,
        r#"ankusa_lifecycle_dead_lettered_total{sink="hook"} 2"#,
        r#"ankusa_lifecycle_sink_position{sink="hook"} 2"#,
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "missing {line} in\n{metrics}"
        );
    }

    let letters = node
        .call(
            Method::GET,
            "/admin/v1/lifecycle/sinks/hook/dead-letters?limit=1",
            ADMIN,
            None,
        )
        .await;
    assert_eq!(letters.status, 200);
    let page = letters.json();
    assert_eq!(page["dead_letters"][0]["seq"], 1);
    assert_eq!(page["dead_letters"][0]["reason"], "http_400");
    assert_eq!(page["next"], 1);
    // A dead letter keeps the event as it was sent, its data of its schema.
    schemas::check(&page["dead_letters"][0]["event"]);
    let first_id = page["dead_letters"][0]["event"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        !letters.text.contains("sekrit"),
        "no secret in a dead letter"
    );

    // Reading needs admin:read, redriving admin:write; neither refusal writes a row.
    let r = node
        .call(
            Method::POST,
            "/admin/v1/lifecycle/sinks/hook/dead-letters/redrive",
            READER,
            None,
        )
        .await;
    assert_error(&r, 403, "forbidden");
    let r = node
        .call(
            Method::GET,
            "/admin/v1/lifecycle/sinks/nope/dead-letters",
            ADMIN,
            None,
        )
        .await;
    assert_error(&r, 404, "not_found");

    // Drop seq 2; redrive the rest (seq 1) once the receiver accepts: same id.
    let r = node
        .call(
            Method::DELETE,
            "/admin/v1/lifecycle/sinks/hook/dead-letters/2",
            WRITER,
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["dropped"], 2);
    let r = node
        .call(
            Method::DELETE,
            "/admin/v1/lifecycle/sinks/hook/dead-letters/2",
            WRITER,
            None,
        )
        .await;
    assert_error(&r, 404, "not_found");
    receiver.answer(200);
    let r = node
        .call(
            Method::POST,
            "/admin/v1/lifecycle/sinks/hook/dead-letters/redrive",
            WRITER,
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json(), json!({"delivered": 1, "remaining": 0}));
    assert_eq!(receiver.ids(), vec![first_id]);
    // Every request the webhook got, refused or not, carried an event of its schema.
    let requests = receiver.requests();
    let types: Vec<String> = requests.iter().flat_map(schemas::check_request).collect();
    assert!(types.len() >= 3, "{types:?}");
    assert!(
        types.iter().all(|t| t == "io.ankusa.source.created"),
        "{types:?}"
    );
    let empty = node
        .call(
            Method::GET,
            "/admin/v1/lifecycle/sinks/hook/dead-letters",
            ADMIN,
            None,
        )
        .await;
    assert_eq!(empty.json()["dead_letters"], json!([]));

    // Exactly two rows more than the two creates: the drop and the redrive, by `writer`.
    let rows = node.rows().await;
    let tail: Vec<(String, String, String)> = rows[2..]
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap().to_owned();
            (s("action"), s("resource"), s("actor"))
        })
        .collect();
    assert_eq!(
        tail,
        vec![
            (
                "dead_letter.drop".into(),
                "sinks/hook/dead-letters/2".into(),
                "writer".into()
            ),
            (
                "dead_letter.redrive".into(),
                "sinks/hook/dead-letters/1".into(),
                "writer".into()
            ),
        ]
    );
    node.stop().await;
}

/// A webhook answering 410 disables its sink at its position; once the destination is
/// mended, an operator enables it again (one `sink.enable` row) and it resumes from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_sink_is_enabled_again_by_an_operator() {
    let receiver = Receiver::answering(410).await;
    let url = receiver.url();
    let node = TestNode::start_with(|v| hook_sink(v, json!(["hook"]), &url)).await;
    let enable = "/admin/v1/lifecycle/sinks/hook/enable";
    let r = node.call(Method::POST, enable, WRITER, None).await;
    assert_error(&r, 409, "conflict");
    create_source(&node, "s1").await;
    let s = read_until(&node, "/admin/v1/lifecycle", |s| {
        s["sinks"][0]["state"] == "disabled"
    })
    .await;
    assert_eq!(s["sinks"][0]["position"], 0);
    assert_eq!(s["sinks"][0]["last_error"], "http_410");
    // The node's own change of the sink's state is in the trail, before the status shows it.
    let row = node.row(2).await;
    assert_eq!(
        (&row["action"], &row["resource"], &row["actor"]),
        (
            &json!("sink.disable"),
            &json!("sinks/hook"),
            &json!("system")
        )
    );
    assert_eq!(
        row["detail"],
        json!({"sink": "hook", "reason": "http_410", "position": 0})
    );
    assert_eq!(row["publish"], false);
    // The metrics say so as of each scrape: the state, and a lag that grows while the sink
    // confirms nothing (what the deploy/ alerts read).
    let scraped = async || {
        let metrics = reqwest::get(node.url("/metrics"))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        let lag = sample(
            &metrics,
            r#"ankusa_lifecycle_sink_lag_seconds{sink="hook"}"#,
        )?;
        (lag >= 2.0).then_some(metrics)
    };
    let metrics = eventually("the lag to grow", Duration::from_secs(30), scraped).await;
    for (state, value) in [
        ("running", 0.0),
        ("retrying", 0.0),
        ("disabled", 1.0),
        ("stopped", 0.0),
    ] {
        let series = format!(r#"ankusa_lifecycle_sink_state{{sink="hook",state="{state}"}}"#);
        assert_eq!(
            sample(&metrics, &series),
            Some(value),
            "{series} in\n{metrics}"
        );
    }

    // Refused without admin:write, or for a sink nobody configured: no row either way.
    let r = node.call(Method::POST, enable, READER, None).await;
    assert_error(&r, 403, "forbidden");
    let r = node
        .call(
            Method::POST,
            "/admin/v1/lifecycle/sinks/nope/enable",
            WRITER,
            None,
        )
        .await;
    assert_error(&r, 404, "not_found");
    assert_eq!(node.rows().await.len(), 2);

    receiver.answer(200);
    // Two operators at once: one enables it (one row), the other hears it is not disabled.
    let (a, b) = tokio::join!(
        node.call(Method::POST, enable, WRITER, None),
        node.call(Method::POST, enable, WRITER, None)
    );
    let (r, other) = if a.status == 200 { (a, b) } else { (b, a) };
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json(), json!({"enabled": "hook", "audit_seq": 3}));
    assert_error(&other, 409, "conflict");
    let s = read_until(&node, "/admin/v1/lifecycle", |s| {
        s["sinks"][0]["position"] == 3
    })
    .await;
    assert_eq!(s["sinks"][0]["state"], "running");
    assert_eq!(receiver.sequences(), vec![1]);
    let metrics = node.metrics().await;
    for (state, value) in [("running", 1.0), ("disabled", 0.0)] {
        let series = format!(r#"ankusa_lifecycle_sink_state{{sink="hook",state="{state}"}}"#);
        assert_eq!(
            sample(&metrics, &series),
            Some(value),
            "{series} in\n{metrics}"
        );
    }
    let row = node.row(3).await;
    assert_eq!(
        (&row["action"], &row["resource"], &row["actor"]),
        (
            &json!("sink.enable"),
            &json!("sinks/hook"),
            &json!("writer")
        )
    );
    assert_eq!(row["publish"], false);
    let r = node.call(Method::POST, enable, WRITER, None).await;
    assert_error(&r, 409, "conflict");
    assert_eq!(node.rows().await.len(), 3);
    node.stop().await;
}

/// Lifecycle events turned off with a sink still listed: no new change is flagged, but the
/// events already in the outbox still reach the sink; meanwhile its position holds the trail
/// back (the cursor retention and the ceilings respect) and, once it is delivering, passes
/// over the rows that publish nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turned_off_with_a_sink_listed_the_outbox_still_reaches_it() {
    let receiver = Receiver::answering(503).await;
    let url = receiver.url();
    let hook = move |v: &mut Value| hook_sink(v, json!(["hook"]), &url);
    let node = TestNode::start_with(hook.clone()).await;
    for id in ["s1", "s2"] {
        create_source(&node, id).await;
    }
    // The receiver answers 503: both events wait in the outbox.
    let dir = node.stop().await;

    let node = TestNode::start_on(dir, |v| {
        hook(v);
        v["lifecycle"]["enabled"] = json!(false);
    })
    .await;
    let s = node
        .call(Method::GET, "/admin/v1/lifecycle", ADMIN, None)
        .await
        .json();
    assert_eq!(s["enabled"], false);
    assert_eq!(
        s["cursor"], 0,
        "the listed sink holds every row it has not seen"
    );
    assert_eq!(s["sinks"][0]["position"], 0);
    assert_eq!(create_source(&node, "s3").await.seq(), Some(3));
    assert_eq!(
        node.row(3).await["publish"],
        false,
        "nothing new is flagged"
    );
    let s = node
        .call(Method::GET, "/admin/v1/lifecycle", ADMIN, None)
        .await
        .json();
    assert_eq!(
        s["backlog"], 3,
        "m:audit_seq minus the cursor, the unflagged row included"
    );

    receiver.answer(200);
    let s = read_until(&node, "/admin/v1/lifecycle", |s| s["cursor"] == 3).await;
    assert_eq!(s["backlog"], 0);
    assert_eq!(s["sinks"][0]["position"], 3);
    // Two subjects, two keys: sent concurrently, so in either order; and at least once (the
    // receiver may have turned to 200 between the two requests of one attempt, and the
    // attempt is resent from the event that failed).
    let mut delivered = receiver.sequences();
    delivered.sort_unstable();
    delivered.dedup();
    assert_eq!(delivered, vec![1, 2], "the events already in the outbox");
    node.stop().await;
}
