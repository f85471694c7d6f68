//! A node down, hung or answering garbage: the follower, watching it through a TCP gate the
//! test sets, retries from the same position and catches up by itself once the node answers
//! again (the node stopped and started again on its store, on another port the gate is
//! pointed at). A token without `events:read` stops it, naming the scope.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::*;
use crate::fleet::write;
use crate::support::eventually;
use crate::support::node::{TestNode, READER};

/// What the gate does with a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Relay it to the node.
    Pass,
    /// Read the request and never answer (a node that hangs).
    Hang,
    /// Answer 200 with a body that is no watch answer (a confused proxy).
    Garbage,
}

/// A TCP gate on 127.0.0.1 in front of a node; changing its mode closes the connections it
/// holds, so a client's pooled connection cannot slip past a change.
struct Gate {
    url: String,
    upstream: Arc<AtomicU16>,
    mode: watch::Sender<Mode>,
}

impl Gate {
    async fn start(upstream: u16) -> Gate {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let upstream = Arc::new(AtomicU16::new(upstream));
        let (mode, modes) = watch::channel(Mode::Pass);
        let to = upstream.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let mut modes = modes.clone();
                let mode = *modes.borrow_and_update();
                let port = to.load(Ordering::SeqCst);
                tokio::spawn(async move {
                    tokio::select! {
                        _ = serve(client, mode, port) => {}
                        _ = modes.changed() => {}
                    }
                });
            }
        });
        Gate {
            url,
            upstream,
            mode,
        }
    }

    fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    fn point_at(&self, port: u16) {
        self.upstream.store(port, Ordering::SeqCst);
        self.mode.send_modify(|_| {});
    }
}

async fn serve(mut client: TcpStream, mode: Mode, port: u16) {
    match mode {
        Mode::Pass => {
            // A node down: the connection closes at once.
            if let Ok(mut node) = TcpStream::connect(("127.0.0.1", port)).await {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut node).await;
            }
        }
        Mode::Hang => {
            let mut sink = Vec::new();
            let _ = client.read_to_end(&mut sink).await;
        }
        Mode::Garbage => {
            let mut head = [0u8; 4096];
            let _ = client.read(&mut head).await;
            let body = "{\"events\": \"not a list\"}";
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = client.write_all(answer.as_bytes()).await;
        }
    }
}

fn port(base: &str) -> u16 {
    base.rsplit(':').next().unwrap().parse().unwrap()
}

/// Wait until the follower counted more failed requests than `before`.
async fn failing(metrics: &Metrics, before: u64, bound: Duration) {
    let more = async || metrics.request_failures.get() > before;
    eventually("a failed request", bound, more).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_down_hung_or_answering_garbage_is_retried_and_caught_up_with() {
    let node = TestNode::start_with(watched).await;
    let gate = Gate::start(port(&node.base)).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("replica.json");
    let following = Following::start(options(&[&gate.url], &out, false));
    let metrics = following.metrics.clone();
    write(node.base.clone(), 21, 40).await;
    converged(&node.base, &gate.url, &out, &[]).await;
    assert_eq!(metrics.request_failures.get(), 0);

    // Garbage: the position stays where it is; the changes come once the node answers.
    gate.set(Mode::Garbage);
    let at = position(&out, &gate.url).unwrap();
    write(node.base.clone(), 22, 30).await;
    failing(&metrics, 1, Duration::from_secs(20)).await;
    assert_eq!(position(&out, &gate.url), Some(at), "nothing skipped");
    gate.set(Mode::Pass);
    converged(&node.base, &gate.url, &out, &[]).await;
    let at_hang = position(&out, &gate.url);

    // Hung: the poll times out (its wait and a margin) and is asked again. (The poll under
    // way when the gate closes fails first: the second failure is the timeout.)
    let before = metrics.request_failures.get();
    let hanging = std::time::Instant::now();
    gate.set(Mode::Hang);
    write(node.base.clone(), 23, 30).await;
    let hung = Duration::from_secs(1) + http::MARGIN + Duration::from_secs(20);
    failing(&metrics, before + 1, hung).await;
    assert!(hanging.elapsed() >= http::MARGIN, "{:?}", hanging.elapsed());
    assert_eq!(position(&out, &gate.url), at_hang, "nothing skipped");
    gate.set(Mode::Pass);
    converged(&node.base, &gate.url, &out, &[]).await;

    // Down: the node stops; started again on its store, it serves from the same position.
    let before = metrics.request_failures.get();
    let home = node.stop().await;
    failing(&metrics, before, Duration::from_secs(20)).await;
    let node = TestNode::start_on(home, watched).await;
    gate.point_at(port(&node.base));
    write(node.base.clone(), 24, 30).await;
    converged(&node.base, &gate.url, &out, &[]).await;

    let metrics = following.stop().await;
    assert_eq!(metrics.count("invalid"), 0);
    assert_eq!(metrics.relists.get(), 0, "no position was lost");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_events_read_stops_the_follower_naming_the_scope() {
    let node = TestNode::start_with(watched).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("replica.json");
    for (token, says) in [
        (READER, "403 Forbidden"),
        ("tok-unknown", "401 Unauthorized"),
    ] {
        let mut options = options(&[&node.base], &out, false);
        options.token = token.into();
        let followed = http::follow(options, Metrics::new(), std::future::pending());
        let error = tokio::time::timeout(Duration::from_secs(30), followed)
            .await
            .expect("it stops by itself")
            .unwrap_err()
            .to_string();
        assert!(error.contains(says), "{error}");
        assert!(error.contains("events:read"), "{error}");
        assert!(!error.contains(token), "never the token: {error}");
    }
    // The binary exits with that error.
    let refused = tokio::process::Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .args(["follow", "http", "--url", &node.base, "--out"])
        .arg(&out)
        .env("ANKUSA_FOLLOW_TOKEN", READER)
        .env_remove("RUST_LOG")
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(said.contains("needs a token with events:read"), "{said}");
    node.stop().await;
}
