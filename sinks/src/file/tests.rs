//! File sink tests against a real temp directory: exact bytes, append across reopen, and the
//! failure path (a directory where the file should be).

use super::*;
use crate::test_support::{sample, sample_json};
use crate::{Outcome, Sink, SinkConfig, SinkError};

fn config(path: &std::path::Path) -> SinkConfig {
    serde_json::from_value(serde_json::json!({"kind": "file", "path": path})).unwrap()
}

fn expected_lines(events: &[(u64, &str)]) -> String {
    events
        .iter()
        .map(|(seq, key)| sample_json(*seq, key) + "\n")
        .collect()
}

#[tokio::test]
async fn writes_one_exact_json_line_per_event() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let (sink, _) = config(&path).build().await.unwrap();
    assert_eq!(sink.kind(), "file");

    let events = [
        sample(1, "acme/r1"),
        sample(2, "acme/r2"),
        sample(3, "acme/r1"),
    ];
    let outcomes = sink.send(&events).await;

    assert_eq!(outcomes, vec![Outcome::Delivered; 3]);
    let written = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        written,
        expected_lines(&[(1, "acme/r1"), (2, "acme/r2"), (3, "acme/r1")])
    );
}

#[tokio::test]
async fn lines_parse_back_to_the_same_events() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let sink = FileSink::new(FileConfig {
        path: path.clone(),
        retry: Default::default(),
    })
    .unwrap();
    let events = [sample(41, "t/a"), sample(42, "t/b")];
    sink.send(&events).await;

    let written = std::fs::read_to_string(&path).unwrap();
    let parsed: Vec<cloudevents::Event> = written
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        parsed,
        vec![events[0].event.clone(), events[1].event.clone()]
    );
}

#[tokio::test]
async fn a_new_sink_on_the_same_path_appends() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/dir/events.jsonl");
    {
        let (sink, _) = config(&path).build().await.unwrap();
        assert_eq!(sink.send(&[sample(1, "k")]).await, vec![Outcome::Delivered]);
        assert_eq!(sink.send(&[sample(2, "k")]).await, vec![Outcome::Delivered]);
    }
    let (sink, _) = config(&path).build().await.unwrap();
    sink.healthcheck().await.unwrap();
    assert_eq!(sink.send(&[sample(3, "k")]).await, vec![Outcome::Delivered]);

    let written = std::fs::read_to_string(&path).unwrap();
    assert_eq!(written, expected_lines(&[(1, "k"), (2, "k"), (3, "k")]));
}

#[tokio::test]
async fn healthcheck_creates_the_file() {
    let dir = tempfile::tempdir().unwrap();
    // In directories that do not exist yet, as the first write would make them.
    let path = dir.path().join("log/ankusa/fresh.jsonl");
    let (sink, _) = config(&path).build().await.unwrap();
    assert!(!path.exists());
    sink.healthcheck().await.unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"");
}

#[tokio::test]
async fn an_unwritable_path_is_unhealthy_and_retried() {
    let dir = tempfile::tempdir().unwrap();
    // The path is a directory: opening it for append fails.
    let (sink, _) = config(dir.path()).build().await.unwrap();
    assert!(matches!(sink.healthcheck().await, Err(SinkError::Io(_))));

    let outcomes = sink.send(&[sample(1, "k"), sample(2, "k")]).await;
    assert_eq!(outcomes.len(), 2);
    for outcome in outcomes {
        let Outcome::Retry { after, reason } = outcome else {
            panic!("expected Retry, got {outcome:?}")
        };
        assert_eq!(after, None);
        assert!(reason.starts_with("io_"), "{reason}");
    }
}

#[tokio::test]
async fn an_empty_path_is_refused_by_name() {
    let err = config(std::path::Path::new(""))
        .build()
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&err, SinkError::Config(m) if m.contains("path")),
        "{err}"
    );
}

#[tokio::test]
async fn an_empty_slice_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let (sink, _) = config(&path).build().await.unwrap();
    assert!(sink.send(&[]).await.is_empty());
    assert!(!path.exists());
}

/// A file moved away (rotated) or deleted is not written to any more: the next events go to
/// a new file at the path, and the moved one keeps what it had.
#[tokio::test]
async fn a_rotated_or_deleted_file_is_opened_again_at_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let rotated = dir.path().join("events.jsonl.1");
    let (sink, _) = config(&path).build().await.unwrap();
    assert_eq!(sink.send(&[sample(1, "a")]).await, vec![Outcome::Delivered]);

    std::fs::rename(&path, &rotated).unwrap();
    assert_eq!(sink.send(&[sample(2, "a")]).await, vec![Outcome::Delivered]);
    assert_eq!(
        std::fs::read_to_string(&rotated).unwrap(),
        expected_lines(&[(1, "a")])
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        expected_lines(&[(2, "a")])
    );

    std::fs::remove_file(&path).unwrap();
    assert_eq!(sink.send(&[sample(3, "a")]).await, vec![Outcome::Delivered]);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        expected_lines(&[(3, "a")])
    );
}

/// Half a line left by a crash mid-write (never confirmed: its event comes again) is cut off
/// before the next line is appended, so no line is ever two events glued together.
#[tokio::test]
async fn an_unfinished_last_line_is_cut_off_before_appending() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let whole = expected_lines(&[(1, "a")]);
    let torn = sample_json(2, "a");
    std::fs::write(&path, format!("{whole}{}", &torn[..torn.len() / 2])).unwrap();

    let (sink, _) = config(&path).build().await.unwrap();
    let events = [sample(2, "a"), sample(3, "a")];
    assert_eq!(sink.send(&events).await, vec![Outcome::Delivered; 2]);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        expected_lines(&[(1, "a"), (2, "a"), (3, "a")])
    );

    // A file that is all one unfinished line is emptied first.
    std::fs::write(&path, &torn[..10]).unwrap();
    let (sink, _) = config(&path).build().await.unwrap();
    assert_eq!(sink.send(&[sample(4, "a")]).await, vec![Outcome::Delivered]);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        expected_lines(&[(4, "a")])
    );
}

#[cfg(unix)]
#[tokio::test]
async fn the_events_file_and_its_new_dirs_are_the_owners_only() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a/b/events.jsonl");
    let (sink, _) = config(&path).build().await.unwrap();
    sink.healthcheck().await.unwrap();
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&dir.path().join("a/b")), 0o700);
    assert_eq!(mode(&dir.path().join("a")), 0o700);
}
