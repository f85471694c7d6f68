//! The publisher through the Kafka sink to rdkafka's in-process MockCluster: 10,000 changes
//! on 100 partition keys arrive exactly once each, in seq order per key, with stable ids and
//! the row's key; and a broker that goes down while several attempts are in flight loses
//! nothing and breaks no key's order. (`MockCluster` is not `Send`: it stays on the test's
//! thread.)

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::support::eventually;
use crate::support::kafka::{kafka_headers, kafka_reader};
use crate::support::publisher::Running;
use crate::support::trail::*;
use ankusa::lifecycle::event::event_id;
use ankusa::lifecycle::{PublisherOptions, SinkSpec};
use ankusa_sinks::{KafkaConfig, KafkaSink, RetryPolicy};
use rdkafka::message::Message;
use rdkafka::mocking::MockCluster;

const TOPIC: &str = "lifecycle";
const PARTITIONS: i32 = 4;

/// `subjects` sources with 100 changes each (a create, 99 updates), from one concurrent
/// committer per subject.
async fn changes(trail: &ankusa::audit::Trail, subjects: usize) {
    let mut tasks = vec![];
    for s in 0..subjects {
        let trail = trail.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("s{s}");
            create_source(&trail, ctx("a"), &id, "hunter2")
                .await
                .unwrap();
            for i in 0..99 {
                update_secret(&trail, ctx("a"), &id, &format!("v{i}"))
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_events_reach_kafka_in_order_per_key_with_stable_ids() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, PARTITIONS, 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail_with_sinks(dir.path(), &["kafka"]);
    changes(&trail, 100).await;
    let sink = KafkaSink::new(KafkaConfig::new(cluster.bootstrap_servers(), TOPIC)).unwrap();
    let spec = SinkSpec {
        name: "kafka".into(),
        sink: Arc::new(sink),
        retry: RetryPolicy::default(),
    };
    let options = PublisherOptions {
        source: "urn:ankusa:test".into(),
        batch: 500,
        idle: Duration::from_millis(50),
        in_flight: 4,
        max_dead_letters: 100_000,
    };
    let publisher = Running::start(&trail, vec![spec], options).await;
    eventually("delivery", Duration::from_secs(60), async || {
        // 10,000 changes and the checkpoint the 10,000th row brings.
        publisher.statuses()[0].position == 10_001
    })
    .await;

    let consumer = kafka_reader(&cluster.bootstrap_servers(), TOPIC, PARTITIONS);
    let resources: HashMap<u64, String> = all_rows(trail.store())
        .into_iter()
        .map(|r| (r.seq, r.resource))
        .collect();
    let incarnation = trail.history().of(1).id;
    let mut per_key: HashMap<String, Vec<u64>> = HashMap::new();
    for _ in 0..10_001 {
        let m = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
            .await
            .expect("record")
            .unwrap();
        let headers = kafka_headers(&m);
        let seq: u64 = headers["ce_sequence"].parse().unwrap();
        let key = std::str::from_utf8(m.key().unwrap()).unwrap().to_owned();
        if seq == 10_001 {
            assert_eq!(key, "trail");
            assert_eq!(headers["ce_type"], "io.ankusa.trail.checkpoint");
            continue;
        }
        assert_eq!(key, format!("t1/{}", resources[&seq]));
        assert_eq!(headers["ce_id"], event_id(incarnation, seq).to_string());
        assert!(!String::from_utf8_lossy(m.payload().unwrap()).contains("hunter2"));
        per_key.entry(key).or_default().push(seq);
    }
    assert_eq!(per_key.len(), 100);
    for (key, seqs) in &per_key {
        assert_eq!(seqs.len(), 100, "{key}: each change exactly once");
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{key}: in seq order");
    }
    publisher.stop().await;
    trail.shutdown().await;
}

/// The broker goes down while attempts are in flight (batches of 50, 4 in flight), long enough
/// for them to time out, then comes back: every event arrives, a key's events arrive in seq
/// order (counting first arrivals: redeliveries repeat an id with the same body), and the
/// position reaches the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_outage_with_attempts_in_flight_loses_nothing_and_keeps_key_order() {
    const CHANGES: u64 = 3_000;
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, PARTITIONS, 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail_with_sinks(dir.path(), &["kafka"]);
    changes(&trail, 30).await;
    let retry = RetryPolicy {
        initial: Duration::from_millis(50),
        max: Duration::from_millis(200),
        max_retry_after: Duration::from_millis(200),
    };
    let mut config = KafkaConfig::new(cluster.bootstrap_servers(), TOPIC);
    config.message_timeout = Duration::from_millis(1_000);
    // librdkafka backs off reconnecting up to 10 s by default, and times a partition's
    // messages out on the broker's thread, which sleeps through that backoff: keep it short
    // so the outage's timeouts and the recovery both come within a second or so.
    config
        .properties
        .insert("reconnect.backoff.max.ms".into(), "200".into());
    // Slow each produce request down so that attempts pile up in flight before the outage,
    // and so that the rest of the events take over a second: the outage must come before
    // the last of them, however late this test's thread sees the position pass 500.
    cluster
        .broker_round_trip_time(1, Duration::from_millis(100))
        .unwrap();
    let spec = SinkSpec {
        name: "kafka".into(),
        sink: Arc::new(KafkaSink::new(config).unwrap()),
        retry,
    };
    let options = PublisherOptions {
        source: "urn:ankusa:test".into(),
        batch: 50,
        idle: Duration::from_millis(50),
        in_flight: 4,
        max_dead_letters: 100_000,
    };
    let publisher = Running::start(&trail, vec![spec], options).await;
    eventually("some delivery", Duration::from_secs(60), async || {
        publisher.statuses()[0].position >= 500
    })
    .await;
    cluster.broker_down(1).unwrap();
    let at_outage = publisher.statuses().remove(0);
    assert!(
        at_outage.position < CHANGES,
        "every event was delivered before the outage began"
    );
    // An attempt fails once librdkafka times its messages out (1 s, checked on a 1 s timer),
    // later still on a loaded machine: wait for that rather than for a fixed time. Attempts
    // may already have timed out while the producer was starting: count only new failures.
    eventually(
        "the outage to make attempts fail",
        Duration::from_secs(60),
        async || publisher.statuses()[0].retries > at_outage.retries,
    )
    .await;
    let status = publisher.statuses().remove(0);
    assert!(
        status.position < CHANGES,
        "the outage stopped the sink short of the end (was at {})",
        at_outage.position
    );
    cluster.broker_up(1).unwrap();
    eventually(
        "delivery after the outage",
        Duration::from_secs(60),
        async || publisher.statuses()[0].position == CHANGES,
    )
    .await;

    let consumer = kafka_reader(&cluster.bootstrap_servers(), TOPIC, PARTITIONS);
    let incarnation = trail.history().of(1).id;
    let mut bodies: HashMap<String, Vec<u8>> = HashMap::new();
    let mut per_key: HashMap<String, Vec<u64>> = HashMap::new();
    while (bodies.len() as u64) < CHANGES {
        let m = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
            .await
            .expect("record")
            .unwrap();
        let headers = kafka_headers(&m);
        let seq: u64 = headers["ce_sequence"].parse().unwrap();
        let id = headers["ce_id"].clone();
        assert_eq!(id, event_id(incarnation, seq).to_string());
        let body = m.payload().unwrap().to_vec();
        match bodies.get(&id) {
            Some(first) => assert_eq!(first, &body, "a redelivery carries the same body"),
            None => {
                bodies.insert(id, body);
                let key = std::str::from_utf8(m.key().unwrap()).unwrap().to_owned();
                per_key.entry(key).or_default().push(seq);
            }
        }
    }
    assert_eq!(per_key.len(), 30);
    for (key, seqs) in &per_key {
        assert_eq!(seqs.len(), 100, "{key}: every change");
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{key}: in seq order");
    }
    publisher.stop().await;
    trail.shutdown().await;
}
