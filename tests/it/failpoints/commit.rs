//! The commit path under failures injected at named points: a store that cannot be
//! written, a group held in the syncer, batches that fail under load and at a ceiling, a
//! writer that died.

use std::future::Future;

use crate::support::paused::PausedAt;
use crate::support::trail::*;
use ankusa::audit::{CommitError, Trail};
use ankusa::store::{keys::meta, Cf};
use serde_json::json;
use tokio::task::JoinHandle;

#[tokio::test]
async fn a_store_that_cannot_be_written_refuses_the_change_and_applies_nothing() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail(dir.path(), true);
    fail::cfg("audit::write", "return").unwrap();
    let tasks = spawn_each(&trail, 10, |trail, i| async move {
        create_source(&trail, ctx("f"), &format!("s{i}"), "x").await
    });
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap_err(), CommitError::StoreUnavailable);
    }
    assert!(all_rows(trail.store()).is_empty());
    assert!(all_keys(trail.store(), Cf::Sources).is_empty());
    assert_eq!(trail.store().meta_u64(meta::AUDIT_SEQ).unwrap(), 0);
    fail::remove("audit::write");
    // The unwritten group consumed no seq.
    assert_eq!(
        create_source(&trail, ctx("f"), "s0", "x")
            .await
            .unwrap()
            .seq,
        1
    );
    trail.shutdown().await;
    scenario.teardown();
}

/// Runs `change` on a clone of `trail`, in a task of its own.
fn spawn_change<T, F>(trail: &Trail, change: impl FnOnce(Trail) -> F) -> JoinHandle<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    tokio::spawn(change(trail.clone()))
}

/// `n` changes, each in its own task, given its index.
fn spawn_each<T, F>(trail: &Trail, n: u64, change: impl Fn(Trail, u64) -> F) -> Vec<JoinHandle<T>>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    (0..n)
        .map(|i| spawn_change(trail, |trail| change(trail, i)))
        .collect()
}

/// The syncer, held on the next group handed to it until released; every group is handed
/// over (none written on the writer thread), so the test can have the next group prepared
/// while the first waits.
fn hold_the_syncer() -> PausedAt {
    fail::cfg("audit::inline", "return").unwrap();
    PausedAt::new("audit::sync_delay")
}

/// Update `id`'s secret to `secret` in a task; resolves (with the task) once the change is
/// prepared on the writer thread.
async fn spawn_prepared_update(
    trail: &Trail,
    actor: &str,
    id: &str,
    secret: &str,
) -> JoinHandle<Result<ankusa::audit::Committed<serde_json::Value>, CommitError<TestRefusal>>> {
    let (prepared, heard) = tokio::sync::oneshot::channel();
    let (ctx, id, secret) = (ctx(actor), id.to_owned(), secret.to_owned());
    let task = spawn_change(trail, |trail| async move {
        update_secret_then(&trail, ctx, &id, &secret, move || {
            let _ = prepared.send(());
        })
        .await
    });
    tokio::time::timeout(std::time::Duration::from_secs(30), heard)
        .await
        .expect("the update was prepared")
        .unwrap();
    task
}

#[tokio::test]
async fn a_change_prepared_while_the_group_before_it_is_written_sees_that_group() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail(dir.path(), true);
    let mut held = hold_the_syncer();
    let first = spawn_change(&trail, |trail| async move {
        create_source(&trail, ctx("a"), "s1", "x").await
    });
    held.reached().await;
    // s1 is in no store yet: only the group being written has it.
    let update = spawn_prepared_update(&trail, "b", "s1", "y").await;
    let again = spawn_change(&trail, |trail| async move {
        create_source(&trail, ctx("c"), "s1", "z").await
    });
    held.release();
    assert_eq!(first.await.unwrap().unwrap().seq, 1);
    let update = update.await.unwrap().unwrap();
    assert_eq!((update.seq, &update.value["revision"]), (2, &json!(2)));
    assert_eq!(
        again.await.unwrap().unwrap_err(),
        CommitError::Refused(TestRefusal::Exists)
    );
    let rows = all_rows(trail.store());
    let actions: Vec<_> = rows.iter().map(|r| (r.seq, r.action.as_str())).collect();
    assert_eq!(actions, [(1, "source.create"), (2, "source.update")]);
    let stored = stored_source(trail.store(), "s1");
    assert_eq!(
        (&stored["secret"], &stored["revision"]),
        (&json!("y"), &json!(2))
    );
    trail.shutdown().await;
    scenario.teardown();
}

