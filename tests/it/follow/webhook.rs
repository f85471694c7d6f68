//! `ankusa follow webhook` against the real webhook sink: every mode (binary, structured,
//! batch) makes the exact replica file, answered only once it is written; bad signatures are
//! 401, bodies that are not events of the contract 400, and nothing of theirs is written;
//! the real binary killed with -9 keeps every event it answered for.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::Duration;

use ankusa::replica::webhook::{Server, WebhookOptions};
use ankusa::replica::{FollowError, Metrics};
use ankusa_sinks::test_support::{free_port, Receiver, Recorded};
use ankusa_sinks::{Outcome, Sink, WebhookConfig, WebhookMode, WebhookSink};
use base64::Engine as _;
use cloudevents::AttributesReader as _;
use hmac::Mac as _;
use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::events::*;
use crate::support::eventually;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// A follower running in this process.
struct Running {
    url: String,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), FollowError>>,
    metrics: Arc<Metrics>,
}

async fn start(out: &Path) -> Running {
    let options = WebhookOptions {
        listen: "127.0.0.1:0".into(),
        secrets: vec![SECRET.into()],
        out: out.to_owned(),
    };
    let metrics = Metrics::new();
    let server = Server::bind(options, metrics.clone()).await.unwrap();
    let url = format!("http://{}/events", server.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel();
    let task = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    Running {
        url,
        stop,
        task,
        metrics,
    }
}

fn sink(url: &str, mode: WebhookMode, secret: &str) -> WebhookSink {
    let mut config = WebhookConfig::new(url, vec![secret.into()]);
    config.mode = mode;
    WebhookSink::new(config).unwrap()
}

fn file(out: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap()
}

fn expected_file() -> Value {
    json!({"format": 1, "progress": {}, "replica": scenario_replica()})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mode_makes_the_exact_replica_before_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("replica.json");
    let running = start(&out).await;
    let events = scenario();
    let modes = [
        (WebhookMode::Binary, 0..7),
        (WebhookMode::Structured, 7..13),
        (WebhookMode::Batch, 13..18),
    ];
    for (mode, range) in modes {
        let outcomes = sink(&running.url, mode, SECRET)
            .send(&deliveries(&events[range.clone()]))
            .await;
        assert_eq!(outcomes, vec![Outcome::Delivered; range.len()], "{mode:?}");
    }
    // Read right after the last answer: the file already holds everything.
    assert_eq!(file(&out), expected_file());
    // A redelivery of everything is stale: the file stays as it is.
    let outcomes = sink(&running.url, WebhookMode::Batch, SECRET)
        .send(&deliveries(&events))
        .await;
    assert_eq!(outcomes, vec![Outcome::Delivered; events.len()]);
    assert_eq!(file(&out), expected_file());
    assert_eq!(running.metrics.count("applied"), 10);
    // The scenario's one message sent twice as it was (binary mode, the same headers, so the
    // same webhook-id) is a duplicate, not applied again; a redelivery of the same events in
    // another request is stale by the rule.
    assert_eq!(running.metrics.count("duplicate"), 1);
    assert_eq!(running.metrics.count("stale"), 4 + 15);
    assert_eq!(running.metrics.count("ignored"), 2);
    running.stop.send(()).unwrap();
    running.task.await.unwrap().unwrap();
    assert_eq!(file(&out), expected_file());
}

/// `webhook-*` headers signing message `id` with `body` with `secret` at `ts`.
fn signed(secret: &str, id: &str, ts: i64, body: &[u8]) -> [(&'static str, String); 3] {
    let key = base64::engine::general_purpose::STANDARD
        .decode(&secret[6..])
        .unwrap();
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(body);
    let sig = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    [
        ("webhook-id", id.into()),
        ("webhook-timestamp", ts.to_string()),
        ("webhook-signature", format!("v1,{sig}")),
    ]
}

async fn post(
    url: &str,
    headers: &[(&'static str, String)],
    content_type: &str,
    body: &[u8],
) -> (u16, String) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", content_type)
        .body(body.to_vec());
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_signatures_are_401_and_bad_bodies_400_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("replica.json");
    let running = start(&out).await;
    let event = &scenario()[..1];
    let wrong = sink(&running.url, WebhookMode::Binary, "whsec_YW5vdGhlciBrZXk=");
    let outcome = wrong.send(&deliveries(event)).await;
    assert!(
        matches!(&outcome[0], Outcome::Rejected { reason } if reason.contains("401")),
        "{outcome:?}"
    );
    let body = serde_json::to_vec(&ankusa_sinks::structured_value(&event[0]).unwrap()).unwrap();
    let ce = "application/cloudevents+json";
    let now = chrono::Utc::now().timestamp();
    assert_eq!(
        post(&running.url, &[], ce, &body).await,
        (401, "signature refused: missing webhook-id header\n".into())
    );
    let id = event[0].id();
    let old = signed(SECRET, id, now - 301, &body);
    assert_eq!(post(&running.url, &old, ce, &body).await.0, 401);
    let tampered = signed(SECRET, id, now, b"{}");
    assert_eq!(
        post(&running.url, &tampered, ce, &body).await,
        (401, "signature refused: no signature matches\n".into())
    );
    let (status, text) = post(&running.url, &signed(SECRET, id, now, b"nope"), ce, b"nope").await;
    assert_eq!(status, 400);
    assert!(text.starts_with("not a CloudEvent: "), "{text}");
    // A CloudEvent of a kept type without the contract's extensions: 400, the sink gives up.
    let mut old_node = event[0].clone();
    old_node.remove_extension("subjectversion");
    let outcome = sink(&running.url, WebhookMode::Structured, SECRET)
        .send(&deliveries(&[old_node]))
        .await;
    assert!(
        matches!(&outcome[0], Outcome::Rejected { reason } if reason.contains("400")),
        "{outcome:?}"
    );
    assert!(
        !out.exists(),
        "no request was applied, so nothing was written"
    );
    assert_eq!(running.metrics.count("invalid"), 2);
    // A genuine signature over a message whose id is not the event's binds nothing.
    assert_eq!(
        post(
            &running.url,
            &signed(SECRET, "msg_1", now, &body),
            ce,
            &body
        )
        .await,
        (
            401,
            "signature refused: webhook-id does not name the event it carries\n".into()
        )
    );
    // The right signature among several passes.
    let mut both = signed(SECRET, id, now, &body);
    both[2].1 = format!(
        "v1,{} {}",
        base64::engine::general_purpose::STANDARD.encode([7u8; 32]),
        both[2].1
    );
    assert_eq!(
        post(&running.url, &both, ce, &body).await,
        (204, String::new())
    );
    assert_eq!(
        file(&out)["replica"]["subjects"][FLEET]["acme/routes/r1"]["version"],
        format!("{:020}", 1)
    );
    running.stop.send(()).unwrap();
    running.task.await.unwrap().unwrap();
}

/// The real binary, its secret in the environment (never on the command line).
fn spawn(out: &Path, port: u16, metrics: u16) -> Child {
    Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .args([
            "follow",
            "webhook",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .args(["--metrics", &format!("127.0.0.1:{metrics}"), "--out"])
        .arg(out)
        .env("ANKUSA_FOLLOW_SECRET", SECRET)
        .env_remove("RUST_LOG")
        .spawn()
        .unwrap()
}

async fn until_listening(port: u16) {
    eventually(
        "the follower listens",
        Duration::from_secs(30),
        async || {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_killed_with_9_keeps_what_it_answered_and_exits_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let out: PathBuf = dir.path().join("replica.json");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/");
    let events = scenario();
    let mut child = spawn(&out, port, free_port());
    until_listening(port).await;
    let outcomes = sink(&url, WebhookMode::Binary, SECRET)
        .send(&deliveries(&events[..9]))
        .await;
    assert_eq!(outcomes, vec![Outcome::Delivered; 9]);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let kept = file(&out);
    assert_eq!(
        kept["replica"]["subjects"][FLEET]["acme/routes/r4"]["version"],
        format!("{:020}", 7)
    );
    let metrics = free_port();
    let mut child = spawn(&out, port, metrics);
    until_listening(port).await;
    // The sink delivers again what it is not sure of, and the rest.
    let outcomes = sink(&url, WebhookMode::Binary, SECRET)
        .send(&deliveries(&events[5..]))
        .await;
    assert_eq!(outcomes, vec![Outcome::Delivered; events.len() - 5]);
    let scraped = reqwest::get(format!("http://127.0.0.1:{metrics}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "ankusa_follow_events_total{outcome=\"applied\"} 2",
        // The scenario's message sent twice as it was: the second is a duplicate.
        "ankusa_follow_events_total{outcome=\"duplicate\"} 1",
        "ankusa_follow_events_total{outcome=\"stale\"} 7",
        "ankusa_follow_events_total{outcome=\"marker\"} 2",
        "ankusa_follow_snapshots_completed_total 1",
        "ankusa_follow_subjects_pruned_total 1",
        "ankusa_follow_subjects{state=\"present\"} 3",
    ] {
        assert!(
            scraped.lines().any(|l| l == line),
            "{line} not in\n{scraped}"
        );
    }
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(child.wait().unwrap().success(), "SIGTERM: a clean exit");
    assert_eq!(file(&out), expected_file());
}

/// `captured` sent again to `url` with `changes` made to its headers (a `None` value
/// removes the header); the status answered.
async fn replay(url: &str, captured: &Recorded, changes: &[(&'static str, Option<&str>)]) -> u16 {
    let mut headers: HeaderMap = captured.headers.clone();
    headers.remove("host");
    headers.remove("content-length");
    for (name, value) in changes {
        match value {
            Some(value) => headers.insert(*name, value.parse().unwrap()),
            None => headers.remove(*name),
        };
    }
    let response = reqwest::Client::new()
        .post(url)
        .headers(headers)
        .body(captured.body.clone())
        .send()
        .await
        .unwrap();
    response.status().as_u16()
}

async fn scrape(port: u16) -> String {
    let url = format!("http://127.0.0.1:{port}/metrics");
    reqwest::get(url).await.unwrap().text().await.unwrap()
}

/// Black-box, against the real binary: requests captured on the wire (binary and structured,
/// as the sink sends them) and replayed within the signature's 5 minutes, with the attributes
/// a replica acts on changed, are refused; replayed as they are, they are applied no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_captured_request_replayed_with_other_headers_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out: PathBuf = dir.path().join("replica.json");
    let (port, metrics) = (free_port(), free_port());
    let url = format!("http://127.0.0.1:{port}/");
    let events = scenario();
    let child = Killed(spawn(&out, port, metrics));
    until_listening(port).await;
    let delivered = sink(&url, WebhookMode::Binary, SECRET)
        .send(&deliveries(&events[..9]))
        .await;
    assert_eq!(delivered, vec![Outcome::Delivered; 9]);
    let before = std::fs::read(&out).unwrap();

    // What an eavesdropper saw: the same events, signed with the same secret.
    let wire = Receiver::start().await;
    for mode in [WebhookMode::Binary, WebhookMode::Structured] {
        let outcomes = sink(&wire.url(), mode, SECRET)
            .send(&deliveries(&events[..1]))
            .await;
        assert_eq!(outcomes, vec![Outcome::Delivered]);
    }
    let [binary, structured] = <[Recorded; 2]>::try_from(wire.requests()).unwrap();
    assert_eq!(binary.header("ce-type"), "io.ankusa.route.created");
    let max = u64::MAX.to_string();
    let forged: [&[(&'static str, Option<&str>)]; 4] = [
        // Binary: delete another subject at the greatest version.
        &[
            ("ce-type", Some("io.ankusa.route.deleted")),
            ("ce-partitionkey", Some("acme/routes/r2")),
            ("ce-subjectversion", Some(&max)),
        ],
        // Binary: one attribute, or one added.
        &[("ce-subjectversion", Some(&max))],
        &[("ce-snapshot", Some("s-forged"))],
        // Structured turned binary: the signed body read as data, attributes in headers.
        &[
            ("content-type", Some("application/json")),
            ("ce-specversion", Some("1.0")),
            ("ce-id", Some(events[0].id())),
            ("ce-source", Some(NODE)),
            ("ce-type", Some("io.ankusa.route.deleted")),
            ("ce-partitionkey", Some("acme/routes/r2")),
            ("ce-subjectstore", Some(FLEET)),
            ("ce-subjectversion", Some(&max)),
        ],
    ];
    for (i, changes) in forged.iter().enumerate() {
        let captured = if i < 3 { &binary } else { &structured };
        assert_eq!(replay(&url, captured, changes).await, 401, "{changes:?}");
    }
    // As captured: the signature holds, the id was applied: answered, applied no more.
    let duplicates = events_counted(metrics, "duplicate").await;
    assert_eq!(replay(&url, &binary, &[]).await, 204);
    assert_eq!(
        std::fs::read(&out).unwrap(),
        before,
        "the replica is as it was"
    );
    assert_eq!(events_counted(metrics, "duplicate").await, duplicates + 1);
    assert_eq!(
        events_counted(metrics, "invalid").await,
        0,
        "refused, not read"
    );
    drop(child);
}

/// `ankusa_follow_events_total{outcome}` as the follower on `port` serves it (0 if absent).
async fn events_counted(port: u16, outcome: &str) -> u64 {
    let line = format!("ankusa_follow_events_total{{outcome=\"{outcome}\"}} ");
    let scraped = scrape(port).await;
    scraped
        .lines()
        .find_map(|l| l.strip_prefix(&line))
        .map_or(0, |n| n.parse().unwrap())
}

/// A follower process, killed with -9 when dropped (a failing test leaves none behind).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the server answers `head` (and nothing more) on a raw connection, within `wait`:
/// the answer's status line, or `None` while it is still waiting for more.
async fn answer_to_head(url: &str, head: &str, wait: Duration) -> Option<String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let addr = url.trim_start_matches("http://").split('/').next().unwrap();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 1024];
    let read = tokio::time::timeout(wait, stream.read(&mut buf))
        .await
        .ok()?;
    let n = read.unwrap_or(0);
    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
    Some(text.lines().next().unwrap_or("closed").to_owned())
}

/// The receiver reads no body it could refuse from the head: unsigned or stale heads are
/// 401 at once however long a body they announce, a body must say its length and stay under
/// 16 MiB, and a client that sends nothing is closed after the head timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_receiver_refuses_from_the_head_and_bounds_what_it_reads() {
    let dir = tempfile::tempdir().unwrap();
    let running = start(&dir.path().join("replica.json")).await;
    let now = chrono::Utc::now().timestamp();
    let head = |headers: &str, length: Option<u64>| {
        let length = length.map_or(String::new(), |l| format!("content-length: {l}\r\n"));
        format!("POST /events HTTP/1.1\r\nhost: x\r\ncontent-type: application/cloudevents+json\r\n{length}{headers}\r\n")
    };
    let quick = Duration::from_secs(2);
    // Announces 16 MB and sends none of it: refused at once, from the head.
    let unsigned = answer_to_head(&running.url, &head("", Some(16_000_000)), quick).await;
    assert_eq!(unsigned.as_deref(), Some("HTTP/1.1 401 Unauthorized"));
    let stale = format!(
        "webhook-id: e1\r\nwebhook-timestamp: {}\r\nwebhook-signature: v1,AAAA\r\n",
        now - 3600
    );
    let stale = answer_to_head(&running.url, &head(&stale, Some(16_000_000)), quick).await;
    assert_eq!(stale.as_deref(), Some("HTTP/1.1 401 Unauthorized"));
    let fresh =
        format!("webhook-id: e1\r\nwebhook-timestamp: {now}\r\nwebhook-signature: v1,AAAA\r\n");
    let no_length = answer_to_head(&running.url, &head(&fresh, None), quick).await;
    assert_eq!(no_length.as_deref(), Some("HTTP/1.1 411 Length Required"));
    let too_long = answer_to_head(&running.url, &head(&fresh, Some(17 << 20)), quick).await;
    assert_eq!(too_long.as_deref(), Some("HTTP/1.1 413 Payload Too Large"));
    // A fresh, signed-looking head whose body never comes is waited for, then answered 408.
    let waits = answer_to_head(&running.url, &head(&fresh, Some(100)), quick).await;
    assert_eq!(waits, None, "its body may still come");
    let timed_out = answer_to_head(
        &running.url,
        &head(&fresh, Some(100)),
        Duration::from_secs(15),
    )
    .await;
    assert_eq!(timed_out.as_deref(), Some("HTTP/1.1 408 Request Timeout"));
    // Silent: closed after the head timeout.
    let silent = answer_to_head(&running.url, "", Duration::from_secs(15)).await;
    assert!(silent.is_some(), "closed within the head timeout");
    running.stop.send(()).unwrap();
    running.task.await.unwrap().unwrap();
}
