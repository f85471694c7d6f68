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
use ankusa_sinks::test_support::free_port;
use ankusa_sinks::{Outcome, Sink, WebhookConfig, WebhookMode, WebhookSink};
use base64::Engine as _;
use hmac::Mac as _;
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
    assert_eq!(running.metrics.count("stale"), 5 + 15);
    assert_eq!(running.metrics.count("ignored"), 2);
    running.stop.send(()).unwrap();
    running.task.await.unwrap().unwrap();
    assert_eq!(file(&out), expected_file());
}

/// `webhook-*` headers signing `body` with `secret` at `ts`.
fn signed(secret: &str, ts: i64, body: &[u8]) -> [(&'static str, String); 3] {
    let key = base64::engine::general_purpose::STANDARD
        .decode(&secret[6..])
        .unwrap();
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("msg_1.{ts}.").as_bytes());
    mac.update(body);
    let sig = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    [
        ("webhook-id", "msg_1".into()),
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
    let old = signed(SECRET, now - 301, &body);
    assert_eq!(post(&running.url, &old, ce, &body).await.0, 401);
    let tampered = signed(SECRET, now, b"{}");
    assert_eq!(
        post(&running.url, &tampered, ce, &body).await,
        (401, "signature refused: no signature matches\n".into())
    );
    let (status, text) = post(&running.url, &signed(SECRET, now, b"nope"), ce, b"nope").await;
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
    // The right signature among several passes.
    let mut both = signed(SECRET, now, &body);
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
        "ankusa_follow_events_total{outcome=\"stale\"} 8",
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
