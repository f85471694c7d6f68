//! `ankusa follow kafka` beside a bare rdkafka consumer reading the same records from tansu.
//!
//! tansu rather than MockCluster: the follower asks for metadata and watermarks and commits
//! its group's offsets, as it does against a real broker, and the records come over a socket
//! from another process, as they do in production.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ankusa::replica::kafka::{self, KafkaOptions};
use ankusa::replica::Metrics;
use ankusa::subjects::remote::memory::MemoryStore;
use ankusa::subjects::routes::{Route, RouteStore, Routes};
use ankusa_sinks::test_support::Broker;
use ankusa_sinks::{KafkaConfig, KafkaSink};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::backlog::trail;
use crate::clock::{Clock, Run};
use crate::publishing::{create_routes, Running};
use crate::report::{report, ROUNDS};
use crate::{PARTITIONS, TOPIC};

/// The follower's batching: the CLI's defaults (`--batch-events`, `--batch-ms`).
const BATCH_EVENTS: usize = ankusa::replica::kafka::DEFAULT_BATCH_EVENTS;
const BATCH_INTERVAL: Duration = Duration::from_millis(ankusa::replica::kafka::DEFAULT_BATCH_MS);

pub async fn follow(n: u64) {
    println!("follow benchmark ({n} route events in tansu, {PARTITIONS} partitions)");
    let broker = Broker::start();
    broker.create_topic(TOPIC, PARTITIONS).await;
    produce(&broker, n).await;
    // A warm-up round first (the broker's caches, the page cache), not reported.
    let mut rounds = Vec::with_capacity(ROUNDS + 1);
    let mut whole = Vec::with_capacity(ROUNDS + 1);
    for round in 0..=ROUNDS {
        let bare = bare(&broker.address, round, n).await;
        let (ours, run) = follower(&broker.address, round, n).await;
        rounds.push((ours, bare));
        whole.push(run);
    }
    rounds.remove(0);
    whole.remove(0);
    report("follow kafka", "bare consumer", &rounds);
    let whole: Vec<String> = whole
        .iter()
        .map(|d| format!("{:.2}", d.as_secs_f64()))
        .collect();
    println!(
        "follow kafka  whole runs (to the last record applied, then the caught-up wait of {} ms and the last file write): {} s",
        BATCH_INTERVAL.as_millis(),
        whole.join(", ")
    );
}

/// `n` route creates (a memory route store), published by the real publisher through the
/// Kafka sink: `n` records.
async fn produce(broker: &Broker, n: u64) {
    let dir = tempfile::tempdir().unwrap();
    let trail = trail(dir.path(), &["kafka"]);
    let store: Arc<RouteStore> = Arc::new(MemoryStore::<Route>::default());
    let routes = Routes::new(store, trail.clone());
    let mut config = KafkaConfig::new(broker.address.clone(), TOPIC);
    config.message_timeout = Duration::from_secs(30);
    let running = Running::start(&trail, "kafka", Arc::new(KafkaSink::new(config).unwrap())).await;
    let clock = Clock::start();
    let last = create_routes(&routes, &trail, n).await;
    running.confirmed(last).await;
    let run = clock.stop(n);
    println!(
        "produced {n} records (creates, published to tansu) at {:.0} ev/s",
        run.rate
    );
    running.stop().await;
    trail.shutdown().await;
}

/// A bare consumer of every partition from its beginning, parsing nothing, until it has read
/// every one of the `n` records. tansu's high watermark is not the end (it is the last
/// batch's first offset + 1) and tansu may fetch a record again, so the end is told by the
/// records: the offsets after the last one read, summed over the partitions, reach `n`.
async fn bare(brokers: &str, round: usize, n: u64) -> Run {
    let clock = Clock::start();
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", format!("bench-bare-{round}"))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    // The topic's partitions first, as the follower learns them: a consumer assigned
    // partitions it has no metadata for yet waits about a second before its first fetch.
    let consumer = Arc::new(consumer);
    let metadata = {
        let consumer = consumer.clone();
        ankusa::store::blocking::run("the topic's metadata", move || {
            consumer.fetch_metadata(Some(TOPIC), Duration::from_secs(10))
        })
        .await
        .unwrap()
        .unwrap()
    };
    let mut assignment = TopicPartitionList::new();
    for partition in metadata.topics()[0].partitions() {
        assignment
            .add_partition_offset(TOPIC, partition.id(), Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    let mut read = 0i64;
    while read < n as i64 {
        let m = tokio::time::timeout(Duration::from_secs(60), consumer.recv())
            .await
            .expect("a record within 60 s")
            .unwrap();
        std::hint::black_box(m.payload());
        let end = next.entry(m.partition()).or_insert(0);
        if m.offset() + 1 > *end {
            read += m.offset() + 1 - *end;
            *end = m.offset() + 1;
        }
    }
    clock.stop(n)
}

/// `replica::kafka::follow` until caught up, in a fresh group and replica file: its run to
/// the last record applied (the rate), and the whole run.
async fn follower(brokers: &str, round: usize, n: u64) -> (Run, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let options = KafkaOptions {
        brokers: brokers.into(),
        topic: TOPIC.into(),
        group: format!("bench-follow-{round}"),
        out: dir.path().join("replica.json"),
        batch_events: BATCH_EVENTS,
        batch_interval: BATCH_INTERVAL,
        until_caught_up: true,
        start: Default::default(),
    };
    let metrics = Metrics::new();
    let started = Instant::now();
    let clock = Clock::start();
    let following = tokio::spawn(kafka::follow(
        options,
        metrics.clone(),
        std::future::pending(),
    ));
    // Every record is the create of a distinct route: applied once each.
    while metrics.count("applied") < n {
        if following.is_finished() {
            let ended = following.await.unwrap();
            panic!("the follower stopped before it applied every record: {ended:?}");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let run = clock.stop(n);
    tokio::time::timeout(Duration::from_secs(120), following)
        .await
        .expect("caught up within 120 s")
        .unwrap()
        .unwrap();
    assert_eq!(metrics.count("applied"), n);
    assert_eq!(metrics.count("invalid"), 0);
    (run, started.elapsed())
}
