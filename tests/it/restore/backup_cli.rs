//! `ankusa backup create | list | restore` through the real binary, and
//! `POST /admin/v1/backups` through real HTTP: backups are listed with the m:audit_seq they
//! hold, restores refuse what they must, and a restored node opens a new incarnation.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::trail::{all_rows, create_source, ctx, open_trail};
use ankusa::store::{keys::meta, Store};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

pub(crate) fn ankusa(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .args(args)
        .env_remove("ANKUSA_CONFIG")
        .output()
        .expect("run ankusa")
}

pub(crate) fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn failed(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "unexpected success: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stderr.clone()).unwrap()
}

pub(crate) fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Commit `n` source creations on the store at `path` (its trail stopped afterwards).
async fn changes(path: &Path, from: usize, n: usize) {
    let trail = open_trail(path, true);
    for i in from..from + n {
        create_source(&trail, ctx("a"), &format!("s{i}"), "x")
            .await
            .unwrap();
    }
    trail.shutdown().await;
}

/// `ankusa backup list --json DIR`: (id, audit_seq) of each backup.
pub(crate) fn listed(dir: &Path) -> Vec<(u64, u64)> {
    ok(&ankusa(&["backup", "list", "--json", s(dir)]))
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["id"].as_u64().unwrap(), v["audit_seq"].as_u64().unwrap())
        })
        .collect()
}

#[tokio::test]
async fn create_list_and_restore_a_stopped_store() {
    let dir = tempfile::tempdir().unwrap();
    let (store, backups) = (dir.path().join("store"), dir.path().join("backups"));
    changes(&store, 0, 3).await;
    let out = ok(&ankusa(&[
        "backup",
        "create",
        "--to",
        s(&backups),
        "--store",
        s(&store),
    ]));
    assert!(out.starts_with("backup 1 of "), "{out}");
    assert!(out.contains("m:audit_seq 3"), "{out}");
    changes(&store, 3, 2).await;
    ok(&ankusa(&[
        "backup",
        "create",
        "--to",
        s(&backups),
        "--store",
        s(&store),
    ]));
    assert_eq!(listed(&backups), vec![(1, 3), (2, 5)]);
    let table = ok(&ankusa(&["backup", "list", s(&backups)]));
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].contains("m:audit_seq") && lines[0].contains("size"),
        "{table}"
    );
    assert_eq!(lines.len(), 3, "{table}");
    assert!(lines[1].trim_start().starts_with('1') && lines[1].trim_end().ends_with('3'));
    assert!(lines[2].trim_start().starts_with('2') && lines[2].trim_end().ends_with('5'));
    assert!(Store::open(&store)
        .unwrap()
        .meta(meta::INCARNATION_PENDING)
        .unwrap()
        .is_none());

    // A non-empty path is refused, and left as it was.
    let err = failed(&ankusa(&[
        "backup",
        "restore",
        "--from",
        s(&backups),
        "--store",
        s(&store),
    ]));
    assert!(
        err.contains("not empty") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(all_rows(&Store::open(&store).unwrap()).len(), 5);
    // An unknown id is refused by name.
    let elsewhere = dir.path().join("elsewhere");
    let err = failed(&ankusa(&[
        "backup",
        "restore",
        "--from",
        s(&backups),
        "--id",
        "9",
        "--store",
        s(&elsewhere),
    ]));
    assert!(err.contains("no backup 9"), "{err}");
    assert!(!elsewhere.exists());

    // Into a new path: backup 1, flagged.
    let out = ok(&ankusa(&[
        "backup",
        "restore",
        "--from",
        s(&backups),
        "--id",
        "1",
        "--store",
        s(&elsewhere),
    ]));
    assert!(out.contains("restored backup 1 (m:audit_seq 3)"), "{out}");
    let restored = Store::open(&elsewhere).unwrap();
    assert_eq!(all_rows(&restored).len(), 3);
    assert!(restored.meta(meta::INCARNATION_PENDING).unwrap().is_some());
    drop(restored);

    // Over the stopped store with --force: the newest backup; the old store moved aside. The
    // node's files in it stay: the admin token's digest and the events of a file sink that
    // writes inside it (not those of one that writes elsewhere).
    std::fs::write(store.join(ankusa::api::auth::ADMIN_TOKEN_FILE), "digest\n").unwrap();
    let (events, outside) = (
        store.join("events/lifecycle.jsonl"),
        dir.path().join("out.jsonl"),
    );
    std::fs::create_dir(store.join("events")).unwrap();
    std::fs::write(&events, "{\"id\":\"e1\"}\n").unwrap();
    std::fs::write(&outside, "{\"id\":\"e2\"}\n").unwrap();
    let config = dir.path().join("node.toml");
    std::fs::write(
        &config,
        format!(
            "[lifecycle]\nsinks = [\"inside\", \"outside\"]\n\
             [lifecycle.sink.inside]\nkind = \"file\"\npath = {:?}\n\
             [lifecycle.sink.again]\nkind = \"file\"\npath = {:?}\n\
             [lifecycle.sink.outside]\nkind = \"file\"\npath = {:?}\n",
            s(&events),
            s(&events),
            s(&outside)
        ),
    )
    .unwrap();
    changes(&store, 5, 1).await;
    let out = ok(&ankusa(&[
        "--config",
        s(&config),
        "backup",
        "restore",
        "--from",
        s(&backups),
        "--store",
        s(&store),
        "--force",
    ]));
    assert!(out.contains("restored backup 2 (m:audit_seq 5)"), "{out}");
    let aside = out
        .lines()
        .find_map(|l| l.strip_prefix("the store that was there is now at "))
        .and_then(|l| l.split(':').next())
        .expect("where the old store went");
    assert_eq!(
        all_rows(&Store::open(Path::new(aside)).unwrap()).len(),
        6,
        "kept whole"
    );
    let store_now = Store::open(&store).unwrap();
    assert_eq!(all_rows(&store_now).len(), 5);
    assert!(store_now.meta(meta::INCARNATION_PENDING).unwrap().is_some());
    let token = std::fs::read_to_string(store.join(ankusa::api::auth::ADMIN_TOKEN_FILE));
    assert_eq!(
        token.unwrap(),
        "digest\n",
        "the admin token's digest is carried over"
    );
    assert_eq!(
        std::fs::read_to_string(&events).unwrap(),
        "{\"id\":\"e1\"}\n"
    );
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "{\"id\":\"e2\"}\n"
    );
    let kept: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("kept in the restored store: "))
        .collect();
    assert_eq!(
        kept,
        ["admin-token.sha256", "events/lifecycle.jsonl"],
        "{out}"
    );
    // The events are moved (they go on in one place); the replaced store keeps its own
    // token digest, should it be put back.
    let aside = Path::new(aside);
    assert!(!aside.join("events/lifecycle.jsonl").exists());
    let kept = std::fs::read_to_string(aside.join(ankusa::api::auth::ADMIN_TOKEN_FILE));
    assert_eq!(kept.unwrap(), "digest\n");
    assert!(aside.join("CURRENT").is_file());
}

