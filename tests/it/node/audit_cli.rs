//! `ankusa audit key | verify` through the real binary: the key printed is the store's, a
//! store verifies (exit 0), a changed row is named (exit 1), and what cannot be checked is
//! refused (exit 2).

use std::path::Path;
use std::process::{Command, Output};

use crate::support::trail::*;
use ankusa::audit::tree::checkpoint::{CheckpointKey, SignedCheckpoint};
use ankusa::audit::{TrailOptions, TreeOptions};
use ankusa::store::{keys, Cf, Store};

fn audit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .arg("audit")
        .args(args)
        .env_remove("ANKUSA_CONFIG")
        .output()
        .expect("run ankusa audit")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A stopped store of 20 source rows and a checkpoint row (seq 21, size 20).
fn store(dir: &Path) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let options = TrailOptions {
            tree: TreeOptions {
                checkpoint_rows: 1000,
                ..TreeOptions::default()
            },
            ..TrailOptions::default()
        };
        let trail = open_trail_with(dir, options);
        for i in 0..20 {
            create_source(&trail, ctx("ops"), &format!("s{i}"), "pw")
                .await
                .unwrap();
        }
        assert_eq!(trail.checkpoint_now().await.unwrap(), Some(21));
        trail.shutdown().await;
    });
}

#[test]
fn verify_exits_by_what_it_found_and_key_prints_the_stores_verifier_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    store(&path);
    let (vkey, checkpoint) = {
        let store = Store::open(&path).unwrap();
        let key = CheckpointKey::load(&store).unwrap().unwrap();
        let newest = SignedCheckpoint::newest(&store).unwrap().unwrap();
        (key.verifier_key().to_owned(), newest)
    };
    let p = path.to_str().unwrap();

    let out = audit(&["key", "--store", p]);
    assert!(out.status.success());
    assert_eq!(stdout(&out), format!("{vkey}\n"));

    let cp = dir.path().join("cp.txt");
    std::fs::write(&cp, &checkpoint.checkpoint).unwrap();
    let out = audit(&[
        "verify",
        "--store",
        p,
        "--key",
        &vkey,
        "--checkpoint",
        cp.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "verified: rows 1 to 21, tree size 21, root {}, 1 checkpoint rows\n\
             checkpoint {}: verified at size 20\n\
             checkpoint m:checkpoint: verified at size 20\n",
            root(&path),
            cp.display()
        )
    );

    // Row 7's value changed, one byte.
    {
        let db = open_stopped(&path);
        let cf = db.cf_handle(Cf::Audit.name()).unwrap();
        let (k, mut v) = db
            .iterator_cf(
                cf,
                rocksdb::IteratorMode::From(&keys::row_seek(7), rocksdb::Direction::Forward),
            )
            .next()
            .unwrap()
            .unwrap();
        let at = v.iter().position(|&b| b == b's').unwrap();
        v[at] = b'S';
        db.put_cf(cf, k, v).unwrap();
    }
    let out = audit(&["verify", "--store", p]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stdout(&out),
        "NOT verified: first bad seq 7: row 7 is not the row the tree holds at its place\n"
    );

    // A checkpoint of another key, no store: it cannot check.
    let other = tempfile::tempdir().unwrap();
    store(other.path());
    let other_key = {
        let s = Store::open(other.path()).unwrap();
        CheckpointKey::load(&s)
            .unwrap()
            .unwrap()
            .verifier_key()
            .to_owned()
    };
    let out = audit(&["verify", "--store", p, "--key", &other_key]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("checkpoint m:checkpoint: its signature does not verify with the key"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let missing = dir.path().join("none");
    let out = audit(&["verify", "--store", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("ankusa: no store at {}\n", missing.display())
    );
}

/// The root of the store's whole tree, as the API's proof of its last row says.
fn root(path: &Path) -> String {
    let store = Store::open(path).unwrap();
    ankusa::audit::tree::proof::inclusion(&store, 21, 21, 21)
        .unwrap()
        .root
}
