//! The admin server's own limits, each against a real slow client on a raw TCP connection:
//! a head never finished, a body trickled in, more connections than `api.max_connections`,
//! and a stop while a client still trickles.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::node::*;

const SOURCES: &str = "/admin/v1/tenants/t1/sources";

/// A raw connection to `node`.
async fn connect(node: &TestNode) -> TcpStream {
    let addr = node.base.trim_start_matches("http://");
    TcpStream::connect(addr).await.expect("connect")
}

/// What the server sent until it closed the connection, or `None` if it still had not
/// closed it after `wait`.
async fn until_closed(stream: &mut TcpStream, wait: Duration) -> Option<String> {
    let mut out = Vec::new();
    let read = tokio::time::timeout(wait, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    read.ok()
        .map(|()| String::from_utf8_lossy(&out).into_owned())
}

/// A source creation's head, for a body of `len` bytes.
fn post_head(len: usize) -> String {
    format!(
        "POST {SOURCES} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ADMIN}\r\n\
         content-type: application/json\r\ncontent-length: {len}\r\n\r\n"
    )
}

/// A valid source creation, padded with spaces to `len` bytes.
fn padded_body(len: usize) -> Vec<u8> {
    let body = json!({"id": "s1", "kind": "webhook", "secret": "sekrit", "config": {}});
    let mut bytes = body.to_string().into_bytes();
    assert!(bytes.len() <= len);
    bytes.resize(len, b' ');
    bytes
}

/// Send `body` on `writer` one byte every `pace`, until it is sent or the server is gone.
fn trickle(
    mut writer: tokio::net::tcp::OwnedWriteHalf,
    body: Vec<u8>,
    pace: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for byte in body {
            if writer.write_all(&[byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(pace).await;
        }
    })
}

/// A client that sends half a request head and stalls is closed after `api.header_timeout`.
#[tokio::test]
async fn a_head_never_finished_is_closed_after_the_header_timeout() {
    let node = TestNode::start_with(|c| c["api"]["header_timeout"] = json!("1s")).await;
    let mut stalled = connect(&node).await;
    stalled
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let answer = until_closed(&mut stalled, Duration::from_secs(10)).await;
    let answer = answer.expect("the stalled connection is closed");
    assert!(started.elapsed() < Duration::from_secs(5), "{started:?}");
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
    // A client that says nothing at all is closed too.
    let mut silent = connect(&node).await;
    let answer = until_closed(&mut silent, Duration::from_secs(10)).await;
    assert!(answer.is_some(), "the silent connection is closed");
    let health = node
        .send(node.req(reqwest::Method::GET, "/healthz", None))
        .await;
    assert_eq!(health.status, reqwest::StatusCode::OK);
    node.stop().await;
}

/// A body sent a byte at a time gets 408 `body_timeout` once `api.body_timeout` has passed,
/// and writes no row.
#[tokio::test]
async fn a_body_trickled_in_gets_408_and_writes_no_row() {
    let node = TestNode::start_with(|c| c["api"]["body_timeout"] = json!("1s")).await;
    let (mut reader, mut writer) = connect(&node).await.into_split();
    // 100 bytes at 5 a second: 20 s to send it whole.
    writer.write_all(post_head(100).as_bytes()).await.unwrap();
    let started = Instant::now();
    let sending = trickle(writer, padded_body(100), Duration::from_millis(200));
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let _ = reader.read_to_end(&mut out).await;
    })
    .await;
    sending.abort();
    let answer = String::from_utf8_lossy(&out).into_owned();
    assert!(read.is_ok(), "no answer within 10s: {answer:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "{started:?}");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap_or("")).unwrap();
    assert_eq!(body["error"], "body_timeout", "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("x-request-id:"),
        "{answer}"
    );
    assert!(node.rows().await.is_empty(), "no row");
    node.stop().await;
}

