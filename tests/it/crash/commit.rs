//! Kill -9: a program committing in a loop is SIGKILLed at random moments; after every kill
//! the store must hold both the subject write and the row of every change, or neither, and
//! every change the program acknowledged, and verify against its Merkle tree.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::support::trail::*;
use ankusa::audit::tree::verify::{self, Verification};
use ankusa::store::{keys::meta, Cf, Store};
use rand::Rng;

const KILLS: usize = 20;

#[test]
fn kill_9_leaves_both_or_neither_and_every_acknowledged_commit() {
    let dir = tempfile::tempdir().unwrap();
    let mut acked: BTreeMap<u64, String> = BTreeMap::new();
    let mut rng = rand::rng();
    for round in 0..KILLS {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ankusa-crashtest"))
            .arg("commit")
            .arg(dir.path())
            .arg(format!("r{round}"))
            .arg("8")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn crashtest");
        let stdout = child.stdout.take().unwrap();
        let (lines_tx, lines) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Wait until it is ready, then let it run a random while before the kill.
        let first = lines
            .recv_timeout(Duration::from_secs(30))
            .expect("crashtest started");
        assert_eq!(first, "ready");
        // The first round waits for a commit (its fsync may be slow on a loaded machine), so
        // that the store holds something before the first kill.
        if round == 0 {
            let line = lines
                .recv_timeout(Duration::from_secs(30))
                .expect("a first commit");
            record(&mut acked, &line);
        }
        let deadline = Instant::now() + Duration::from_millis(rng.random_range(20..300));
        while Instant::now() < deadline {
            if let Ok(line) = lines.recv_timeout(Duration::from_millis(5)) {
                record(&mut acked, &line);
            }
        }
        child.kill().expect("SIGKILL");
        child.wait().unwrap();
        reader.join().unwrap();
        // Lines printed before the kill that were still in the pipe were acknowledged too.
        for line in lines.try_iter() {
            record(&mut acked, &line);
        }
        check_store(dir.path(), &acked);
    }
    assert!(
        acked.len() > KILLS,
        "too few commits to mean anything: {}",
        acked.len()
    );
}

fn record(acked: &mut BTreeMap<u64, String>, line: &str) {
    let mut parts = line.split(' ');
    if let (Some("ack"), Some(seq), Some(key)) = (parts.next(), parts.next(), parts.next()) {
        let seq: u64 = seq.parse().unwrap();
        assert!(
            acked.insert(seq, key.to_owned()).is_none(),
            "seq {seq} acknowledged twice"
        );
    }
}

fn check_store(path: &std::path::Path, acked: &BTreeMap<u64, String>) {
    let store = Store::open(path).expect("reopen after kill");
    let rows = all_rows(&store);
    let seqs: Vec<u64> = rows.iter().map(|r| r.seq).collect();
    let unique: BTreeSet<u64> = seqs.iter().copied().collect();
    assert_eq!(unique.len(), seqs.len(), "duplicate seqs");
    // No refusals in this program, so seqs are exactly 1..=N.
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert_eq!(store.meta_u64(meta::AUDIT_SEQ).unwrap(), seqs.len() as u64);
    // Checkpoint rows (every 50 rows) are the node's own, without a subject.
    let rows: Vec<_> = rows
        .into_iter()
        .filter(|r| r.action != "trail.checkpoint")
        .collect();
    let row_keys: BTreeSet<Vec<u8>> = rows
        .iter()
        .map(|r| r.resource.clone().into_bytes())
        .collect();
    let subject_keys: BTreeSet<Vec<u8>> = all_keys(&store, Cf::Sources).into_iter().collect();
    assert_eq!(row_keys.len(), rows.len(), "one row per change");
    assert_eq!(
        row_keys, subject_keys,
        "every row has its subject write and every write its row"
    );
    // Whatever the kill cut, every row has its index entries and every entry its row...
    assert_index_exact(&store);
    // ...every row is in the tree and every checkpoint matches.
    match verify::verify(&store, None, &[], &mut |_, _| {}).expect("verify") {
        Verification::Verified(s) => assert_eq!(s.size, seqs.len() as u64),
        broken => panic!("after a kill: {broken:?}"),
    }
    let by_seq: BTreeMap<u64, &str> = rows.iter().map(|r| (r.seq, r.resource.as_str())).collect();
    for (seq, key) in acked {
        assert_eq!(
            by_seq.get(seq).copied(),
            Some(key.as_str()),
            "acknowledged commit {seq} lost"
        );
    }
}
