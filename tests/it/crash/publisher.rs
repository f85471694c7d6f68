//! Kill the publishing process after a sink confirmed but before the position was persisted,
//! and after it was persisted: on restart nothing is lost, and a redelivered event is the
//! same event (same id, same body).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use ankusa::store::{keys::meta, Store};
use serde_json::Value;

const N: u64 = 50;
const BATCH: &str = "10";

fn run(store: &Path, events: &Path, failpoints: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ankusa-crashtest"));
    cmd.arg("publish")
        .arg(store)
        .arg(events)
        .arg(N.to_string())
        .arg(BATCH);
    if let Some(f) = failpoints {
        cmd.env("FAILPOINTS", f);
    }
    cmd.output().expect("run crashtest publish")
}

fn position(store: &Path) -> u64 {
    let s = Store::open(store).unwrap();
    s.meta_u64(&meta::sink_position("file")).unwrap()
}

/// Every line of the events file, and the events by sequence (checking that repeats are
/// byte-for-byte the same event). A last line without its newline was torn by the kill (the
/// sink was writing the next batch): it was never confirmed, and the sink cuts it when it
/// opens the file again.
fn events(path: &Path) -> (Vec<u64>, BTreeMap<u64, Value>) {
    let mut order = vec![];
    let mut by_seq: BTreeMap<u64, Value> = BTreeMap::new();
    let text = std::fs::read_to_string(path).unwrap();
    let whole = &text[..text.rfind('\n').map_or(0, |end| end + 1)];
    for line in whole.lines() {
        let e: Value = serde_json::from_str(line).unwrap();
        let seq: u64 = e["sequence"].as_str().unwrap().parse().unwrap();
        if let Some(earlier) = by_seq.get(&seq) {
            assert_eq!(earlier, &e, "a redelivery of seq {seq} is the same event");
        }
        by_seq.insert(seq, e);
        order.push(seq);
    }
    (order, by_seq)
}

/// After a run that ended cleanly, the file holds whole lines only (a torn one was cut).
fn assert_whole(path: &Path) {
    let bytes = std::fs::read(path).unwrap();
    assert!(
        bytes.ends_with(b"\n"),
        "the events file ends in a torn line"
    );
}

#[test]
fn crash_before_the_position_is_persisted_redelivers_the_same_events() {
    let dir = tempfile::tempdir().unwrap();
    let (store, file) = (dir.path().join("store"), dir.path().join("events.jsonl"));
    // The second batch is delivered, then the process dies before persisting its position.
    let out = run(
        &store,
        &file,
        Some("lifecycle::before_persist=1*off->panic"),
    );
    assert!(!out.status.success(), "the failpoint killed it");
    // Position writes run beside delivery: the first batch's may or may not have synced.
    let persisted = position(&store);
    assert!(
        persisted == 0 || persisted == 10,
        "at most the first batch's position was persisted: {persisted}"
    );
    let (order, _) = events(&file);
    assert_eq!(
        order,
        (1..=20).collect::<Vec<_>>(),
        "the sink has the second batch"
    );
    let out = run(&store, &file, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(position(&store), N);
    assert_whole(&file);
    let (order, by_seq) = events(&file);
    assert_eq!(
        by_seq.keys().copied().collect::<Vec<_>>(),
        (1..=N).collect::<Vec<_>>(),
        "nothing lost"
    );
    let mut expected: Vec<u64> = (1..=20).collect();
    expected.extend(persisted + 1..=N);
    assert_eq!(
        order, expected,
        "exactly what the persisted position did not cover was delivered again"
    );
}

#[test]
fn crash_after_the_position_is_persisted_redelivers_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (store, file) = (dir.path().join("store"), dir.path().join("events.jsonl"));
    let out = run(&store, &file, Some("lifecycle::after_persist=1*off->panic"));
    assert!(!out.status.success(), "the failpoint killed it");
    let persisted = position(&store);
    assert!(
        persisted >= 20,
        "the second position write was persisted: {persisted}"
    );
    let (first_run, _) = events(&file);
    let out = run(&store, &file, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_whole(&file);
    let (order, by_seq) = events(&file);
    assert_eq!(by_seq.len() as u64, N, "nothing lost");
    // The restart resumes right after the persisted position: nothing at or below it is
    // delivered again (a batch delivered while that write was in flight may be).
    let second_run = &order[first_run.len()..];
    assert_eq!(
        second_run,
        (persisted + 1..=N).collect::<Vec<_>>().as_slice()
    );
}
