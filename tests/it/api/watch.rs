//! `GET /admin/v1/lifecycle/events` over real HTTP: the sinks' events byte for byte, a
//! long-poll woken by the commit, filters, the scope, server-sent events resumed with
//! `Last-Event-ID`, bookmarks whose checkpoint `ankusa audit verify` accepts, 410 for a
//! position whose rows are gone, and `api.max_watchers`.

use std::time::{Duration, Instant};

use crate::api::lifecycle::{create_source, read_until};
use crate::support::node::*;
use crate::support::trail::{create_source as trail_source, ctx, open_trail_with};
use ankusa::audit::{Limits, TrailOptions};
use eventsource_stream::{Event as Sse, Eventsource};
use futures::{Stream, StreamExt};
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

const EVENTS: &str = "/admin/v1/lifecycle/events";

/// A long-poll's answer, its events as the bytes served.
#[derive(Debug, Deserialize)]
struct Answer {
    events: Vec<Box<RawValue>>,
    position: u64,
    incarnation: String,
    latest: u64,
}

impl Answer {
    fn seqs(&self) -> Vec<u64> {
        self.events.iter().map(|e| seq_of(e.get())).collect()
    }
}

/// The seq of an event (its `sequence` extension, 20 digits).
fn seq_of(event: &str) -> u64 {
    let v: Value = serde_json::from_str(event).unwrap();
    v["sequence"].as_str().unwrap().parse().unwrap()
}

async fn poll(node: &TestNode, query: &str) -> Reply {
    node.send(node.req(Method::GET, &format!("{EVENTS}?{query}"), Some(WATCHER)))
        .await
}

async fn answer(node: &TestNode, query: &str) -> Answer {
    let r = poll(node, query).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    serde_json::from_str(&r.text).unwrap()
}

/// A stream of server-sent events from `query`, resumed after `last` if given.
async fn stream(
    node: &TestNode,
    query: &str,
    last: Option<u64>,
) -> impl Stream<Item = Sse> + Unpin {
    let mut rb = node
        .req(Method::GET, &format!("{EVENTS}?{query}"), Some(WATCHER))
        .header("accept", "text/event-stream");
    if let Some(last) = last {
        rb = rb.header("last-event-id", last.to_string());
    }
    let r = rb.send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let chunks = futures::stream::unfold(r, |mut r| async move {
        match r.chunk().await {
            Ok(Some(chunk)) => Some((Ok::<_, reqwest::Error>(chunk), r)),
            _ => None,
        }
    });
    Box::pin(
        chunks
            .eventsource()
            .map(|e| e.expect("a server-sent event")),
    )
}

/// The next `n` events of a stream, bookmarks skipped.
async fn next_events(events: &mut (impl Stream<Item = Sse> + Unpin), n: usize) -> Vec<Sse> {
    let mut got = Vec::new();
    while got.len() < n {
        let event = tokio::time::timeout(Duration::from_secs(20), events.next())
            .await
            .expect("an event within 20s")
            .expect("the stream goes on");
        if event.event == "cloudevent" {
            got.push(event);
        }
    }
    got
}

