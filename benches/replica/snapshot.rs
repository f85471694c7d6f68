//! A snapshot of routes kept in Redis, beside the same number of route changes, both through
//! the publisher and the Kafka sink to rdkafka's MockCluster, each timed until the sink has
//! confirmed its last row.

use std::sync::Arc;
use std::time::Duration;

use ankusa::subjects::remote::redis::RedisStore;
use ankusa::subjects::routes::{Route, RouteStore, Routes};
use ankusa::subjects::snapshot::{Reason, SnapshotKind, Snapshots};
use ankusa_sinks::{KafkaConfig, KafkaSink};
use rdkafka::mocking::MockCluster;
use tokio_util::sync::CancellationToken;

use crate::backlog::{commit_one, trail};
use crate::clock::{Clock, Run};
use crate::publishing::{create_routes, Running, TASKS};
use crate::redis::Redis;
use crate::{PARTITIONS, TOPIC};

pub async fn snapshot(n: u64) {
    println!("snapshot benchmark ({n} routes in Redis, Kafka sink to MockCluster)");
    let redis = Redis::start();
    let store: Arc<RouteStore> =
        Arc::new(RedisStore::<Route>::new(&redis.url, "ankusa:", Duration::from_secs(5)).unwrap());
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, PARTITIONS, 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let trail = trail(dir.path(), &["kafka"]);
    let routes = Routes::new(store, trail.clone());
    let sink = KafkaSink::new(KafkaConfig::new(cluster.bootstrap_servers(), TOPIC)).unwrap();
    let running = Running::start(&trail, "kafka", Arc::new(sink)).await;
    // Warm the producer up (connection, producer id, metadata) with a row that is no route.
    running
        .confirmed(commit_one(&trail, "warmup".into()).await)
        .await;

    let clock = Clock::start();
    let last = create_routes(&routes, &trail, n).await;
    running.confirmed(last).await;
    let changes = clock.stop(n);
    print_run(
        &format!("changes  ({n} route creates, {TASKS} tasks)"),
        changes,
        n,
    );

    let stop = CancellationToken::new();
    let kinds: Vec<Arc<dyn SnapshotKind>> = vec![Arc::new(routes.remote().clone())];
    let snapshots = Snapshots::new(trail.clone(), "urn:ankusa:bench".into(), kinds, stop);
    let clock = Clock::start();
    let items = snapshots
        .take(Reason::Request, None)
        .await
        .unwrap()
        .expect("no other snapshot runs");
    let written = clock.wall.elapsed();
    assert_eq!(items, n, "one item per route");
    // Nothing else commits meanwhile: the last row is the finished marker.
    let finish = *trail.committed().borrow();
    running.confirmed(finish).await;
    // Its items and its two markers.
    let events = items + 2;
    let snapshot = clock.stop(events);
    print_run(
        &format!("snapshot ({items} items + 2 markers)"),
        snapshot,
        events,
    );
    println!(
        "snapshot rows all written after {:.2} s",
        written.as_secs_f64()
    );
    println!(
        "snapshot per-event rate / change per-event rate: {:.2} (target >= 1)",
        snapshot.rate / changes.rate
    );
    running.stop().await;
    trail.shutdown().await;
}

/// A run's rate, its time to the last confirmed event and CPU time per event.
fn print_run(what: &str, run: Run, events: u64) {
    println!(
        "{what}: {:.0} ev/s, start to last confirmed {:.2} s, {:.1} us cpu/ev",
        run.rate,
        events as f64 / run.rate,
        run.cpu_us
    );
}
