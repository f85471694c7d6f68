//! The node's log lines as an operator's log collector sees them: `ankusa serve` with stderr
//! going to a pipe writes plain text (no terminal colour codes) or, with
//! `log.format = "json"`, one JSON object per line.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

/// Start `ankusa serve` on a fresh store with `log.format = format`, and return its stderr
/// lines up to and including the one that says it is serving.
fn lines_until_serving(format: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.path().join("node.toml");
    std::fs::write(
        &config,
        format!(
            "[node]\ndata_dir = \"{}\"\n[api]\nlisten = \"127.0.0.1:{port}\"\n\
             [log]\nlevel = \"info\"\nformat = \"{format}\"\n",
            dir.path().join("data").display()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .args(["--config", config.to_str().unwrap(), "serve"])
        .current_dir(dir.path())
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ankusa serve");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let serving = loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => {
                let done = line.contains("node serving");
                lines.push(line);
                if done {
                    break true;
                }
            }
            Err(_) => break false,
        }
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(serving, "no \"node serving\" line: {lines:?}");
    lines
}

#[test]
fn text_logs_to_a_pipe_carry_no_colour_codes() {
    let lines = lines_until_serving("text");
    for line in &lines {
        assert!(!line.contains('\u{1b}'), "escape code in {line:?}");
    }
    let serving = lines.last().unwrap();
    assert!(serving.contains(" INFO "), "{serving:?}");
    assert!(
        serving.contains("ankusa::node: node serving addr=127.0.0.1:"),
        "{serving:?}"
    );
}

#[test]
fn json_logs_are_one_object_per_line() {
    let lines = lines_until_serving("json");
    let objects: Vec<Value> = lines
        .iter()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}")))
        .collect();
    let serving = objects.last().unwrap();
    assert_eq!(serving["level"], "INFO");
    assert_eq!(serving["target"], "ankusa::node");
    assert_eq!(serving["fields"]["message"], "node serving");
    assert!(serving["fields"]["addr"]
        .as_str()
        .unwrap()
        .starts_with("127.0.0.1:"));
}