/// Connections beyond `api.max_connections` wait in the listen queue, unserved, until a
/// served one closes.
#[tokio::test]
async fn connections_over_the_limit_wait_for_a_free_one() {
    let node = TestNode::start_with(|c| {
        c["api"]["max_connections"] = json!(2);
        c["api"]["reserved_connections"] = json!(0);
        c["api"]["header_timeout"] = json!("60s");
    })
    .await;
    // Two connections that hold the server's two slots (the test client's pooled connection
    // may hold one of them already: then the second of these waits too).
    let mut holders = Vec::new();
    for _ in 0..2 {
        let mut held = connect(&node).await;
        held.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
        holders.push(held);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut waiting = connect(&node).await;
    waiting
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(1500), waiting.read(&mut buf)).await;
    assert!(early.is_err(), "served over the limit: {early:?}");
    drop(holders);
    let answer = until_closed(&mut waiting, Duration::from_secs(10)).await;
    let answer = answer.expect("served once a slot is free");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    node.stop().await;
}

/// A node told to stop while a client trickles its body in stops within
/// `api.shutdown_grace`, whatever the other limits.
#[tokio::test]
async fn a_stop_is_not_held_by_a_slow_client_beyond_the_grace() {
    let node = TestNode::start_with(|c| {
        c["api"]["shutdown_grace"] = json!("1s");
        c["api"]["header_timeout"] = json!("600s");
        c["api"]["body_timeout"] = json!("600s");
        c["api"]["request_timeout"] = json!("600s");
    })
    .await;
    let (_reader, mut writer) = connect(&node).await.into_split();
    writer.write_all(post_head(1000).as_bytes()).await.unwrap();
    let sending = trickle(writer, padded_body(1000), Duration::from_millis(200));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let stopped = tokio::time::timeout(Duration::from_secs(15), node.stop_as_it_ran()).await;
    sending.abort();
    let (dir, ran) = stopped.expect("the node stops despite the slow client");
    ran.expect("node ran cleanly");
    assert!(started.elapsed() < Duration::from_secs(8), "{started:?}");
    drop(dir);
}

/// A connection with a 4 KB receive buffer that asks, pipelined, for the 122 KB OpenAPI
/// document `times` times and never reads an answer.
async fn non_reading(node: &TestNode, times: usize) -> Option<TcpStream> {
    let addr = node.base.trim_start_matches("http://").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(addr).await.ok()?;
    let ask = "GET /admin/v1/openapi.json HTTP/1.1\r\nhost: x\r\n\r\n".repeat(times);
    stream.write_all(ask.as_bytes()).await.ok()?;
    Some(stream)
}

/// Black-box: 256 connections that ask and never read (as many as `api.max_connections`)
/// keep neither a probe nor an operator out: `/readyz` and an authenticated write answer
/// within 2 s, and the stalled connections are closed after `api.write_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_keep_neither_probes_nor_operators_out() {
    let node = TestNode::start_with(|c| {
        c["api"]["write_timeout"] = json!("2s");
    })
    .await;
    let mut attackers = Vec::new();
    for _ in 0..256 {
        attackers.extend(non_reading(&node, 50).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let mut probe = connect(&node).await;
    probe
        .write_all(b"GET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let answer = until_closed(&mut probe, Duration::from_secs(2)).await;
    let answer = answer.expect("/readyz answered within 2 s");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let mut write = connect(&node).await;
    write.write_all(post_head(200).as_bytes()).await.unwrap();
    write.write_all(&padded_body(200)).await.unwrap();
    let answer = until_closed(&mut write, Duration::from_secs(2)).await;
    let answer = answer.expect("the write answered within 2 s");
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(4), "{started:?}");
    // The change has its row, as any other.
    let rows = node.rows().await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["action"], "source.create");
    // The connections that held general slots are closed once their writes stall 2 s.
    let closed = |reason: &str| {
        let line = format!("ankusa_api_connections_closed_total{{reason=\"{reason}\"}} ");
        let node = &node;
        async move {
            let text = node
                .send(node.req(axum::http::Method::GET, "/metrics", None))
                .await
                .text;
            text.lines()
                .find_map(|l| l.strip_prefix(&line))
                .map_or(0, |n| n.parse::<u64>().unwrap())
        }
    };
    // The rest were refused on the reserve, or on accept, at once: every one is closed.
    crate::support::eventually(
        "every attacking connection closed",
        Duration::from_secs(15),
        async || closed("stalled").await + closed("busy").await + closed("refused").await == 256,
    )
    .await;
    // At most 64 held general slots (the test client's own connection may hold one).
    assert!((63..=64).contains(&closed("stalled").await));
    drop(attackers);
    node.stop().await;
}