#[tokio::test]
async fn a_batch_that_fails_takes_down_the_group_prepared_on_it_and_nothing_else() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail(dir.path(), true);
    assert_eq!(
        create_source(&trail, ctx("a"), "s0", "x")
            .await
            .unwrap()
            .seq,
        1
    );
    let mut held = hold_the_syncer();
    fail::cfg("audit::write", "1*return").unwrap();
    let first = spawn_change(&trail, |trail| async move {
        create_source(&trail, ctx("a"), "s1", "x").await
    });
    held.reached().await;
    // Valid only on top of the first, whose batch will fail: it must not stand either (and
    // must not be told "missing": it was validated against the failed batch).
    let update = spawn_prepared_update(&trail, "b", "s1", "y").await;
    held.release();
    assert_eq!(
        first.await.unwrap().unwrap_err(),
        CommitError::StoreUnavailable
    );
    assert_eq!(
        update.await.unwrap().unwrap_err(),
        CommitError::StoreUnavailable
    );
    let rows: Vec<_> = all_rows(trail.store()).iter().map(|r| r.seq).collect();
    assert_eq!(rows, [1]);
    assert_eq!(all_keys(trail.store(), Cf::Sources), [b"t1/s0".to_vec()]);
    assert_eq!(trail.store().meta_u64(meta::AUDIT_SEQ).unwrap(), 1);
    assert_eq!(trail.usage().rows, 1);
    // The writer rolled its counters back: the next changes take the next seqs.
    assert_eq!(
        create_source(&trail, ctx("a"), "s1", "x")
            .await
            .unwrap()
            .seq,
        2
    );
    let update = update_secret(&trail, ctx("b"), "s1", "y").await.unwrap();
    assert_eq!((update.seq, &update.value["revision"]), (3, &json!(2)));
    trail.shutdown().await;
    scenario.teardown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_failing_batches_every_answer_matches_the_store_and_seqs_stay_dense() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail(dir.path(), true);
    // One batch in five fails: groups prepared on top of a failed one are abandoned too.
    fail::cfg("audit::write", "20%return").unwrap();
    let tasks = spawn_each(&trail, 16, |trail, t| async move {
        // (seq of every change that was answered "committed", revisions it made)
        let mut committed = vec![];
        let mut created = vec![];
        for i in 0..40 {
            let id = format!("c{t}-{i}");
            match create_source(&trail, ctx("a"), &id, "x").await {
                Ok(c) => {
                    committed.push(c.seq);
                    created.push((id.clone(), 1u64));
                }
                Err(e) => assert_eq!(e, CommitError::StoreUnavailable),
            }
            if let Some((id, revision)) = created.last_mut() {
                match update_secret(&trail, ctx("b"), id, "y").await {
                    Ok(c) => {
                        committed.push(c.seq);
                        *revision += 1;
                        assert_eq!(c.value["revision"], json!(*revision));
                    }
                    Err(e) => assert_eq!(e, CommitError::StoreUnavailable),
                }
            }
        }
        (committed, created)
    });
    let mut committed = vec![];
    let mut created = vec![];
    for t in tasks {
        let (c, s) = t.await.unwrap();
        committed.extend(c);
        created.extend(s);
    }
    fail::remove("audit::write");
    committed.sort_unstable();
    let n = committed.len() as u64;
    assert!(n > 0 && n < 16 * 80, "{n} committed");
    // Every answered change is a row, and nothing else is: seqs 1..=n, no gap, no repeat.
    assert_eq!(committed, (1..=n).collect::<Vec<_>>());
    let rows: Vec<u64> = all_rows(trail.store()).iter().map(|r| r.seq).collect();
    assert_eq!(rows, committed);
    // A failed batch wrote no index entry either.
    assert_index_exact(trail.store());
    assert_eq!(trail.store().meta_u64(meta::AUDIT_SEQ).unwrap(), n);
    assert_eq!(trail.usage().rows, n);
    // Every created source is stored at the revision its answers said; no other is.
    let mut stored = all_keys(trail.store(), Cf::Sources);
    stored.sort();
    let mut expected: Vec<Vec<u8>> = created
        .iter()
        .map(|(id, _)| format!("t1/{id}").into_bytes())
        .collect();
    expected.sort();
    assert_eq!(stored, expected);
    for (id, revision) in &created {
        let value = stored_source(trail.store(), id);
        assert_eq!(value["revision"], json!(revision), "{id}");
    }
    assert_eq!(
        create_source(&trail, ctx("a"), "after", "x")
            .await
            .unwrap()
            .seq,
        n + 1
    );
    trail.shutdown().await;
    scenario.teardown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_a_ceiling_under_failing_batches_the_counters_stay_true() {
    use ankusa::audit::{Limits, TrailOptions, Usage};
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let options = TrailOptions {
        limits: Limits {
            max_rows: 50,
            ..Limits::default()
        },
        ..TrailOptions::default()
    };
    let trail = open_trail_with(dir.path(), options);
    // Every change prunes the oldest row; a failed batch must leave its deletions undone
    // and the head of the trail where the last written batch left it.
    fail::cfg("audit::write", "20%return").unwrap();
    let tasks = spawn_each(&trail, 16, |trail, t| async move {
        let mut committed = 0u64;
        for i in 0..30 {
            match create_source(&trail, ctx("a"), &format!("c{t}-{i}"), "x").await {
                Ok(_) => committed += 1,
                Err(e) => assert_eq!(e, CommitError::StoreUnavailable),
            }
        }
        committed
    });
    let mut n = 0;
    for t in tasks {
        n += t.await.unwrap();
    }
    fail::remove("audit::write");
    assert!(n > 50, "{n} committed");
    let store = trail.store();
    let rows: Vec<u64> = all_rows(store).iter().map(|r| r.seq).collect();
    assert_eq!(rows, (n - 49..=n).collect::<Vec<_>>());
    let truth = Usage::recount(store, n).unwrap();
    let stored = Usage::decode(&store.meta(meta::AUDIT_USAGE).unwrap().unwrap()).unwrap();
    assert_eq!((stored, trail.usage()), (truth, truth));
    assert_index_exact(store);
    // The head goes on from there: the next change prunes exactly the oldest row.
    assert_eq!(
        create_source(&trail, ctx("a"), "after", "x")
            .await
            .unwrap()
            .seq,
        n + 1
    );
    let rows: Vec<u64> = all_rows(store).iter().map(|r| r.seq).collect();
    assert_eq!(rows, (n - 48..=n + 1).collect::<Vec<_>>());
    trail.shutdown().await;
    scenario.teardown();
}

