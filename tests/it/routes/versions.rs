//! Subject versions: every change of a route or source takes the next version of its store's
//! one counter, in the step that applies it, and a change applies only at the version it
//! read. So a change read before a delete and a create again is refused (the revision
//! restarts at 1, the version never does), and versions increase across nodes sharing a
//! store, across restarts of the memory store and across restores of a node's own store.

use std::sync::Arc;
use std::time::Duration;

use ankusa::audit::{CommitError, Row, RowResult};
use ankusa::store::backup::BackupDir;
use ankusa::subjects::remote::memory::MemoryStore;
use ankusa::subjects::remote::{Cas, RemoteStore};
use ankusa::subjects::routes::{Route, RoutePatch, Routes};
use ankusa::subjects::sources::{self, NewSource, SourcePatch};
use ankusa::subjects::SubjectError;
use serde_json::json;

use crate::restore::store::{now, restore_into};
use crate::routes::{new_route, redis_store, route_rows, PausedStore};
use crate::support::redis::RedisServer;
use crate::support::trail::{all_rows, ctx, open_trail, open_trail_with_sinks};

fn destination(patch: &str) -> RoutePatch {
    RoutePatch {
        destination: Some(patch.into()),
        ..RoutePatch::default()
    }
}

/// Node A reads r1 at revision 1; node B deletes r1 and creates it again (revision 1, another
/// destination); A's update must not overwrite B's route, and no row may say it applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_read_before_a_delete_and_a_create_again_is_refused() {
    let redis = RedisServer::start();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (trail_a, trail_b) = (
        open_trail(dir_a.path(), true),
        open_trail(dir_b.path(), true),
    );
    let held = Arc::new(PausedStore::new(redis_store(&redis.url())));
    let a = Routes::new(held.clone(), trail_a.clone());
    let b = Routes::new(redis_store(&redis.url()), trail_b.clone());
    b.create(
        ctx("bob"),
        "t1".into(),
        new_route("r1", "https://example.test/old"),
    )
    .await
    .unwrap();

    held.arm();
    let update = tokio::spawn({
        let a = a.clone();
        async move {
            let patch = destination("https://example.test/from-a");
            a.update(ctx("alice"), "t1".into(), "r1".into(), patch, None)
                .await
        }
    });
    held.reached().await;
    b.delete(ctx("bob"), "t1".into(), "r1".into(), None)
        .await
        .unwrap();
    let again = b
        .create(
            ctx("bob"),
            "t1".into(),
            new_route("r1", "https://example.test/b"),
        )
        .await
        .unwrap();
    assert_eq!(again.revision, 1, "the revision restarts");
    held.release();

    let refused = update.await.unwrap();
    assert!(
        matches!(
            refused,
            Err(CommitError::Refused(SubjectError::RevisionMismatch { .. }))
        ),
        "{refused:?}"
    );
    let stored = b.store().get("t1", "r1").await.unwrap().into_subject();
    assert_eq!(stored.unwrap().destination, "https://example.test/b");
    // No row of A's says anything of r1, and nothing is pending.
    assert_eq!(route_rows(trail_a.store(), "r1"), Vec::<Row>::new());
    assert!(ankusa::audit::pending_rows(trail_a.store())
        .unwrap()
        .is_empty());
    trail_a.shutdown().await;
    trail_b.shutdown().await;
}

/// The versions a route's rows carry, across two nodes on one Redis: strictly increasing in
/// the order the store applied the changes, each node naming the store alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_increase_over_a_delete_a_create_again_and_two_nodes() {
    let redis = RedisServer::start();
    let started = ankusa::audit::now_micros();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (trail_a, trail_b) = (
        open_trail(dir_a.path(), true),
        open_trail(dir_b.path(), true),
    );
    let a = Routes::new(redis_store(&redis.url()), trail_a.clone());
    let b = Routes::new(redis_store(&redis.url()), trail_b.clone());
    let r = |dest: &str| new_route("r1", dest);
    a.create(ctx("a"), "t1".into(), r("https://example.test/1"))
        .await
        .unwrap();
    let patch = destination("https://example.test/2");
    b.update(ctx("b"), "t1".into(), "r1".into(), patch, None)
        .await
        .unwrap();
    a.delete(ctx("a"), "t1".into(), "r1".into(), None)
        .await
        .unwrap();
    b.create(ctx("b"), "t1".into(), r("https://example.test/3"))
        .await
        .unwrap();

    let mut rows: Vec<Row> = route_rows(trail_a.store(), "r1");
    rows.extend(route_rows(trail_b.store(), "r1"));
    rows.sort_by_key(|r| r.version);
    let actions: Vec<&str> = rows.iter().map(|r| r.action.as_str()).collect();
    assert_eq!(
        actions,
        [
            "route.create",
            "route.update",
            "route.delete",
            "route.create"
        ]
    );
    let versions: Vec<u64> = rows.iter().map(|r| r.version.unwrap()).collect();
    assert!(
        versions.windows(2).all(|w| w[0] < w[1]),
        "one counter, increasing over every change: {versions:?}"
    );
    assert!(versions[0] >= started, "at least the clock in microseconds");
    let store = rows[0].store.clone().expect("a shared store is named");
    assert!(store.starts_with("redis:"), "{store}");
    assert!(rows
        .iter()
        .all(|r| r.store.as_deref() == Some(store.as_str())));
    assert!(rows.iter().all(|r| r.result == RowResult::Ok));
    // The store's version is the last change's; a read of a gone route says it too.
    let now = b.store().version().await.unwrap();
    assert!(now.version >= versions[3], "{now:?}");
    assert_eq!(now.store.as_deref(), Some(store.as_str()));
    trail_a.shutdown().await;
    trail_b.shutdown().await;
}

