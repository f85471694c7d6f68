//! The Redis store behind Sentinel: real processes (a primary, its replica, a sentinel), the
//! primary killed with -9, and the store following the primary the sentinel promotes.

use std::time::{Duration, Instant};

use ankusa::config::RedisSettings;
use ankusa::subjects::remote::redis::RedisStore;
use ankusa::subjects::remote::{Cas, RemoteStore};
use ankusa::subjects::routes::Route;

use crate::routes::r1;
use crate::support::eventually;
use crate::support::redis::{RedisServer, SentinelServer};

/// A command's reply from the server on `port` (a fresh connection).
pub(crate) async fn ask<T: redis::FromRedisValue>(
    port: u16,
    cmd: &redis::Cmd,
) -> redis::RedisResult<T> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    cmd.query_async(&mut conn).await
}

/// Wait until `replica` follows its primary.
pub(crate) async fn in_sync(replica: &RedisServer) {
    let linked = async || {
        let info: redis::RedisResult<String> =
            ask(replica.port, redis::cmd("INFO").arg("replication")).await;
        info.is_ok_and(|i| i.contains("master_link_status:up"))
    };
    eventually("the replica in sync", Duration::from_secs(20), linked).await;
}

/// The role (`master`, `slave`) of the server on `port`.
pub(crate) async fn role(port: u16) -> Option<String> {
    let reply: redis::RedisResult<Vec<redis::Value>> = ask(port, &redis::cmd("ROLE")).await;
    match reply.ok()?.first()? {
        redis::Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        redis::Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_follows_the_primary_through_a_failover() {
    let mut primary = RedisServer::start();
    let replica = RedisServer::start_replica_of(primary.port);
    in_sync(&replica).await;
    let sentinel = SentinelServer::start("ankusa", primary.port, 1000);
    let sentinels = [format!("127.0.0.1:{}", sentinel.port)];
    let store = RedisStore::<Route>::open(&RedisSettings {
        // The primary's password and db only: the sentinel names the server.
        url: "redis://127.0.0.1:1/0",
        prefix: "ankusa:",
        timeout: Duration::from_millis(500),
        sentinels: &sentinels,
        master: "ankusa",
        sentinel_password: None,
        min_replicas: 0,
        min_replicas_timeout: Duration::ZERO,
        fleet_secret: "",
    })
    .unwrap();
    let Cas::Written(created) = store
        .put(r1("https://a.test/", 1), None, None)
        .await
        .unwrap()
    else {
        panic!("created on the primary");
    };
    // Acknowledged by the replica before the primary dies, so the failover keeps it.
    let acked: i64 = ask(primary.port, redis::cmd("WAIT").arg(1).arg(5000))
        .await
        .unwrap();
    assert_eq!(acked, 1);

    primary.stop(); // SIGKILL
    let killed = Instant::now();
    // Changes are refused while no primary answers, and taken again once the sentinel has
    // promoted the replica: the store asks it again, with no restart.
    let updated = eventually(
        "a change taken again",
        Duration::from_secs(30),
        async || {
            let current = store.get("t1", "r1").await.ok()?;
            let version = current.subject?.version;
            match store
                .put(r1("https://b.test/", 2), None, Some(version))
                .await
            {
                Ok(Cas::Written(stamp)) => Some(stamp),
                _ => None,
            }
        },
    )
    .await;
    let took = killed.elapsed();
    assert_eq!(role(replica.port).await.as_deref(), Some("master"));
    assert!(updated.version > created.version);
    assert_eq!(updated.store, created.store, "the same store, by its id");
    let found = store.get("t1", "r1").await.unwrap().into_subject().unwrap();
    assert_eq!(found.destination, "https://b.test/");
    // Sentinel's own delay (down-after 1 s, then the election) is most of it.
    assert!(took < Duration::from_secs(20), "{took:?}");
    eprintln!("failover: the first change taken {took:?} after the kill");
}

/// With `min_replicas = 1` a change is acknowledged once the replica holds it; with the
/// replica hung, a change is answered 503 and its row settled by reading it back (it is on
/// the primary: `ok`, published), so the trail and replicas stay right after a failover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_acknowledges_only_what_a_replica_holds() {
    use crate::routes::{new_route, route_rows, settling, wait_settled};
    use crate::support::trail::{ctx, open_trail};
    use ankusa::audit::RowResult;
    use ankusa::subjects::routes::RoutePatch;

    let primary = RedisServer::start();
    let replica = RedisServer::start_replica_of(primary.port);
    in_sync(&replica).await;
    let url = primary.url();
    let store = RedisStore::<Route>::open(&RedisSettings {
        url: &url,
        prefix: "ankusa:",
        timeout: Duration::from_secs(2),
        sentinels: &[],
        master: "",
        sentinel_password: None,
        min_replicas: 1,
        min_replicas_timeout: Duration::from_millis(300),
        fleet_secret: "",
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail(dir.path(), true);
    let settling = settling(
        &trail,
        std::sync::Arc::new(store),
        Duration::from_millis(100),
        Duration::from_secs(10),
    );
    let routes = settling.routes.clone();
    let create = new_route("r1", "https://a.test/");
    routes
        .create(ctx("alice"), "t1".into(), create)
        .await
        .unwrap();
    let on_replica: redis::RedisResult<Option<String>> = ask(
        replica.port,
        redis::cmd("HGET").arg("ankusa:route:{t1}:r1").arg("rev"),
    )
    .await;
    assert_eq!(
        on_replica.unwrap().as_deref(),
        Some("1"),
        "held before the answer"
    );

    // The replica hangs: the next change is not acknowledged.
    replica.signal("STOP");
    let patch = RoutePatch {
        destination: Some("https://b.test/".into()),
        ..RoutePatch::default()
    };
    let started = Instant::now();
    let update = routes.update(ctx("alice"), "t1".into(), "r1".into(), patch, None);
    assert!(update.await.is_err(), "503: no replica holds it");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    wait_settled(trail.store(), Duration::from_secs(15)).await;
    let rows = route_rows(trail.store(), "r1");
    assert_eq!(rows.len(), 2);
    assert_eq!(
        rows[1].result,
        RowResult::Ok,
        "on the primary: read back, recorded"
    );
    assert!(rows[1].publish, "and published");
    replica.signal("CONT");
    settling.stop().await;
    trail.shutdown().await;
}