#[tokio::test]
async fn create_refuses_a_store_a_node_holds_and_a_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let (store, backups) = (dir.path().join("store"), dir.path().join("backups"));
    let trail = open_trail(&store, true);
    create_source(&trail, ctx("a"), "s1", "x").await.unwrap();
    let err = failed(&ankusa(&[
        "backup",
        "create",
        "--to",
        s(&backups),
        "--store",
        s(&store),
    ]));
    assert!(
        err.contains("in use") && err.contains("POST /admin/v1/backups"),
        "{err}"
    );
    trail.shutdown().await;
    let err = failed(&ankusa(&[
        "backup",
        "create",
        "--to",
        s(&backups),
        "--store",
        s(&dir.path().join("nothing")),
    ]));
    assert!(err.contains("no store at"), "{err}");
    let err = failed(&ankusa(&["backup", "list", s(&dir.path().join("nothing"))]));
    assert!(err.contains("no backups in"), "{err}");
}

#[tokio::test]
async fn a_corrupt_backup_is_refused_clearly_and_nothing_is_restored() {
    let dir = tempfile::tempdir().unwrap();
    let (store, backups) = (dir.path().join("store"), dir.path().join("backups"));
    changes(&store, 0, 20).await;
    ok(&ankusa(&[
        "backup",
        "create",
        "--to",
        s(&backups),
        "--store",
        s(&store),
    ]));
    let mut tables = vec![];
    collect(&backups, &mut tables);
    assert!(!tables.is_empty());
    for t in &tables {
        let mut bytes = std::fs::read(t).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x5a;
        std::fs::write(t, bytes).unwrap();
    }
    let target = dir.path().join("restored");
    let err = failed(&ankusa(&[
        "backup",
        "restore",
        "--from",
        s(&backups),
        "--store",
        s(&target),
    ]));
    assert!(
        err.contains("backup 1 is corrupt and cannot be restored"),
        "{err}"
    );
    assert!(!target.exists(), "nothing half-restored");
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.contains(".restore-")), "{names:?}");
}

