//! The admin server's limits on requests held inside the node: a handler past
//! `api.request_timeout`, a backup past it (its client hears 503, the backup still gets its
//! row), and a second backup while one runs (refused, not queued).

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::restore::backup_cli::listed;
use crate::support::node::*;
use crate::support::paused::PausedAt;

const BACKUPS: &str = "/admin/v1/backups";

/// A node with one source whose backups go to `<tempdir>/b`, its config changed by `tweak`.
async fn node_with_backups(
    tweak: impl FnOnce(&mut serde_json::Value),
) -> (TestNode, tempfile::TempDir, std::path::PathBuf) {
    let backups = tempfile::tempdir().unwrap();
    let backup_dir = backups.path().join("b");
    let node = TestNode::start_with(|v| {
        v["node"]["backup_dir"] = json!(backup_dir);
        tweak(v);
    })
    .await;
    let body = json!({"id": "s1", "kind": "webhook", "secret": "sekrit", "config": {}});
    let r = node
        .call(
            Method::POST,
            "/admin/v1/tenants/t1/sources",
            ADMIN,
            Some(body),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    (node, backups, backup_dir)
}

/// A handler held past `api.request_timeout` answers 503 `request_timeout` with the API's
/// JSON error body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_held_past_the_request_timeout_answers_503() {
    let scenario = fail::FailScenario::setup();
    let node = TestNode::start_with(|c| c["api"]["request_timeout"] = json!("1s")).await;
    fail::cfg("api::handler", "return(10000)").unwrap();
    let started = Instant::now();
    let r = node
        .send(
            node.req(Method::GET, "/admin/v1/tenants/t1/sources", Some(READER))
                .header("x-request-id", "slow-1")
                .timeout(Duration::from_secs(8)),
        )
        .await;
    assert_error(&r, 503, "request_timeout");
    assert_eq!(r.request_id(), "slow-1");
    assert!(started.elapsed() < Duration::from_secs(5), "{started:?}");
    fail::remove("api::handler");
    let r = node
        .call(Method::GET, "/admin/v1/tenants/t1/sources", READER, None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    node.stop().await;
    scenario.teardown();
}

/// A backup held past `api.request_timeout`: its client hears 503 `request_timeout`, and the
/// backup is still finished and recorded (the timeout drops the wait, never the work).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_past_the_request_timeout_still_gets_its_row() {
    let scenario = fail::FailScenario::setup();
    let (node, _backups, backup_dir) =
        node_with_backups(|c| c["api"]["request_timeout"] = json!("1s")).await;
    let mut held = PausedAt::new("api::backup_taken");
    let r = node
        .send(
            node.req(Method::POST, BACKUPS, Some(WRITER))
                .timeout(Duration::from_secs(10)),
        )
        .await;
    assert_error(&r, 503, "request_timeout");
    held.reached().await;
    held.release();
    let row = async || {
        let rows = node.rows().await;
        rows.iter()
            .find(|r| r["action"] == "backup.create")
            .cloned()
    };
    let row = crate::support::eventually("a backup.create row", Duration::from_secs(30), row).await;
    assert_eq!(row["resource"], "backups/1");
    assert_eq!(listed(&backup_dir), vec![(1, 1)]);
    node.stop().await;
    scenario.teardown();
}

/// A second backup asked while one is under way is refused with 409 `backup_in_progress`,
/// at once and with no row; the first goes on and is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_backup_while_one_runs_is_refused() {
    let scenario = fail::FailScenario::setup();
    let (node, _backups, backup_dir) = node_with_backups(|_| {}).await;
    let mut held = PausedAt::new("api::backup_taken");
    let first = node.req(Method::POST, BACKUPS, Some(WRITER)).send();
    let first = tokio::spawn(first);
    held.reached().await;
    let started = Instant::now();
    let second = node
        .send(
            node.req(Method::POST, BACKUPS, Some(WRITER))
                .timeout(Duration::from_secs(10)),
        )
        .await;
    assert_error(&second, 409, "backup_in_progress");
    assert!(started.elapsed() < Duration::from_secs(2), "{started:?}");
    assert_eq!(node.rows().await.len(), 1, "no row for the refused one");
    held.release();
    let first = first.await.unwrap().expect("the first backup answers");
    assert_eq!(first.status(), StatusCode::CREATED);
    let rows = node.rows().await;
    let backups: Vec<_> = rows
        .iter()
        .filter(|r| r["action"] == "backup.create")
        .collect();
    assert_eq!(backups.len(), 1, "{rows:?}");
    assert_eq!(listed(&backup_dir), vec![(1, 1)]);
    // Once it is done, the next one is taken.
    let r = node.call(Method::POST, BACKUPS, WRITER, None).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    node.stop().await;
    scenario.teardown();
}
