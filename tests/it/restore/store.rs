//! Backups, restores and incarnations, at the library level: a restored store re-issues seqs
//! that were already published, and its events never reuse an id with other content.
//!
//! The crash of the boot that opens the new incarnation is in `crash::restore`; a restore
//! whose replaced store cannot be moved aside, in `failpoints::restore`.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::publisher::{consumer_order, publish_to, read_events, seq_of};
use crate::support::trail::*;
use ankusa::audit::{
    Change, CommitError, Committed, Row, SystemClock, Trail, Usage, RESTORE_ACTION,
};
use ankusa::lifecycle::event::event_id;
use ankusa::store::backup::{last_seq, BackupDir, BackupError};
use ankusa::store::restore::{restore, RestoreRequest, Restored};
use ankusa::store::{keys::meta, Cf, Store};
use serde_json::{json, Value};

pub(crate) fn now() -> u64 {
    use ankusa::audit::Clock as _;
    SystemClock.now_ms()
}

async fn delete_source(trail: &Trail, id: &str) -> Committed<()> {
    let id = id.to_owned();
    trail
        .commit(ctx("ops"), move |tx| {
            let key = format!("t1/{id}").into_bytes();
            let before: Value = tx.get_json(Cf::Sources, &key)?.expect("exists");
            tx.delete(Cf::Sources, key)?;
            let revision = before["revision"].as_u64().unwrap() + 1;
            let change = Change::new("source.delete", format!("sources/{id}"))
                .tenant("t1")
                .states(Some(before), None)
                .revision(revision)
                .entity(json!({"id": id, "tenant": "t1", "revision": revision}));
            Ok::<_, CommitError<()>>((change, ()))
        })
        .await
        .unwrap()
}

/// What a downstream consumer rebuilds from the events it received (applied as
/// `consumer_order` says): the sources it believes exist, by subject.
fn replica(events: &[Value]) -> BTreeMap<String, Value> {
    let applied = consumer_order(events);
    let mut state = BTreeMap::new();
    for e in applied {
        let subject = e["subject"].as_str().unwrap().to_owned();
        match e["data"]["action"].as_str().unwrap() {
            "source.delete" => state.remove(&subject),
            _ => state.insert(subject, e["data"]["entity"].clone()),
        };
    }
    state
}

/// The sources the node's store holds, as their events carry them (no secret).
fn node_sources(store: &Store) -> BTreeMap<String, Value> {
    let mut state = BTreeMap::new();
    store
        .scan(Cf::Sources, b"", b"", |_, v| {
            let s: Value = serde_json::from_slice(v).unwrap();
            let id = s["id"].as_str().unwrap();
            let view = json!({"id": id, "tenant": s["tenant"], "revision": s["revision"]});
            state.insert(format!("sources/{id}"), view);
            true
        })
        .unwrap();
    state
}

pub(crate) fn restore_rows(store: &Store) -> Vec<Row> {
    all_rows(store)
        .into_iter()
        .filter(|r| r.action == RESTORE_ACTION)
        .collect()
}

