//! Kill -9 during a retention sweep: a program (`ankusa-crashtest sweep`) that commits
//! while sweeping is SIGKILLed at random moments inside sweeps; after every kill the
//! counters are exact and no row the sink has not seen is gone.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use ankusa::audit::Usage;
use ankusa::store::{keys, keys::meta, Cf, Store};
use rand::Rng;

use crate::support::trail::{all_rows, assert_index_exact};

const KILLS: u64 = 12;

#[test]
fn kill_9_during_a_sweep_keeps_counters_exact_and_every_unseen_row() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rng();
    let mut acked = Vec::new();
    let mut swept_total = 0;
    for round in 0..KILLS {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ankusa-crashtest"))
            .arg("sweep")
            .arg(dir.path())
            .arg(round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn ankusa-crashtest sweep");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Kill it right after it asked the writer for the n-th sweep batch, with commits
        // in flight: early (deep in the expired rows) or late (where the sweep meets the
        // cursor and the sink moves it on).
        let kill_at = rng.random_range(1..30);
        let mut sweeps = 0;
        loop {
            let line = lines
                .recv_timeout(Duration::from_secs(60))
                .expect("ankusa-crashtest sweep output");
            if line.starts_with("sweep") {
                sweeps += 1;
                if sweeps == kill_at {
                    break;
                }
            }
            if let Some(seq) = line.strip_prefix("ack ") {
                acked.push(seq.parse::<u64>().unwrap());
            }
            if line.starts_with("swept") {
                swept_total += 1;
            }
        }
        child.kill().expect("SIGKILL");
        child.wait().unwrap();
        reader.join().unwrap();
        for line in lines.try_iter() {
            if let Some(seq) = line.strip_prefix("ack ") {
                acked.push(seq.parse::<u64>().unwrap());
            }
        }
        check(dir.path(), &acked);
    }
    assert!(swept_total > 0, "no sweep batch completed in any round");
}

/// After a kill: the counters equal a full count, every row at or above the persisted
/// cursor is there (seqs are dense: nothing is refused), every acknowledged commit at or
/// above it is there, and rows and entities go together.
fn check(dir: &std::path::Path, acked: &[u64]) {
    let store = Store::open(dir).expect("reopen after kill");
    let seq = store.meta_u64(meta::AUDIT_SEQ).unwrap();
    let truth = Usage::recount(&store, seq).unwrap();
    let stored = Usage::decode(&store.meta(meta::AUDIT_USAGE).unwrap().unwrap()).unwrap();
    assert_eq!(stored, truth, "m:audit_usage agrees with the trail");
    assert_index_exact(&store);
    let cursor = store.meta_u64(meta::LIFECYCLE_CURSOR).unwrap();
    let rows = all_rows(&store);
    let present: Vec<u64> = rows.iter().map(|r| r.seq).collect();
    let first = present.first().copied().unwrap_or(seq + 1);
    assert!(
        first <= cursor.max(1),
        "a row at or above the cursor {cursor} is gone (first {first})"
    );
    assert_eq!(
        present,
        (first..=seq).collect::<Vec<_>>(),
        "only a prefix was deleted"
    );
    for s in acked.iter().filter(|s| **s >= cursor) {
        assert!(
            present.binary_search(s).is_ok(),
            "acknowledged row {s} lost"
        );
    }
    for row in &rows {
        let entity = store.get(Cf::Audit, &keys::outbox_key(row.seq)).unwrap();
        assert_eq!(
            entity.is_some(),
            row.publish,
            "row {} and its entity",
            row.seq
        );
    }
    let orphans = crate::trail::retention::entity_seqs(&store)
        .into_iter()
        .filter(|s| present.binary_search(s).is_err())
        .count();
    assert_eq!(orphans, 0, "an entity outlived its row");
}
