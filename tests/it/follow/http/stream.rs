//! A node's events as they come: a follower running while writers change routes and sources
//! at once ends equal to the API; the real binary killed with -9 mid-stream leaves a file
//! holding exactly the events up to its position, from which a follower resumes to the
//! exact replica; `--verify` compares and exits 0; SIGTERM writes the file and exits 0.

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use ankusa::replica::file;

use super::*;
use crate::fleet::write;
use crate::support::eventually;
use crate::support::node::TestNode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_of_a_node_taking_concurrent_changes_equals_its_api() {
    let node = TestNode::start_with(watched).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("replica.json");
    let following = Following::start(options(&[&node.base], &out, false));
    let base = node.base.clone();
    let (a, b, c) = tokio::join!(
        write(base.clone(), 1, 120),
        write(base.clone(), 2, 120),
        write(base.clone(), 3, 120)
    );
    let acked = a + b + c;
    assert!(acked > 100, "the writers made changes: {acked}");
    converged(&base, &base, &out, &[]).await;
    let metrics = following.stop().await;
    // Every acknowledged change is one event of a greater version than any before it.
    assert!(
        metrics.count("applied") as usize >= acked,
        "{} applied of {acked}",
        metrics.count("applied")
    );
    assert_eq!(metrics.count("invalid"), 0);
    assert_eq!(metrics.request_failures.get(), 0);
    assert_eq!(metrics.behind_events.get(), 0);
    let at = position(&out, &base).unwrap();
    assert_eq!(at.incarnation.len(), 36, "a uuid: {at:?}");
    node.stop().await;
}

/// `ankusa follow http` on `url` into `out`, with `extra` options.
fn spawn(url: &str, out: &Path, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .args(["follow", "http", "--url", url, "--out"])
        .arg(out)
        .args(extra)
        .env("ANKUSA_FOLLOW_TOKEN", WATCHER)
        .env_remove("RUST_LOG")
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_with_9_mid_stream_then_resumed_the_replica_is_exact() {
    let node = TestNode::start_with(watched).await;
    let base = node.base.clone();
    let (a, b) = tokio::join!(write(base.clone(), 11, 250), write(base.clone(), 12, 250));
    assert!(a + b > 200, "{}", a + b);
    let latest = latest(&base).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("replica.json");

    // One event an answer, so that it is still reading when it is killed.
    let mut child = spawn(&base, &out, &["--limit", "1", "--batch-ms", "20"]);
    let first = async || position(&out, &base).filter(|p| p.position > 0);
    eventually("a first write of the file", Duration::from_secs(60), first).await;
    child.kill().unwrap(); // SIGKILL, while it reads
    child.wait().unwrap();
    let killed = file::load(&out).unwrap().unwrap();
    let at = killed.progress.http[&base].clone();
    assert!(
        at.position < latest,
        "killed mid-stream: at {} of {latest}",
        at.position
    );
    // The file holds exactly the events up to its position: nothing lost, nothing ahead.
    assert_eq!(killed.replica, replica_until(&base, at.position).await);

    // Resumed from the file, it reads on from there to the exact replica.
    let metrics = caught_up(&[&base], &out).await;
    assert!(differences(&base, &out, &[]).await.is_empty());
    let resumed = position(&out, &base).unwrap();
    // (Read again: the node may have signed a checkpoint meanwhile, an event too.)
    let latest = super::latest(&base).await;
    assert_eq!(resumed.position, latest);
    assert_eq!(resumed.incarnation, at.incarnation);
    let replica = file::load(&out).unwrap().unwrap().replica;
    assert_eq!(replica, replica_until(&base, latest).await);
    // It asked only for what came after the file's position: no event read twice.
    let read: u64 = ["applied", "stale", "marker", "ignored"]
        .iter()
        .map(|o| metrics.count(o))
        .sum();
    let after = replica_events(&base, at.position).await;
    assert_eq!(read, after, "events after the position, read once each");

    // The binary again, caught up and compared: exit 0 with the summary line.
    write(base.clone(), 13, 20).await;
    let verified = tokio::process::Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .args([
            "follow", "http", "--url", &base, "--verify", &base, "--tenant", "t1",
        ])
        .arg("--out")
        .arg(&out)
        .env("ANKUSA_FOLLOW_TOKEN", WATCHER)
        .env_remove("RUST_LOG")
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&verified.stdout);
    assert!(
        verified.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&verified.stderr)
    );
    assert!(
        said.contains(&format!("the replica equals {base}")),
        "{said}"
    );

    // The binary on the caught-up file takes the next change; SIGTERM writes and exits 0.
    let mut child = spawn(&base, &out, &["--batch-ms", "20"]);
    write(base.clone(), 14, 10).await;
    let latest = super::latest(&base).await;
    let written = async || position(&out, &base).is_some_and(|p| p.position == latest);
    eventually("the change in the file", Duration::from_secs(60), written).await;
    let pid = child.id().to_string();
    let term = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(term.success());
    assert!(child.wait().unwrap().success(), "SIGTERM: a clean exit");
    assert!(differences(&base, &out, &[]).await.is_empty());
    node.stop().await;
}

/// How many events the node at `base` serves after seq `after`.
async fn replica_events(base: &str, after: u64) -> u64 {
    let mut count = 0;
    let mut at = after;
    loop {
        let (status, answer) = watch(base, &format!("after={at}&limit=1000")).await;
        assert_eq!(status, 200, "{}", brief(&answer));
        let events = answer["events"].as_array().unwrap().len() as u64;
        if events == 0 {
            return count;
        }
        count += events;
        at = answer["position"].as_u64().unwrap();
    }
}
