//! The publisher through the Kafka sink to rdkafka's in-process MockCluster: 10,000 changes
//! on 100 partition keys arrive exactly once each, in seq order per key, with stable ids and
//! the row's key. (`MockCluster` is not `Send`: it stays on the test's thread.)

mod common;
#[path = "common/lifecycle.rs"]
mod lifecycle_support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ankusa::lifecycle::event::event_id;
use ankusa::lifecycle::{PublisherOptions, SinkSpec};
use ankusa_sinks::{KafkaConfig, KafkaSink, RetryPolicy};
use common::*;
use lifecycle_support::{kafka_headers, kafka_reader, wait_for, Running};
use rdkafka::message::Message;
use rdkafka::mocking::MockCluster;

const TOPIC: &str = "lifecycle";
const PARTITIONS: i32 = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_events_reach_kafka_in_order_per_key_with_stable_ids() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, PARTITIONS, 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail_with_sinks(dir.path(), &["kafka"]);
    // 100 subjects, 100 changes each, from 100 concurrent committers (one per subject).
    let mut tasks = vec![];
    for s in 0..100 {
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
    };
    let publisher = Running::start(&trail, vec![spec], options).await;
    wait_for("delivery", || publisher.statuses()[0].position == 10_000).await;

    let consumer = kafka_reader(&cluster.bootstrap_servers(), TOPIC, PARTITIONS);
    let resources: HashMap<u64, String> = all_rows(trail.store())
        .into_iter()
        .map(|r| (r.seq, r.resource))
        .collect();
    let incarnation = trail.history().of(1).id;
    let mut per_key: HashMap<String, Vec<u64>> = HashMap::new();
    for _ in 0..10_000 {
        let m = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
            .await
            .expect("record")
            .unwrap();
        let headers = kafka_headers(&m);
        let seq: u64 = headers["ce_sequence"].parse().unwrap();
        let key = std::str::from_utf8(m.key().unwrap()).unwrap().to_owned();
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
