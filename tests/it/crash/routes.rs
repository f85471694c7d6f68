//! Crashes at each named point of a route's dual write (`ankusa-crashtest routes`, aborted by
//! a failpoint), then a restart that settles what was left: before the pending row, no row;
//! after it and before the Redis write, `failed`; after the Redis write and before finish,
//! `ok`; after finish, `ok`. Whatever the point, no change Redis holds is missing from the
//! trail. And a route changed by someone else between the crash and the restart settles
//! `interrupted` with a state-refresh event.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ankusa::audit::{pending_rows, RowResult};
use ankusa::store::Store;

use crate::routes::{entity, redis_store, route_rows, settling, wait_settled};
use crate::support::redis::RedisServer;
use crate::support::trail::all_rows;

/// Run the crash program: `op` on route `id`, with `failpoint` (if any) armed to abort.
fn run(dir: &Path, url: &str, failpoint: Option<&str>, op: &str, id: &str, dest: &str) -> bool {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ankusa-crashtest"));
    cmd.arg("routes")
        .arg(dir)
        .arg(url)
        .arg(op)
        .arg(id)
        .arg(dest);
    match failpoint {
        Some(fp) => cmd.env("FAILPOINTS", format!("{fp}=panic")),
        None => cmd.env_remove("FAILPOINTS"),
    };
    let status = cmd.status().expect("run ankusa-crashtest routes");
    status.success()
}

/// Restart on `dir`: boot the trail, settle with Redis, and hand back the store's rows of r1.
async fn restart_and_settle(dir: &Path, url: &str) -> Vec<ankusa::audit::Row> {
    let trail = crate::support::trail::open_trail(dir, true);
    let settling = settling(
        &trail,
        redis_store(url),
        Duration::from_millis(100),
        Duration::from_secs(10),
    );
    wait_settled(trail.store(), Duration::from_secs(15)).await;
    settling.stop().await;
    let rows = route_rows(trail.store(), "r1");
    trail.shutdown().await;
    rows
}

/// The Redis revision of r1 equals the number of applied create/update rows of it.
async fn nothing_applied_is_missing(dir: &Path, url: &str) {
    let revision = redis_store(url)
        .get("t1", "r1")
        .await
        .unwrap()
        .into_subject()
        .map_or(0, |r| r.revision);
    let store = Store::open(dir).unwrap();
    let applied = all_rows(&store)
        .iter()
        .filter(|r| r.resource == "routes/r1" && r.result == RowResult::Ok)
        .count() as u64;
    assert_eq!(applied, revision, "every change Redis holds has its ok row");
    assert!(pending_rows(&store).unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_each_point_settles_as_the_spec_says() {
    let cases = [
        ("dual::before_begin", None, 1),
        ("dual::before_apply", Some(RowResult::Failed), 1),
        ("dual::before_finish", Some(RowResult::Ok), 2),
        ("dual::after_finish", Some(RowResult::Ok), 2),
    ];
    for (point, settled, revision) in cases {
        let redis = RedisServer::start();
        let dir = tempfile::tempdir().unwrap();
        let url = redis.url();
        assert!(run(
            dir.path(),
            &url,
            None,
            "create",
            "r1",
            "https://example.test/a"
        ));
        assert!(
            !run(
                dir.path(),
                &url,
                Some(point),
                "update",
                "r1",
                "https://example.test/b"
            ),
            "{point}: the program must die there"
        );
        let left = pending_rows(&Store::open(dir.path()).unwrap())
            .unwrap()
            .len();
        let expect_left = usize::from(matches!(
            point,
            "dual::before_apply" | "dual::before_finish"
        ));
        assert_eq!(left, expect_left, "{point}: pending rows left by the crash");
        let rows = restart_and_settle(dir.path(), &url).await;
        assert_eq!(rows[0].action, "route.create");
        match settled {
            None => assert_eq!(rows.len(), 1, "{point}: no row"),
            Some(result) => {
                assert_eq!(rows.len(), 2, "{point}");
                assert_eq!(rows[1].action, "route.update");
                assert_eq!(rows[1].result, result, "{point}");
                assert_eq!(rows[1].publish, result == RowResult::Ok, "{point}");
                assert_eq!(rows[1].actor, "crashtest");
                assert!(!rows[1].refresh);
                assert_eq!(rows[1].revision, Some(2));
            }
        }
        let stored = redis_store(&url)
            .get("t1", "r1")
            .await
            .unwrap()
            .into_subject()
            .unwrap();
        assert_eq!(stored.revision, revision, "{point}");
        nothing_applied_is_missing(dir.path(), &url).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_change_between_crash_and_settlement_is_interrupted_with_refresh() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let url = redis.url();
    assert!(run(
        dir.path(),
        &url,
        None,
        "create",
        "r1",
        "https://example.test/a"
    ));
    assert!(!run(
        dir.path(),
        &url,
        Some("dual::before_finish"),
        "update",
        "r1",
        "https://example.test/b"
    ));
    // Another node's change lands before this one restarts.
    let other = redis_store(&url);
    let found = other.get("t1", "r1").await.unwrap();
    let version = found.version();
    let mut theirs = found.into_subject().unwrap();
    theirs.destination = "https://example.test/c".into();
    theirs.revision = 3;
    other.put(theirs, None, version).await.unwrap();
    let rows = restart_and_settle(dir.path(), &url).await;
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].result, RowResult::Interrupted);
    assert!(rows[1].refresh && rows[1].publish);
    let store = Store::open(dir.path()).unwrap();
    let present = entity(&store, rows[1].seq).expect("state-refresh entity");
    assert_eq!(present["destination"], "https://example.test/c");
    assert_eq!(present["revision"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_updates_never_loses_an_applied_change() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let url = redis.url();
    assert!(run(
        dir.path(),
        &url,
        None,
        "create",
        "r1",
        "https://example.test/a"
    ));
    let mut acked = 0;
    for round in 0..8u64 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ankusa-crashtest"))
            .arg("routes")
            .arg(dir.path())
            .arg(&url)
            .args(["loop", "r1"])
            .env_remove("FAILPOINTS")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // Let it apply a few changes, then kill it at a moment that drifts round to round.
        for _ in 0..(3 + round * 2) {
            let line = lines.next().expect("an ack").unwrap();
            assert!(line.starts_with("ack "), "{line}");
            acked += 1;
        }
        std::thread::sleep(Duration::from_millis(round * 3));
        child.kill().expect("SIGKILL");
        child.wait().unwrap();
        let left = pending_rows(&Store::open(dir.path()).unwrap())
            .unwrap()
            .len();
        eprintln!("round {round}: {left} pending rows left by the kill");
        restart_and_settle(dir.path(), &url).await;
        nothing_applied_is_missing(dir.path(), &url).await;
    }
    let store = Store::open(dir.path()).unwrap();
    let ok = all_rows(&store)
        .iter()
        .filter(|r| r.result == RowResult::Ok)
        .count();
    assert!(
        ok > acked,
        "every acknowledged change has its row ({ok} <= {acked})"
    );
}