pub(crate) fn restore_into(
    backups: &Path,
    id: Option<u32>,
    target: &Path,
    force: bool,
) -> Restored {
    let req = RestoreRequest {
        from: backups,
        id,
        target,
        force,
        carry: &[],
    };
    restore(&req, now(), &|_| {}).expect("restore")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_node_resends_old_ids_then_restored_then_new_ids_and_a_replica_converges() {
    let dir = tempfile::tempdir().unwrap();
    let (path, events, backups) = (
        dir.path().join("store"),
        dir.path().join("events.jsonl"),
        dir.path().join("backups"),
    );
    let trail = open_trail_with_sinks(&path, &["file"]);
    for i in 0..10 {
        create_source(&trail, ctx("a"), &format!("s{i}"), "x")
            .await
            .unwrap();
    }
    publish_to(&trail, &events, 10).await;
    for i in 0..5 {
        update_secret(&trail, ctx("a"), &format!("s{i}"), "y")
            .await
            .unwrap();
    }
    // N = 15 rows; the sink is at 10 in the backup.
    let backup = BackupDir::create(&backups)
        .unwrap()
        .back_up(trail.store(), now())
        .unwrap();
    assert_eq!(backup.audit_seq, Some(15));
    // M = 11 more, then everything is published under the first incarnation.
    for i in 5..10 {
        update_secret(&trail, ctx("a"), &format!("s{i}"), "lost")
            .await
            .unwrap();
    }
    for i in 10..15 {
        create_source(&trail, ctx("a"), &format!("s{i}"), "lost")
            .await
            .unwrap();
    }
    assert_eq!(delete_source(&trail, "s0").await.seq, 26);
    publish_to(&trail, &events, 26).await;
    let before = read_events(&events);
    assert_eq!(before.len(), 26);
    let first_ids: HashSet<String> = before.iter().map(|e| e["id"].to_string()).collect();
    let old = trail.history().current();
    trail.shutdown().await;
    drop(trail);

    let restored = restore_into(&backups, None, &path, true);
    assert_eq!((restored.id, restored.audit_seq), (backup.id, 15));
    assert!(
        restored.replaced.as_ref().unwrap().is_dir(),
        "the old store was moved aside"
    );

    let trail = open_trail_with_sinks(&path, &["file"]);
    let history = trail.history().clone();
    assert_eq!(history.0.len(), 2);
    assert_eq!(history.0[0], old);
    let new = history.current();
    assert_eq!(new.from, 16);
    assert_ne!(new.id, old.id);
    // K = 3 changes: their seqs (17..19) repeat seqs the lost store published.
    create_source(&trail, ctx("b"), "s10", "new").await.unwrap();
    update_secret(&trail, ctx("b"), "s1", "new").await.unwrap();
    assert_eq!(
        create_source(&trail, ctx("b"), "s20", "new")
            .await
            .unwrap()
            .seq,
        19
    );
    publish_to(&trail, &events, 19).await;

    let all = read_events(&events);
    let after = &all[before.len()..];
    let seqs: Vec<u64> = after.iter().map(seq_of).collect();
    assert_eq!(seqs, vec![11, 12, 13, 14, 15, 16, 17, 18, 19]);
    for e in &after[..5] {
        assert_eq!(
            e,
            &before[seq_of(e) as usize - 1],
            "re-sent with its original id and body"
        );
    }
    let restored_event = &after[5];
    assert_eq!(restored_event["type"], "io.ankusa.instance.restored");
    assert_eq!(restored_event["incarnation"], new.id.to_string());
    assert_eq!(restored_event["id"], event_id(new.id, 16).to_string());
    assert_eq!(
        restored_event["data"]["entity"],
        json!({"incarnation": new.id, "restored_seq": 15})
    );
    for e in &after[5..] {
        assert_eq!(e["incarnation"], new.id.to_string());
        assert!(
            !first_ids.contains(&e["id"].to_string()),
            "a new id for a repeated seq"
        );
        assert!(
            before.iter().any(|b| seq_of(b) == seq_of(e)),
            "its seq repeats one"
        );
    }
    let state = node_sources(trail.store());
    assert!(
        state.contains_key("sources/s0"),
        "the lost delete is undone"
    );
    assert_eq!(
        replica(&all),
        state,
        "the replica is the node's exact source state"
    );
    assert_eq!(restore_rows(trail.store()).len(), 1);
    // The restored rows came with their index entries, the new incarnation's got theirs.
    assert_index_exact(trail.store());
    trail.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_while_changes_commit_holds_exactly_the_seq_it_records() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail(&dir.path().join("store"), true);
    let backups = dir.path().join("backups");
    let mut writers = vec![];
    for w in 0..4 {
        let trail = trail.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..150 {
                create_source(&trail, ctx("w"), &format!("w{w}-{i}"), "x")
                    .await
                    .unwrap();
            }
        }));
    }
    let mut made = vec![];
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(30)).await;
        let store = trail.store().clone();
        let backups = backups.clone();
        made.push(
            ankusa::store::blocking::run("a backup", move || {
                BackupDir::create(&backups)
                    .unwrap()
                    .back_up(&store, now())
                    .unwrap()
            })
            .await
            .unwrap(),
        );
    }
    for w in writers {
        w.await.unwrap();
    }
    trail.shutdown().await;
    for (n, backup) in made.iter().enumerate() {
        let target = dir.path().join(format!("r{n}"));
        let restored = restore_into(&backups, Some(backup.id), &target, false);
        let seq = backup.audit_seq.unwrap();
        assert_eq!(restored.audit_seq, seq);
        let store = Store::open(&target).unwrap();
        assert_eq!(last_seq(&store).unwrap(), seq);
        let rows = all_rows(&store);
        assert_eq!(
            rows.iter().map(|r| r.seq).collect::<Vec<_>>(),
            (1..=seq).collect::<Vec<_>>(),
            "a prefix of the trail, whole"
        );
        assert_eq!(
            all_keys(&store, Cf::Sources).len() as u64,
            seq,
            "every row's subject"
        );
        let usage = Usage::decode(&store.meta(meta::AUDIT_USAGE).unwrap().unwrap());
        assert_eq!(
            usage.map(|u| (u.rows, u.seq)),
            Some((seq, seq)),
            "its counters"
        );
    }
    assert!(made.windows(2).all(|w| w[0].id < w[1].id));
}

