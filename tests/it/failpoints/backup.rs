//! Backups cut short: a backup whose row cannot be written, one whose client went away, and
//! a stop while one is under way.

use ankusa::store::Store;
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::restore::backup_cli::{ankusa, listed, node_with_sources, ok, s};
use crate::support::trail::all_rows;

/// A backup whose row cannot be written is not made, like any change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_whose_row_cannot_be_written_is_discarded() {
    let scenario = fail::FailScenario::setup();
    let (node, _backups, backup_dir) = node_with_sources(&["s1"]).await;
    fail::cfg("audit::write", "return").unwrap();
    let r = node
        .send(node.req(
            Method::POST,
            "/admin/v1/backups",
            Some(crate::support::node::WRITER),
        ))
        .await;
    crate::support::node::assert_error(&r, 503, "store_unavailable");
    fail::remove("audit::write");
    assert_eq!(
        ok(&ankusa(&["backup", "list", s(&backup_dir)]))
            .lines()
            .count(),
        1,
        "only the header: the backup was discarded"
    );
    assert_eq!(node.rows().await.len(), 1, "and no row");
    // The next one works, and takes the next id RocksDB hands out.
    let r = node
        .send(node.req(
            Method::POST,
            "/admin/v1/backups",
            Some(crate::support::node::WRITER),
        ))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(listed(&backup_dir).len(), 1);
    node.stop().await;
    scenario.teardown();
}

/// A client that gives up on a backup under way does not leave it without its row: the
/// backup is finished and recorded all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_whose_client_went_away_still_gets_its_row() {
    let scenario = fail::FailScenario::setup();
    let (node, _backups, backup_dir) = node_with_sources(&["s1"]).await;
    let held = backup_left_by_its_client(&node).await;
    held.release();
    let row = async || {
        let rows = node.rows().await;
        rows.iter()
            .find(|r| r["action"] == "backup.create")
            .cloned()
    };
    let bound = std::time::Duration::from_secs(30);
    let row = crate::support::eventually("a backup.create row", bound, row).await;
    assert_eq!(
        (&row["resource"], &row["actor"]),
        (&json!("backups/1"), &json!("writer"))
    );
    assert_eq!(listed(&backup_dir), vec![(1, 1)]);
    node.stop().await;
    scenario.teardown();
}

/// A node told to stop while a backup its client left is under way waits for it: the backup
/// is finished and recorded before the writer stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_waits_for_a_backup_under_way() {
    let scenario = fail::FailScenario::setup();
    let (node, _backups, backup_dir) = node_with_sources(&["s1"]).await;
    let held = backup_left_by_its_client(&node).await;
    // Released once the node has stopped accepting (its stop under way).
    let url = node.url("/readyz");
    let stopping = tokio::spawn(node.stop());
    // Unbounded before; the bound is nextest's own limit for a test.
    let refused = async || reqwest::get(&url).await.is_err();
    let bound = std::time::Duration::from_secs(300);
    crate::support::eventually("the node to stop accepting", bound, refused).await;
    held.release();
    let dir = stopping.await.unwrap();
    let store = Store::open(&dir.path().join("data")).unwrap();
    let rows = all_rows(&store);
    let row = rows.iter().find(|r| r.action == "backup.create");
    assert_eq!(row.map(|r| r.resource.as_str()), Some("backups/1"));
    assert_eq!(listed(&backup_dir), vec![(1, 1)]);
    scenario.teardown();
}

/// A backup asked of `node` whose client gave up while it was under way, held just after the
/// backup was taken (before its row) until the hold is released.
async fn backup_left_by_its_client(
    node: &crate::support::node::TestNode,
) -> crate::support::paused::PausedAt {
    let mut held = crate::support::paused::PausedAt::new("api::backup_taken");
    let gone = node
        .req(
            Method::POST,
            "/admin/v1/backups",
            Some(crate::support::node::WRITER),
        )
        .timeout(std::time::Duration::from_millis(300))
        .send()
        .await;
    assert!(gone.unwrap_err().is_timeout());
    held.reached().await;
    held
}
