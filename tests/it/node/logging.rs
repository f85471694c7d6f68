//! The node's log lines as an operator's log collector sees them: `ankusa serve` with stderr
//! going to a pipe writes plain text (no terminal colour codes) or, with
//! `log.format = "json"`, one JSON object per line.

use std::time::Duration;

use crate::support::served::{serve, Stream};
use serde_json::Value;

/// Start `ankusa serve` on a fresh store with `log.format = format`, and return its stderr
/// lines up to and including the one that says it is serving.
fn lines_until_serving(format: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let served = serve(
        dir.path(),
        &format!("[log]\nlevel = \"info\"\nformat = \"{format}\"\n"),
        Stream::Stderr,
    );
    let mut lines = Vec::new();
    while let Ok(line) = served.lines.recv_timeout(Duration::from_secs(30)) {
        let serving = line.contains("node serving");
        lines.push(line);
        if serving {
            return lines;
        }
    }
    panic!("no \"node serving\" line: {lines:?}");
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