#[tokio::test]
async fn two_restores_from_one_backup_open_two_distinct_incarnations() {
    let dir = tempfile::tempdir().unwrap();
    let (path, backups) = (dir.path().join("store"), dir.path().join("backups"));
    let trail = open_trail(&path, true);
    for i in 0..3 {
        create_source(&trail, ctx("a"), &format!("s{i}"), "x")
            .await
            .unwrap();
    }
    let first = trail.history().current();
    let backup = BackupDir::create(&backups)
        .unwrap()
        .back_up(trail.store(), now())
        .unwrap();
    trail.shutdown().await;
    drop(trail);
    let mut opened = vec![];
    for _ in 0..2 {
        restore_into(&backups, Some(backup.id), &path, true);
        let trail = open_trail(&path, true);
        assert_eq!(trail.history().0.len(), 2, "the backup's history plus one");
        assert_eq!(trail.history().0[0], first);
        opened.push(trail.history().current());
        // The restore row's batch kept the counters right: no recount needed.
        let store = trail.store();
        let stored = Usage::decode(&store.meta(meta::AUDIT_USAGE).unwrap().unwrap()).unwrap();
        assert_eq!(stored, Usage::recount(store, 4).unwrap());
        create_source(&trail, ctx("b"), "s9", "x").await.unwrap();
        trail.shutdown().await;
    }
    assert_eq!((opened[0].from, opened[1].from), (4, 4));
    assert_ne!(opened[0].id, opened[1].id);
    assert_ne!(event_id(opened[0].id, 5), event_id(opened[1].id, 5));
    // A boot of a store without the flag opens nothing.
    let trail = open_trail(&path, true);
    assert_eq!(trail.history().current(), opened[1]);
    assert_eq!(restore_rows(trail.store()).len(), 1);
    trail.shutdown().await;
}

/// A store at `<dir>/store` with source s1, backed up into `<dir>/backups`; its trail still
/// running.
pub(crate) async fn backed_up_with_one_source() -> (tempfile::TempDir, PathBuf, PathBuf, Trail) {
    let dir = tempfile::tempdir().unwrap();
    let (path, backups) = (dir.path().join("store"), dir.path().join("backups"));
    let trail = open_trail(&path, true);
    create_source(&trail, ctx("a"), "s1", "x").await.unwrap();
    BackupDir::create(&backups)
        .unwrap()
        .back_up(trail.store(), now())
        .unwrap();
    (dir, path, backups, trail)
}

