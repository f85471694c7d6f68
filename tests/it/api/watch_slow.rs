//! A watcher that does not read its stream is cut off by `api.write_timeout`, holding no more
//! than a page meanwhile, while another watcher goes on; it resumes from the last id it
//! received with `Last-Event-ID`, and between the two connections it misses and repeats
//! nothing.

use std::time::Duration;

use crate::api::lifecycle::create_source_with;
use crate::support::node::*;
use eventsource_stream::Eventsource;
use futures::StreamExt;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use reqwest::Method;
use serde_json::json;

/// Sources whose events are about 32 KiB each: enough bytes to fill the sockets' buffers.
const SOURCES: usize = 160;

async fn big_source(node: &TestNode, i: usize) {
    create_source_with(
        node,
        &format!("s{i}"),
        json!({"blob": "x".repeat(32 << 10)}),
    )
    .await;
}

/// The ids of the server-sent events in `bytes` (a stream's body as received).
async fn ids(bytes: Vec<u8>) -> Vec<u64> {
    let chunks = futures::stream::iter([Ok::<_, std::convert::Infallible>(bytes)]);
    chunks
        .eventsource()
        .filter_map(|e| async move {
            let e = e.ok()?;
            (e.event == "cloudevent").then(|| e.id.parse::<u64>().unwrap())
        })
        .collect()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stalls_is_cut_off_and_resumes_where_it_was() {
    let node = TestNode::start_with(|v| v["api"]["write_timeout"] = json!("300ms")).await;
    for i in 1..=SOURCES {
        big_source(&node, i).await;
    }
    // The slow reader: a small receive buffer, and a client that stops reading.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let addr = node.url("").trim_start_matches("http://").parse().unwrap();
    let stream = socket.connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    let driven = tokio::spawn(connection);
    let request = hyper::Request::get("/admin/v1/lifecycle/events?limit=1000")
        .header("host", "node")
        .header("authorization", format!("Bearer {WATCHER}"))
        .header("accept", "text/event-stream")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    // Meanwhile another watcher reads every event.
    let r = node
        .call(
            Method::GET,
            "/admin/v1/lifecycle/events?limit=1000",
            WATCHER,
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", &r.text[..200.min(r.text.len())]);
    assert_eq!(r.json()["events"].as_array().unwrap().len(), SOURCES);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let metrics = node.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l == r#"ankusa_api_connections_closed_total{reason="stalled"} 1"#),
        "the stalled stream was not closed"
    );
    // What reached the slow reader before the cut, then the end of its stream.
    let mut body = response.into_body();
    let mut received = Vec::new();
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(data) = frame.into_data() {
            received.extend_from_slice(&data);
        }
    }
    let _ = driven.await;
    let first = ids(received).await;
    assert!(
        first.len() < SOURCES,
        "the reader was not cut off: it got every event"
    );
    // Resumed after the last whole event it received: the rest, once each.
    let last = first.last().copied().unwrap_or(0);
    let r = node
        .call(
            Method::GET,
            &format!("/admin/v1/lifecycle/events?after={last}&limit=1000"),
            WATCHER,
            None,
        )
        .await;
    let rest = r.json()["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["sequence"].as_str().unwrap().parse::<u64>().unwrap())
        .collect::<Vec<_>>();
    let all: Vec<u64> = first.into_iter().chain(rest).collect();
    assert_eq!(all, (1..=SOURCES as u64).collect::<Vec<_>>());
    node.stop().await;
}
