//! A position the node no longer serves: the follower relists (a snapshot, then the events
//! from the oldest position) and ends on the exact replica, deletions it never saw included.
//!
//! The trail's byte ceiling deletes the rows after the follower's position while it is
//! stopped: among them the deletes of five sources and two routes, which then only the
//! snapshot's pruning can take out of the replica. A node restored from a backup behind the
//! position, which then wrote past it again (other events at the same seqs: another
//! incarnation), is relisted from too.

use reqwest::{Method, StatusCode};
use serde_json::json;

use super::*;
use crate::fleet::{new, write};
use crate::support::node::{TestNode, ADMIN};

/// The smallest byte ceiling a node takes (16 MiB).
const MAX_BYTES: u64 = 16 << 20;

/// A node whose trail holds at most [`MAX_BYTES`].
fn bounded(v: &mut Value) {
    watched(v);
    v["audit"]["max_bytes"] = json!(MAX_BYTES);
}

async fn call(node: &TestNode, method: Method, path: &str, body: Option<Value>) -> StatusCode {
    let r = node.call(method, path, ADMIN, body).await;
    assert!(r.status.is_success(), "{path}: {} {}", r.status, r.text);
    r.status
}

/// Sources whose config is `size` bytes, changed `n` times over s5..s9: rows the ceiling must
/// delete older rows for.
async fn fill(node: &TestNode, n: usize, size: usize) {
    let pad = "x".repeat(size);
    for i in 0..n {
        let path = format!("/admin/v1/tenants/t1/sources/s{}", 5 + i % 5);
        let body = json!({"config": {"i": i, "pad": pad}});
        call(node, Method::PATCH, &path, Some(body)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_position_the_ceiling_deleted_relists_with_a_snapshot_to_the_exact_replica() {
    let node = TestNode::start_with(bounded).await;
    let base = node.base.clone();
    for i in 0..10 {
        let body = new(false, &format!("s{i}"), i);
        call(
            &node,
            Method::POST,
            "/admin/v1/tenants/t1/sources",
            Some(body),
        )
        .await;
    }
    for i in 0..5 {
        let body = new(true, &format!("r{i}"), i);
        call(
            &node,
            Method::POST,
            "/admin/v1/tenants/t1/routes",
            Some(body),
        )
        .await;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("replica.json");
    caught_up(&[&base], &out).await;
    let seen = position(&out, &base).unwrap();

    // While the follower is stopped: deletes it will never read, then enough bytes for the
    // ceiling to delete them, and for the node's tail of recent events (32 MiB) to have
    // dropped them too.
    for id in ["s0", "s1", "s2", "s3", "s4"] {
        let path = format!("/admin/v1/tenants/t1/sources/{id}");
        call(&node, Method::DELETE, &path, None).await;
    }
    for id in ["r0", "r1"] {
        let path = format!("/admin/v1/tenants/t1/routes/{id}");
        call(&node, Method::DELETE, &path, None).await;
    }
    fill(&node, 200, 200_000).await;
    let resume = format!("after={}&incarnation={}", seen.position, seen.incarnation);
    let (status, gone) = watch(&base, &resume).await;
    assert_eq!(
        status, 410,
        "the ceiling deleted what follows: {}",
        gone["error"]
    );
    assert_eq!(gone["error"], "position_gone", "{}", brief(&gone));
    let oldest = gone["oldest"].as_u64().unwrap();
    assert!(
        oldest > seen.position + 7,
        "the deletes are gone: {}",
        brief(&gone)
    );

    let metrics = caught_up(&[&base], &out).await;
    assert_eq!(metrics.relists.get(), 1);
    assert_eq!(
        metrics.snapshots.get(),
        1,
        "the relist's snapshot completed"
    );
    let differences = differences(&base, &out, &[]).await;
    assert!(differences.is_empty(), "{}", verify::report(&differences));
    let kept = file::load(&out).unwrap().unwrap();
    let deleted = kept
        .replica
        .subjects
        .values()
        .flatten()
        .filter(|(_, e)| e.entity.is_none());
    assert_eq!(
        deleted.count(),
        7,
        "the five sources and two routes, pruned"
    );
    assert_eq!(position(&out, &base).unwrap().position, latest(&base).await);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restored_behind_the_position_is_relisted_from_in_its_new_incarnation() {
    let backups = tempfile::tempdir().unwrap();
    let backup_dir = backups.path().to_owned();
    let tweak = move |v: &mut Value| {
        watched(v);
        v["node"]["backup_dir"] = json!(backup_dir);
    };
    let node = TestNode::start_with(tweak.clone()).await;
    let base = node.base.clone();
    write(base.clone(), 41, 60).await;
    let backup = node
        .call(Method::POST, "/admin/v1/backups", ADMIN, None)
        .await
        .json();
    let backed_up = backup["audit_seq"].as_u64().unwrap();
    // Changes the restore will roll back, read by the follower.
    write(base.clone(), 42, 60).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("replica.json");
    caught_up(&[&base], &out).await;
    let seen = position(&out, &base).unwrap();

    let data = node.data_dir();
    let home = node.stop().await;
    let restored = tokio::process::Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .args(["backup", "restore", "--force", "--from"])
        .arg(backups.path())
        .arg("--store")
        .arg(&data)
        .env_remove("ANKUSA_CONFIG")
        .output()
        .await
        .unwrap();
    assert!(restored.status.success(), "{restored:?}");
    let node = TestNode::start_on(home, tweak).await;
    let base_now = node.base.clone();
    // The restored node writes past the position again, with other events at its seqs: only
    // the incarnation tells them apart.
    while latest(&base_now).await <= seen.position {
        write(base_now.clone(), 43, 40).await;
    }
    let resume = format!("after={}&incarnation={}", seen.position, seen.incarnation);
    let (status, gone) = watch(&base_now, &resume).await;
    assert_eq!(status, 410, "{}", brief(&gone));
    // It resumes where the restored timeline left its own: the backup's last seq, which
    // both hold, in the incarnation it knew; then it reads all the restored node wrote since.
    assert_eq!(gone["oldest"], json!(backed_up), "{}", brief(&gone));
    assert_eq!(
        gone["incarnation"],
        json!(seen.incarnation),
        "{}",
        brief(&gone)
    );

    // The node listens on another port now: the file's position moves over to its URL.
    let mut kept = file::load(&out).unwrap().unwrap();
    let at = kept.progress.http.remove(&base).unwrap();
    kept.progress.http.insert(base_now.clone(), at);
    file::save(&out, &kept).unwrap();
    let metrics = caught_up(&[&base_now], &out).await;
    assert_eq!(metrics.relists.get(), 1);
    let differences = differences(&base_now, &out, &[]).await;
    assert!(differences.is_empty(), "{}", verify::report(&differences));
    let now = position(&out, &base_now).unwrap();
    let status = node
        .call(Method::GET, "/admin/v1/lifecycle", ADMIN, None)
        .await
        .json();
    assert_eq!(json!(now.incarnation), status["incarnations"][1]["id"]);
    // Past its old position, in the new incarnation (the node may write on: its snapshot).
    assert!(now.position > seen.position, "{now:?}");
    node.stop().await;
}