#[tokio::test]
async fn restores_refuse_a_non_empty_path_a_store_in_use_and_a_corrupt_backup() {
    let (dir, path, backups, trail) = backed_up_with_one_source().await;
    let attempt = |target: &Path, force: bool| {
        let req = RestoreRequest {
            from: &backups,
            id: None,
            target,
            force,
            carry: &[],
        };
        restore(&req, now(), &|_| {})
    };
    // The store in use: refused even with --force.
    let e = attempt(&path, true).unwrap_err();
    assert!(e.to_string().contains("in use"), "{e}");
    trail.shutdown().await;
    drop(trail);
    // Not empty: refused without --force; not a store: refused even with it.
    let e = attempt(&path, false).unwrap_err();
    assert!(e.to_string().contains("--force"), "{e}");
    let other = dir.path().join("notes");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("todo.txt"), "keep me").unwrap();
    let e = attempt(&other, true).unwrap_err();
    assert!(e.to_string().contains("holds no store"), "{e}");
    assert_eq!(
        std::fs::read_to_string(other.join("todo.txt")).unwrap(),
        "keep me"
    );
    // An empty directory is fine.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    attempt(&empty, false).unwrap();
    assert!(Store::open(&empty)
        .unwrap()
        .meta(meta::INCARNATION_PENDING)
        .unwrap()
        .is_some());

    // Corrupt: a table file's bytes flipped (same size: only the checksum tells).
    flip_bytes(&backups, "sst");
    let target = dir.path().join("corrupt");
    let e = attempt(&target, false).unwrap_err();
    assert!(matches!(e, BackupError::Corrupt { .. }), "{e:?}");
    assert!(e.to_string().contains("corrupt"), "{e}");
    assert!(!target.exists(), "nothing half-restored");
    assert_no_temp_dirs(dir.path());
    // Corrupt: a file cut short.
    truncate_one(&backups);
    let e = attempt(&target, false).unwrap_err();
    assert!(matches!(e, BackupError::Corrupt { .. }), "{e:?}");
    assert!(!target.exists());
    assert_no_temp_dirs(dir.path());
    // And the store that was there is untouched by all of this.
    let store = Store::open(&path).unwrap();
    assert_eq!(all_rows(&store).len(), 1);
    assert!(store.meta(meta::INCARNATION_PENDING).unwrap().is_none());
}

/// A forced restore keeps the store it replaces locked from its first look until the restored
/// one takes its place (another process, as a node would, cannot open it meanwhile), then
/// trades the two in one rename: the replaced store is aside, whole, and nothing temporary is
/// left.
#[tokio::test]
async fn a_forced_restore_holds_the_replaced_store_until_the_swap() {
    let (dir, path, backups, trail) = backed_up_with_one_source().await;
    create_source(&trail, ctx("a"), "s2", "x").await.unwrap();
    trail.shutdown().await;
    drop(trail);

    let req = RestoreRequest {
        from: &backups,
        id: None,
        target: &path,
        force: true,
        carry: &[],
    };
    // `ankusa backup create` opens the store as a node would, from another process.
    let scratch = dir.path().join("scratch");
    let opened_elsewhere = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ankusa"))
            .args(["backup", "create", "--store"])
            .arg(&path)
            .arg("--to")
            .arg(&scratch)
            .output()
            .unwrap();
        match String::from_utf8_lossy(&out.stderr) {
            e if e.contains("in use") => "held",
            _ if out.status.success() => "open",
            e => panic!("{e}"),
        }
    };
    let stages = std::sync::Mutex::new(Vec::new());
    let restored = restore(&req, now(), &|stage| {
        stages
            .lock()
            .unwrap()
            .push(format!("{stage}: {}", opened_elsewhere()));
    })
    .unwrap();
    assert_eq!(
        stages.into_inner().unwrap(),
        vec![
            "verifying the backup: held",
            "restoring backup 1: held",
            "moving the restored store into place: held",
        ]
    );
    let aside = restored.replaced.expect("the replaced store's new place");
    assert_eq!(all_rows(&Store::open(&aside).unwrap()).len(), 2);
    let store = Store::open(&path).unwrap();
    assert_eq!(all_rows(&store).len(), 1);
    assert!(store.meta(meta::INCARNATION_PENDING).unwrap().is_some());
    assert_no_temp_dirs(dir.path());
}

/// Every file under `dir` with extension `ext`.
pub fn files_with(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = vec![];
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            out.extend(files_with(&p, ext));
        } else if p.extension().is_some_and(|e| e == ext) {
            out.push(p);
        }
    }
    out
}

fn flip_bytes(backups: &Path, ext: &str) {
    let files = files_with(backups, ext);
    assert!(!files.is_empty(), "the backup has .{ext} files");
    for f in files {
        let mut bytes = std::fs::read(&f).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
        std::fs::write(&f, bytes).unwrap();
    }
}

fn truncate_one(backups: &Path) {
    let f = files_with(backups, "sst").pop().unwrap();
    let len = std::fs::metadata(&f).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
}

fn assert_no_temp_dirs(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!name.contains(".restore-"), "left behind: {name}");
    }
}