/// The Redis store on a hash written before versions existed (no `ver`): it reads at version
/// 0 with its stored revision, a create over it is refused, and a change at version 0 takes
/// a version past the counter and the clock. A gone subject reads at the store's version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_route_from_before_versions_reads_at_version_0_and_takes_the_next() {
    let started = ankusa::audit::now_micros();
    let redis = RedisServer::start();
    let store = redis_store(&redis.url());
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let old = json!({"id": "r1", "tenant": "t1", "source": "s1",
        "destination": "https://example.test/old", "filter": {}, "enabled": true, "revision": 1});
    let () = redis::pipe()
        .cmd("HSET")
        .arg("ankusa:route:{t1}:r1")
        .arg("rev")
        .arg(3)
        .arg("json")
        .arg(old.to_string())
        .ignore()
        .cmd("ZADD")
        .arg("ankusa:routes:{t1}")
        .arg(0)
        .arg("r1")
        .ignore()
        .cmd("SET")
        .arg("ankusa:route:version")
        .arg(7)
        .ignore()
        .query_async(&mut conn)
        .await
        .unwrap();

    assert!(store.exists("t1", "r1").await.unwrap());
    assert!(!store.exists("t1", "r2").await.unwrap());
    let found = store.get("t1", "r1").await.unwrap();
    let held = found.subject.expect("the old hash is a route");
    assert_eq!((held.version, held.subject.revision), (0, 3));
    assert_eq!(found.stamp.version, 0);
    let mut next = held.subject.clone();
    next.revision = 1;
    assert_eq!(
        store.put(next.clone(), None, None).await.unwrap(),
        Cas::Conflict { actual: 3 },
        "a create over it is refused with its revision"
    );
    next.destination = "https://example.test/new".into();
    next.revision = 4;
    let Cas::Written(stamp) = store.put(next.clone(), None, Some(0)).await.unwrap() else {
        panic!("a change at the version read is written");
    };
    assert!(stamp.version > 7, "past the counter");
    assert!(stamp.version >= started, "and the clock in microseconds");
    let put = stamp.version;
    let found = store.get("t1", "r1").await.unwrap();
    let now = found.subject.expect("written");
    assert_eq!((now.version, now.subject.revision), (put, 4));
    assert_eq!(now.subject.destination, "https://example.test/new");
    assert_eq!(
        store.delete("t1", "r1", 0).await.unwrap(),
        Cas::Conflict { actual: 4 },
        "a delete at a stale version is refused"
    );
    let Cas::Written(stamp) = store.delete("t1", "r1", put).await.unwrap() else {
        panic!("a delete at the version read is written");
    };
    assert!(stamp.version > put);
    let deleted = stamp.version;
    let gone = store.get("t1", "r1").await.unwrap();
    assert_eq!(gone.subject, None);
    assert!(!store.exists("t1", "r1").await.unwrap());
    assert!(
        gone.stamp.version >= deleted,
        "a gone route reads at the store's version"
    );
    assert_eq!(
        store.delete("t1", "r1", deleted).await.unwrap(),
        Cas::Conflict { actual: 0 }
    );
}

/// The memory store's versions continue above the last run's after a restart, though it
/// keeps nothing: they are at least the clock in microseconds.
#[tokio::test]
async fn a_memory_store_started_again_issues_greater_versions() {
    let first: MemoryStore<Route> = MemoryStore::default();
    let route = |revision| crate::routes::r1("https://example.test/a", revision);
    let mut last = 0;
    for _ in 0..100 {
        let Cas::Written(stamp) = first.put(route(1), None, None).await.unwrap() else {
            panic!("a create of an absent route is written");
        };
        assert!(stamp.version > last);
        assert_eq!(stamp.store, None, "this node's own store");
        last = stamp.version;
        let Cas::Written(stamp) = first.delete("t1", "r1", last).await.unwrap() else {
            panic!("a delete at the version read is written");
        };
        assert!(stamp.version > last);
        last = stamp.version;
    }
    let floor = first.version().await.unwrap().version;
    assert!(floor >= last);
    drop(first);
    // A burst of changes can run the counter a little ahead of the clock (by at most a
    // microsecond per change); a restart takes longer than that lead.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let again: MemoryStore<Route> = MemoryStore::default();
    assert!(again.version().await.unwrap().version > floor);
    let Cas::Written(stamp) = again.put(route(1), None, None).await.unwrap() else {
        panic!("written");
    };
    assert!(stamp.version > floor);
}