fn collect(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|e| e == "sst") {
            out.push(p);
        }
    }
}

/// A node backing up into `<tempdir>/b`, with sources `ids` of tenant t1 created; the
/// tempdir must outlive the node.
pub(crate) async fn node_with_sources(
    ids: &[&str],
) -> (crate::support::node::TestNode, tempfile::TempDir, PathBuf) {
    let backups = tempfile::tempdir().unwrap();
    let backup_dir = backups.path().join("b");
    let node =
        crate::support::node::TestNode::start_with(|v| v["node"]["backup_dir"] = json!(backup_dir))
            .await;
    for id in ids {
        let body = json!({"id": id, "kind": "webhook", "secret": "sekrit", "config": {}});
        let r = node
            .call(
                Method::POST,
                "/admin/v1/tenants/t1/sources",
                crate::support::node::ADMIN,
                Some(body),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    }
    (node, backups, backup_dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_backup_is_recorded_and_its_restore_opens_a_new_incarnation() {
    let (node, _backups, backup_dir) = node_with_sources(&["s1", "s2"]).await;
    // Scopes, and a body with an unknown field: refused, and nothing written.
    for token in [crate::support::node::READER, crate::support::node::AUDITOR] {
        let r = node
            .call(Method::POST, "/admin/v1/backups", token, None)
            .await;
        crate::support::node::assert_error(&r, 403, "forbidden");
    }
    let r = node
        .call(
            Method::POST,
            "/admin/v1/backups",
            crate::support::node::WRITER,
            Some(json!({"bogus": 1})),
        )
        .await;
    crate::support::node::assert_error(&r, 422, "invalid_input");
    let huge = json!({"padding": "x".repeat(2 << 20)});
    let r = node
        .send(node.oversized(Method::POST, "/admin/v1/backups", huge.to_string()))
        .await;
    crate::support::node::assert_error(&r, 413, "too_large");
    assert!(!backup_dir.exists(), "no backup made");
    assert_eq!(node.rows().await.len(), 2);

    let r = node
        .send(node.req(
            Method::POST,
            "/admin/v1/backups",
            Some(crate::support::node::WRITER),
        ))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let made = r.json();
    assert_eq!(
        (made["id"].as_u64(), made["audit_seq"].as_u64()),
        (Some(1), Some(2))
    );
    assert!(made["size"].as_u64().unwrap() > 0 && made["created_at"].is_string());
    let row = node.row(r.seq().expect("X-Audit-Seq")).await;
    assert_eq!(row["seq"], 3, "after everything the backup holds");
    assert_eq!(row["action"], "backup.create");
    assert_eq!(row["actor"], "writer");
    assert_eq!(row["resource"], "backups/1");
    assert_eq!(row["detail"]["backup_id"], 1);
    assert_eq!(row["detail"]["audit_seq"], 2);
    assert_eq!(row["request_id"], r.request_id());
    let r = node
        .call(
            Method::POST,
            "/admin/v1/backups",
            crate::support::node::ADMIN,
            Some(json!({})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(
        (r.json()["id"].as_u64(), r.json()["audit_seq"].as_u64()),
        (Some(2), Some(3))
    );
    let lifecycle = node
        .call(
            Method::GET,
            "/admin/v1/lifecycle",
            crate::support::node::READER,
            None,
        )
        .await;
    let first = lifecycle.json()["incarnations"].clone();
    assert_eq!(first.as_array().unwrap().len(), 1);
    let dir = node.stop().await;

    assert_eq!(listed(&backup_dir), vec![(1, 2), (2, 3)]);
    let restored = dir.path().join("restored");
    ok(&ankusa(&[
        "backup",
        "restore",
        "--from",
        s(&backup_dir),
        "--id",
        "1",
        "--store",
        s(&restored),
    ]));
    let node = crate::support::node::TestNode::start_with(|v| {
        v["node"]["data_dir"] = json!(restored);
        v["node"]["backup_dir"] = json!(backup_dir);
    })
    .await;
    let lifecycle = node
        .call(
            Method::GET,
            "/admin/v1/lifecycle",
            crate::support::node::READER,
            None,
        )
        .await;
    assert_eq!(lifecycle.status, StatusCode::OK, "{}", lifecycle.text);
    let incarnations = lifecycle.json()["incarnations"].clone();
    let list = incarnations.as_array().unwrap();
    assert_eq!(list.len(), 2, "{incarnations}");
    assert_eq!(list[0], first[0]);
    assert_eq!(list[1]["from"], 3);
    assert_ne!(list[1]["id"], list[0]["id"]);
    // The restore's snapshot runs after the refresh: wait for its finished marker.
    let snapshot = crate::api::lifecycle::read_until(&node, "/admin/v1/lifecycle/snapshot", |s| {
        s["last"]["state"] == "finished"
    })
    .await;
    assert_eq!(snapshot["last"]["reason"], "restore");
    let rows = node.rows().await;
    let actions: Vec<&str> = rows.iter().map(|r| r["action"].as_str().unwrap()).collect();
    assert_eq!(
        actions,
        [
            "source.create",
            "source.create",
            "instance.restore",
            "snapshot.start",
            "source.refresh",
            "source.refresh",
            "snapshot.finish"
        ],
        "the backup's two rows, the restore's, and its snapshot's"
    );
    assert!(rows[3..].iter().all(|r| r["actor"] == "system"));
    let last = &rows[2];
    assert_eq!(
        (last["seq"].as_u64(), last["action"].as_str()),
        (Some(3), Some("instance.restore"))
    );
    assert_eq!(last["actor"], "system");
    assert_eq!(last["publish"], true);
    assert_eq!(last["detail"]["restored_seq"], 2);
    assert_eq!(last["detail"]["backup_id"], 1);
    assert_eq!(last["detail"]["incarnation"], list[1]["id"]);
    node.stop().await;
}

/// Backups asked for at once (a client retrying a slow one, say) are made one at a time: one
/// asked while another is under way is refused (409 `backup_in_progress`, no row), and those
/// made each get their own id, their own row, and all of them stay in the directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backups_asked_for_at_once_each_get_their_own_id() {
    let (node, _backups, backup_dir) = node_with_sources(&["s1"]).await;
    let ask = || {
        node.send(node.req(
            Method::POST,
            "/admin/v1/backups",
            Some(crate::support::node::WRITER),
        ))
    };
    let mut ids = Vec::new();
    for r in futures::future::join_all((0..3).map(|_| ask())).await {
        if r.status == StatusCode::CONFLICT {
            assert_eq!(r.code(), "backup_in_progress", "{}", r.text);
            continue;
        }
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        ids.push(r.json()["id"].as_u64().unwrap());
    }
    assert!(!ids.is_empty());
    assert_eq!(
        node.rows().await.len(),
        1 + ids.len(),
        "no row for a refused one"
    );
    // The rest, one after the other.
    while ids.len() < 3 {
        let r = ask().await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        ids.push(r.json()["id"].as_u64().unwrap());
    }
    ids.sort();
    assert_eq!(ids, vec![1, 2, 3]);
    let mut named: Vec<String> = node.rows().await[1..]
        .iter()
        .map(|row| row["resource"].as_str().unwrap().to_owned())
        .collect();
    named.sort();
    assert_eq!(named, vec!["backups/1", "backups/2", "backups/3"]);
    node.stop().await;
    // Each holds the source's row, and the rows of the backups committed before it began.
    let listed = listed(&backup_dir);
    let ids: Vec<u64> = listed.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, vec![1, 2, 3]);
    assert!(listed.windows(2).all(|w| w[0].1 <= w[1].1), "{listed:?}");
    assert!(
        listed.iter().all(|(_, seq)| (1..=3).contains(seq)),
        "{listed:?}"
    );
}
