//! `ankusa audit export`, the built binary against a real node: it writes exactly what the
//! export serves, to a file or to stdout, and fails with a clear message and exit 1 (never a
//! panic, never a complete-looking file) on a refused token, a bad URL, a node that is down
//! and a stream that is cut.

use std::path::Path;
use std::process::Output;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::api::audit_export::{export, exported_node, lines};
use crate::support::node::*;

/// `ankusa audit export --node node <args>` with `token` in `ANKUSA_TOKEN`.
async fn run(node: &str, token: Option<&str>, args: &[&str]) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_ankusa"));
    command
        .args(["audit", "export", "--node", node])
        .args(args)
        .env_remove("ANKUSA_CONFIG")
        .env_remove("ANKUSA_TOKEN");
    if let Some(token) = token {
        command.env("ANKUSA_TOKEN", token);
    }
    command.output().await.unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Exit 1 with `says` on stderr, and no panic.
fn failed(out: &Output, says: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(says), "{says:?} in {err:?}");
    assert!(!err.contains("panicked"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_writes_the_export_to_a_file_or_stdout() {
    let node = exported_node().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("writer.ndjson");
    let out = run(
        &node.base,
        Some(AUDITOR),
        &["--actor", "writer", "--output", file.to_str().unwrap()],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "the rows went to the file");
    assert!(stderr(&out).contains("exported 3 rows"), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--after 6"),
        "how to go on: {}",
        stderr(&out)
    );
    let served = export(&node, "actor=writer", AUDITOR).await;
    assert_eq!(std::fs::read_to_string(&file).unwrap(), served.text);
    assert!(!dir.path().join("writer.ndjson.partial").exists());
    // To stdout, with a filter of each kind the flags take.
    let query = "resource=sources/s1&tenant=t1&result=ok&after=0&limit=5";
    let flags = [
        "--resource",
        "sources/s1",
        "--tenant",
        "t1",
        "--result",
        "ok",
        "--after",
        "0",
        "--limit",
        "5",
    ];
    let out = run(&format!("{}/", node.base), Some(AUDITOR), &flags).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text, export(&node, query, AUDITOR).await.text);
    assert_eq!(
        lines(&text).len(),
        4,
        "the checkpoint, rows 1 and 4, the end"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_fails_clearly_on_tokens_urls_and_nodes_down() {
    let node = exported_node().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("x.ndjson");
    let to_file = ["--output", file.to_str().unwrap()];
    failed(&run(&node.base, Some("nope"), &to_file).await, "401");
    failed(&run(&node.base, Some(READER), &to_file).await, "audit:read");
    failed(&run(&node.base, None, &to_file).await, "--token");
    failed(
        &run("ftp://host", Some(AUDITOR), &[]).await,
        "not a node's URL",
    );
    failed(
        &run(&node.base, Some(AUDITOR), &["--from", "yesterday"]).await,
        "RFC 3339",
    );
    assert!(!file.exists(), "a refused export leaves no file");
    let down = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    failed(&run(&down, Some(AUDITOR), &[]).await, "could not reach");
    node.stop().await;
    failed(&run(&down, Some(AUDITOR), &[]).await, "could not reach");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_stream_fails_and_keeps_what_came_apart() {
    let head = "{\"checkpoint\":{\"origin\":\"o\",\"size\":1,\"root\":\"r\",\"checkpoint\":\"c\"},\"first\":1}\n";
    let row = "{\"row\":{\"seq\":1},\"leaf_input\":\"\",\"index\":0,\"proof\":[]}\n";
    let error =
        "{\"error\":{\"error\":\"not_found\",\"message\":\"row 2 was pruned\"},\"next\":1}\n";
    let cases = [
        // The connection closes mid-stream.
        (format!("{head}{row}"), false, "cut after 1 rows"),
        // The stream ends cleanly, but without its end line.
        (format!("{head}{row}"), true, "without its end line"),
        (format!("{head}{row}{error}"), true, "row 2 was pruned"),
    ];
    for (body, finished, says) in cases {
        let base = cutting_server(body.clone(), finished).await;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("x.ndjson");
        let out = run(&base, Some(AUDITOR), &["--output", file.to_str().unwrap()]).await;
        failed(&out, says);
        assert!(!file.exists(), "no complete-looking file");
        let partial = partial_of(&file);
        assert_eq!(std::fs::read_to_string(&partial).unwrap(), body);
        assert!(
            stderr(&out).contains("x.ndjson.partial"),
            "{}",
            stderr(&out)
        );
    }
}

fn partial_of(file: &Path) -> std::path::PathBuf {
    file.with_file_name(format!(
        "{}.partial",
        file.file_name().unwrap().to_str().unwrap()
    ))
}

/// A server that answers one request with an export's head and `body` as one chunk, then
/// ends the chunked body (`finished`) or drops the connection.
async fn cutting_server(body: String, finished: bool) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            if socket.read(&mut byte).await.unwrap() == 0 {
                return;
            }
            head.push(byte[0]);
        }
        let mut answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\n\
             transfer-encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n",
            body.len()
        );
        if finished {
            answer.push_str("0\r\n\r\n");
        }
        socket.write_all(answer.as_bytes()).await.unwrap();
        socket.flush().await.unwrap();
        // Dropped: the connection closes.
    });
    base
}