/// A writer that dies (a panic outside a change's own code) is not hidden: every change is
/// refused as store_unavailable with no row, readiness says so, and the node's run ends in an
/// error instead of a clean stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_died_is_not_ready_and_the_node_does_not_stop_cleanly() {
    let scenario = fail::FailScenario::setup();
    let node = crate::support::node::TestNode::start().await;
    let ready = reqwest::get(node.url("/readyz")).await.unwrap();
    assert_eq!(ready.status(), 200);

    fail::cfg("audit::submit", "panic").unwrap();
    let source = json!({"id": "s1", "kind": "webhook", "config": {}});
    let sources = "/admin/v1/tenants/t1/sources";
    let r = node
        .call(
            reqwest::Method::POST,
            sources,
            crate::support::node::ADMIN,
            Some(source.clone()),
        )
        .await;
    crate::support::node::assert_error(&r, 503, "store_unavailable");
    fail::remove("audit::submit");
    let r = node
        .call(
            reqwest::Method::POST,
            sources,
            crate::support::node::ADMIN,
            Some(source),
        )
        .await;
    crate::support::node::assert_error(&r, 503, "store_unavailable");
    let ready = reqwest::get(node.url("/readyz")).await.unwrap();
    assert_eq!(ready.status(), 503);
    let body: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(body, json!({"status": "writer_stopped"}));

    let (dir, ran) = node.stop_as_it_ran().await;
    let err = ran.unwrap_err().to_string();
    assert!(err.contains("the audit writer stopped"), "{err}");
    let store = ankusa::store::Store::open(&dir.path().join("data")).unwrap();
    assert!(all_rows(&store).is_empty());
    scenario.teardown();
}