fn new_source(id: &str) -> NewSource {
    serde_json::from_value(json!({"id": id, "kind": "webhook", "secret": "hunter2-sekrit"}))
        .unwrap()
}

/// A node's own sources: the version of a row is its incarnation's base + its seq, and a
/// store restored from a backup issues versions above every one the lost store published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_source_versions_come_from_the_trail_and_a_restore_never_reissues_one() {
    let dir = tempfile::tempdir().unwrap();
    let (path, backups) = (dir.path().join("store"), dir.path().join("backups"));
    let trail = open_trail_with_sinks(&path, &["file"]);
    for id in ["s1", "s2"] {
        sources::create(&trail, ctx("a"), "t1".into(), new_source(id))
            .await
            .unwrap();
    }
    let base = trail.history().current().base;
    assert!(base > 0, "a new store's base is the clock");
    BackupDir::create(&backups)
        .unwrap()
        .back_up(trail.store(), now())
        .unwrap();
    // The lost life: published, then lost by the restore.
    for n in 0..6 {
        let patch: SourcePatch = serde_json::from_value(json!({"config": {"n": n}})).unwrap();
        sources::update(&trail, ctx("a"), "t1".into(), "s1".into(), patch, None)
            .await
            .unwrap();
    }
    let lost = all_rows(trail.store());
    for row in &lost {
        if row.action.starts_with("source.") {
            assert_eq!(row.version, Some(base + row.seq), "{row:?}");
            assert_eq!(row.store, None);
        }
    }
    let lost_max = lost.iter().filter_map(|r| r.version).max().unwrap();
    trail.shutdown().await;
    drop(trail);
    tokio::time::sleep(Duration::from_millis(5)).await;

    restore_into(&backups, None, &path, true);
    let trail = open_trail_with_sinks(&path, &["file"]);
    let restored = trail.history().current();
    assert!(restored.base > base);
    sources::delete(&trail, ctx("a"), "t1".into(), "s1".into(), None)
        .await
        .unwrap();
    let rows = all_rows(trail.store());
    let delete = rows.iter().find(|r| r.action == "source.delete").unwrap();
    assert_eq!(delete.version, Some(restored.base + delete.seq));
    assert!(
        delete.version.unwrap() > lost_max,
        "the seq is re-issued, the version is not"
    );
    trail.shutdown().await;
}

/// A Redis that lost everything (restarted empty, an old backup, a failover that lost writes)
/// issues no version at or below one it issued before: a version is at least Redis's clock in
/// microseconds and above every version this process issued or read. Before, its counter
/// started again at 1 and a consumer holding a subject at version 5 dropped every change of
/// it until the counter passed 5 again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_lost_its_data_issues_no_version_again() {
    let redis = RedisServer::start();
    let store = redis_store(&redis.url());
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let route = crate::routes::r1;
    let mut issued = Vec::new();
    for round in 0..3 {
        let Cas::Written(created) = store
            .put(route("https://a.test/", 1), None, None)
            .await
            .unwrap()
        else {
            panic!("round {round}: a create of an absent route is written");
        };
        let Cas::Written(updated) = store
            .put(route("https://b.test/", 2), None, Some(created.version))
            .await
            .unwrap()
        else {
            panic!("round {round}: an update at the version read is written");
        };
        issued.extend([created.version, updated.version]);
        let now = store.version().await.unwrap().version;
        assert!(now >= updated.version);
        // Everything is lost, the counter with it.
        let () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
        let gone = store.get("t1", "r1").await.unwrap();
        assert_eq!(gone.subject, None);
        assert!(gone.stamp.version >= updated.version, "{gone:?}");
        assert!(store.version().await.unwrap().version >= updated.version);
    }
    assert!(
        issued.windows(2).all(|w| w[0] < w[1]),
        "never again at or below: {issued:?}"
    );
    // A counter set back by hand (a restored backup) below what this process saw: the next
    // version is still above.
    let () = redis::cmd("SET")
        .arg("ankusa:route:version")
        .arg(3)
        .query_async(&mut conn)
        .await
        .unwrap();
    let Cas::Written(after) = store
        .put(route("https://c.test/", 1), None, None)
        .await
        .unwrap()
    else {
        panic!("written");
    };
    assert!(after.version > *issued.last().unwrap());
}