fn file_sink(v: &mut Value) -> std::path::PathBuf {
    let path = std::path::PathBuf::from(v["node"]["data_dir"].as_str().unwrap()).join("ev.jsonl");
    v["lifecycle"]["sinks"] = json!(["file"]);
    v["lifecycle"]["sink"]["file"]["path"] = json!(path);
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_serves_the_sinks_bytes_and_wakes_on_the_commit() {
    let mut events_file = None;
    let node = TestNode::start_with(|v| events_file = Some(file_sink(v))).await;
    for id in ["s1", "s2", "s3"] {
        create_source(&node, id).await;
    }
    read_until(&node, "/admin/v1/lifecycle", |s| {
        s["sinks"][0]["position"] == 3
    })
    .await;
    let lines = std::fs::read_to_string(events_file.unwrap()).unwrap();
    let lines: Vec<&str> = lines.lines().collect();
    // The same events as the file sink wrote, byte for byte, and the same bytes again.
    let first = poll(&node, "after=0").await;
    let page: Answer = serde_json::from_str(&first.text).unwrap();
    let served: Vec<&str> = page.events.iter().map(|e| e.get()).collect();
    assert_eq!(served, lines);
    let status = node
        .call(Method::GET, "/admin/v1/lifecycle", ADMIN, None)
        .await
        .json();
    assert_eq!(
        (page.position, page.latest, json!(page.incarnation)),
        (3, 3, status["incarnations"][0]["id"].clone())
    );
    assert_eq!(poll(&node, "after=0").await.text, first.text);
    assert_eq!(answer(&node, "after=1&limit=1").await.seqs(), vec![2]);
    // Nothing after 3: a long-poll waits, listed with its position, until the commit.
    let waiting = {
        let url = node.url(&format!("{EVENTS}?after=3&wait=20s"));
        tokio::spawn(async move {
            let r = reqwest::Client::new()
                .get(url)
                .bearer_auth(WATCHER)
                .send()
                .await;
            let text = r.unwrap().text().await.unwrap();
            (
                Instant::now(),
                serde_json::from_str::<Answer>(&text).unwrap(),
            )
        })
    };
    let status = read_until(&node, "/admin/v1/lifecycle", |s| {
        s["watchers"].as_array().is_some_and(|w| w.len() == 1)
    })
    .await;
    assert_eq!(status["watchers"][0]["position"], 3);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "a long-poll answered with nothing to say"
    );
    create_source(&node, "s4").await;
    let committed = Instant::now();
    let (answered, page) = waiting.await.unwrap();
    // Woken by the commit: far sooner than the 20 s wait.
    assert!(answered.duration_since(committed) < Duration::from_secs(2));
    assert_eq!((page.seqs(), page.position), (vec![4], 4));
    // The wait runs out: no events, the same position.
    let started = Instant::now();
    let page = answer(&node, "after=4&wait=300ms").await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!((page.seqs(), page.position, page.latest), (vec![], 4, 4));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_pick_types_and_tenants_and_the_position_passes_the_rest() {
    let node = TestNode::start().await;
    create_source(&node, "s1").await; // 1: t1 source
    let route = json!({"id": "r1", "source": "s1", "destination": "https://example.test/in"});
    let r = node
        .call(
            Method::POST,
            "/admin/v1/tenants/t1/routes",
            ADMIN,
            Some(route),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text); // 2: t1 route
    let source = json!({"id": "s2", "kind": "webhook", "secret": "sekrit", "config": {}});
    let r = node
        .call(
            Method::POST,
            "/admin/v1/tenants/t2/sources",
            ADMIN,
            Some(source),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text); // 3: t2 source
    let page = answer(&node, "types=io.ankusa.route.*").await;
    assert_eq!((page.seqs(), page.position), (vec![2], 3));
    let page = answer(&node, "types=io.ankusa.source.created&tenant=t2").await;
    assert_eq!((page.seqs(), page.position), (vec![3], 3));
    let page = answer(&node, "tenant=t9").await;
    assert_eq!((page.seqs(), page.position), (vec![], 3));
    // A full page stops at its last event, whatever follows.
    let page = answer(&node, "tenant=t1&limit=1").await;
    assert_eq!((page.seqs(), page.position), (vec![1], 1));
    for (query, status, code) in [
        ("types=io.*.route", 422, "invalid_input"),
        ("tenant=", 422, "invalid_input"),
        ("wait=51s", 422, "invalid_input"),
        ("wait=50001ms", 422, "invalid_input"),
        ("bookmark=50ms", 422, "invalid_input"),
        ("wait=", 400, "bad_request"),
        ("wait=1m", 400, "bad_request"),
        ("wait=1.5s", 400, "bad_request"),
        ("limit=0", 400, "bad_request"),
        ("after=-1", 400, "bad_request"),
        ("incarnation=nope", 400, "bad_request"),
        ("since=1", 400, "bad_request"),
    ] {
        assert_error(&poll(&node, query).await, status, code);
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_events_read_watches_and_it_may_ask_for_a_snapshot() {
    let node = TestNode::start().await;
    create_source(&node, "s1").await;
    let anonymous = node.send(node.req(Method::GET, EVENTS, None)).await;
    assert_error(&anonymous, 401, "unauthorized");
    for token in [ADMIN, READER, WRITER, AUDITOR] {
        let r = node.call(Method::GET, EVENTS, token, None).await;
        assert_error(&r, 403, "forbidden");
        assert!(r.text.contains("events:read"), "{}", r.text);
    }
    assert_eq!(answer(&node, "").await.seqs(), vec![1]);
    // A consumer's token reads nothing else...
    for path in [
        "/admin/v1/audit",
        "/admin/v1/tenants/t1/sources",
        "/admin/v1/lifecycle",
    ] {
        assert_error(
            &node.call(Method::GET, path, WATCHER, None).await,
            403,
            "forbidden",
        );
    }
    // ...but may ask for a snapshot to relist, and its row names it.
    let r = node
        .call(Method::POST, "/admin/v1/lifecycle/snapshot", WATCHER, None)
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    let row = node.row(r.seq().unwrap()).await;
    assert_eq!(
        (row["action"].clone(), row["actor"].clone()),
        (json!("snapshot.request"), json!("watcher"))
    );
    let r = node
        .call(Method::POST, "/admin/v1/lifecycle/snapshot", READER, None)
        .await;
    assert_error(&r, 403, "forbidden");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_resumed_with_last_event_id_loses_and_repeats_nothing() {
    let node = std::sync::Arc::new(TestNode::start().await);
    for i in 1..=5 {
        create_source(&node, &format!("s{i}")).await;
    }
    let mut events = stream(&node, "after=0", None).await;
    let first = next_events(&mut events, 3).await;
    drop(events);
    // Changes go on while the watcher is away and after it is back.
    let writer = {
        let node = node.clone();
        tokio::spawn(async move {
            for i in 6..=25 {
                create_source(&node, &format!("s{i}")).await;
            }
        })
    };
    let last: u64 = first.last().unwrap().id.parse().unwrap();
    let mut events = stream(&node, "", Some(last)).await;
    let rest = next_events(&mut events, 22).await;
    writer.await.unwrap();
    let ids: Vec<u64> = first
        .iter()
        .chain(&rest)
        .map(|e| e.id.parse().unwrap())
        .collect();
    assert_eq!(ids, (1..=25).collect::<Vec<u64>>());
    // Each event's data is the event a long-poll serves, byte for byte.
    let polled = answer(&node, "after=0&limit=1000").await;
    let streamed: Vec<&str> = first.iter().chain(&rest).map(|e| e.data.as_str()).collect();
    let served: Vec<&str> = polled.events.iter().map(|e| e.get()).collect();
    assert_eq!(streamed, served);
    drop(events);
    std::sync::Arc::into_inner(node).unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_carry_the_position_and_a_checkpoint_audit_verify_accepts() {
    let node = TestNode::start_with(|v| {
        v["audit"]["checkpoint_rows"] = json!(1);
    })
    .await;
    // A filter that admits nothing: only bookmarks come, and they pass the changes.
    let mut events = stream(&node, "types=io.ankusa.route.*&bookmark=200ms", None).await;
    for id in ["s1", "s2"] {
        create_source(&node, id).await;
    }
    let bookmark = loop {
        let event = tokio::time::timeout(Duration::from_secs(20), events.next())
            .await
            .expect("a bookmark within 20s")
            .expect("the stream goes on");
        assert_eq!(event.event, "bookmark", "{event:?}");
        let data: Value = serde_json::from_str(&event.data).unwrap();
        assert_eq!(event.id, data["position"].to_string());
        if data["position"] == data["latest"] && data["checkpoint"]["size"].as_u64() >= Some(2) {
            break data;
        }
    };
    drop(events);
    let dir = node.stop().await;
    let file = dir.path().join("checkpoint.txt");
    std::fs::write(
        &file,
        bookmark["checkpoint"]["checkpoint"].as_str().unwrap(),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .args(["audit", "verify", "--store"])
        .arg(dir.path().join("data"))
        .arg("--checkpoint")
        .arg(&file)
        .env_remove("ANKUSA_CONFIG")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}");
    let size = &bookmark["checkpoint"]["size"];
    assert!(
        said.contains(&format!(": verified at size {size}\n")),
        "{said}"
    );
}

/// A store of 10 source events of which a ceiling of 5 rows kept the last 5.
async fn pruned_store() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let options = TrailOptions {
        lifecycle: true,
        limits: Limits {
            max_rows: 5,
            ..Limits::default()
        },
        ..TrailOptions::default()
    };
    let trail = open_trail_with(&dir.path().join("data"), options);
    for i in 1..=10 {
        trail_source(&trail, ctx("ops"), &format!("s{i}"), "pw")
            .await
            .unwrap();
    }
    trail.shutdown().await;
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_position_whose_rows_are_gone_is_410_with_the_oldest_served() {
    let node = TestNode::start_on(pruned_store().await, |_| {}).await;
    for query in ["after=0", "after=4"] {
        let r = poll(&node, query).await;
        assert_error(&r, 410, "position_gone");
        assert_eq!(r.json()["oldest"], 5, "{}", r.text);
    }
    let incarnation = poll(&node, "after=0").await.json()["incarnation"].clone();
    // The sources' events, then the node's own (its memory route store's empty snapshot).
    let page = answer(&node, "after=5").await;
    assert_eq!(json!(page.incarnation), incarnation);
    assert_eq!(page.seqs()[..5], [6, 7, 8, 9, 10]);
    // Past the end, or in an incarnation this store never had (a store made anew): nothing
    // is shared, so the watcher starts again from the oldest position served.
    let r = poll(&node, &format!("after={}", page.latest + 1)).await;
    assert_error(&r, 410, "position_gone");
    assert_eq!(r.json()["oldest"], 5);
    let other = "00000000-0000-4000-8000-000000000000";
    let r = poll(&node, &format!("after=7&incarnation={other}")).await;
    assert_error(&r, 410, "position_gone");
    assert_eq!(r.json()["oldest"], 5);
    let same = format!("after=7&incarnation={}", incarnation.as_str().unwrap());
    assert_eq!(answer(&node, &same).await.seqs()[..3], [8, 9, 10]);
    // A stream hears it before it starts, as a 410.
    let r = node
        .send(
            node.req(Method::GET, &format!("{EVENTS}?after=2"), Some(WATCHER))
                .header("accept", "text/event-stream"),
        )
        .await;
    assert_error(&r, 410, "position_gone");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_past_max_watchers_are_refused_until_one_leaves() {
    let node = TestNode::start_with(|v| v["api"]["max_watchers"] = json!(2)).await;
    // Bookmarks often: a stream notices its client left at its next write.
    let one = stream(&node, "bookmark=100ms", None).await;
    let two = stream(&node, "bookmark=100ms", None).await;
    let r = poll(&node, "").await;
    assert_error(&r, 503, "too_many_watchers");
    assert_eq!(r.header("retry-after").as_deref(), Some("5"));
    drop(one);
    let mut refused = 1;
    let started = Instant::now();
    loop {
        let r = poll(&node, "").await;
        if r.status == StatusCode::OK {
            break;
        }
        assert_error(&r, 503, "too_many_watchers");
        refused += 1;
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no place freed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let metrics = node.metrics().await;
    let counted = format!("ankusa_lifecycle_watch_refused_total {refused}");
    assert!(
        metrics.lines().any(|l| l == counted),
        "{counted} in {metrics}"
    );
    drop(two);
    node.stop().await;
}
