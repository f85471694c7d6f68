//! A restored store opens its new incarnation at boot: the boot (`ankusa-crashtest
//! restore`) is aborted before, inside and after the incarnation's batch, and the next boot
//! leaves exactly one new incarnation and one `instance.restore` row.

use std::path::Path;
use std::process::{Command, Output};

use ankusa::store::backup::BackupDir;
use ankusa::store::{keys::meta, Store};

use crate::restore::store::{now, restore_into, restore_rows};
use crate::support::trail::{create_source, ctx, open_trail};

fn boot(store: &Path, failpoints: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ankusa-crashtest"));
    cmd.arg("restore").arg(store);
    if let Some(f) = failpoints {
        cmd.env("FAILPOINTS", f);
    }
    cmd.output().expect("run ankusa-crashtest restore")
}

/// (incarnations, instance.restore rows, flag present)
fn state(path: &Path) -> (Vec<ankusa::audit::Incarnation>, usize, bool) {
    let store = Store::open(path).unwrap();
    let history =
        ankusa::audit::History::decode(&store.meta(meta::INCARNATION).unwrap().unwrap()).unwrap();
    let flag = store.meta(meta::INCARNATION_PENDING).unwrap().is_some();
    (history.0, restore_rows(&store).len(), flag)
}

#[tokio::test]
async fn a_crash_before_inside_or_after_the_incarnation_batch_leaves_exactly_one() {
    let dir = tempfile::tempdir().unwrap();
    let backups = dir.path().join("backups");
    let trail = open_trail(&dir.path().join("store"), true);
    for i in 0..4 {
        create_source(&trail, ctx("a"), &format!("s{i}"), "x")
            .await
            .unwrap();
    }
    BackupDir::create(&backups)
        .unwrap()
        .back_up(trail.store(), now())
        .unwrap();
    trail.shutdown().await;
    drop(trail);
    for (point, finished) in [
        ("audit::restore::before_batch", false),
        ("audit::restore::in_batch", false),
        ("audit::restore::after_batch", true),
    ] {
        let path = dir.path().join(point.replace("::", "-"));
        restore_into(&backups, None, &path, false);
        let out = boot(&path, Some(&format!("{point}=panic")));
        assert!(!out.status.success(), "{point}: the failpoint killed it");
        let (history, rows, flag) = state(&path);
        if finished {
            assert_eq!(
                (history.len(), rows, flag),
                (2, 1, false),
                "{point}: all of it"
            );
        } else {
            assert_eq!(
                (history.len(), rows, flag),
                (1, 0, true),
                "{point}: none of it"
            );
        }
        let crashed = history;
        let out = boot(&path, None);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "booted 5");
        let (history, rows, flag) = state(&path);
        assert_eq!(
            (history.len(), rows, flag),
            (2, 1, false),
            "{point}: exactly one"
        );
        assert_eq!(history[1].from, 5);
        if finished {
            assert_eq!(history, crashed, "{point}: the finished incarnation stays");
        }
        // And booting again opens nothing more.
        assert!(boot(&path, None).status.success());
        assert_eq!(state(&path).0, history);
    }
}
