//! End to end against a real Kafka-compatible broker (tansu, started here on a free port with
//! in-memory storage): the publisher's events land on the topic with the CloudEvents Kafka
//! binding, and a real consumer reads back every header, key, id and payload.
//!
//! `scripts/test` installs tansu when it is missing; without it this test fails and says so.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::support::eventually;
use crate::support::kafka::{kafka_headers, kafka_reader};
use crate::support::publisher::Running;
use crate::support::trail::*;
use ankusa::lifecycle::event::event_id;
use ankusa::lifecycle::{PublisherOptions, SinkSpec};
use ankusa_sinks::test_support::Broker;
use ankusa_sinks::{KafkaConfig, KafkaSink, RetryPolicy};
use rdkafka::message::Message;
use serde_json::Value;

const TOPIC: &str = "ankusa-e2e";
const PARTITIONS: i32 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_reach_a_real_broker_with_every_header_key_and_payload() {
    let broker = Broker::start();
    broker.create_topic(TOPIC, PARTITIONS).await;
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail_with_sinks(dir.path(), &["kafka"]);
    // 10 subjects, 5 changes each: 50 events on 10 partition keys.
    for i in 0..10 {
        create_source(&trail, ctx("alice"), &format!("s{i}"), "hunter2")
            .await
            .unwrap();
    }
    for round in 0..4 {
        for i in 0..10 {
            update_secret(&trail, ctx("alice"), &format!("s{i}"), &format!("x{round}"))
                .await
                .unwrap();
        }
    }
    let mut config = KafkaConfig::new(broker.address.clone(), TOPIC);
    config.message_timeout = Duration::from_secs(20);
    let sink = KafkaSink::new(config).unwrap();
    let spec = SinkSpec {
        name: "kafka".into(),
        sink: Arc::new(sink),
        retry: RetryPolicy::default(),
    };
    let options = PublisherOptions {
        source: "urn:ankusa:e2e".into(),
        batch: 16,
        idle: Duration::from_millis(50),
        in_flight: 4,
        max_dead_letters: 100_000,
    };
    let publisher = Running::start(&trail, vec![spec], options).await;
    eventually("delivery", Duration::from_secs(60), async || {
        publisher.statuses()[0].position == 50
    })
    .await;

    let consumer = kafka_reader(&broker.address, TOPIC, PARTITIONS);
    let rows: HashMap<u64, ankusa::audit::Row> = all_rows(trail.store())
        .into_iter()
        .map(|r| (r.seq, r))
        .collect();
    let incarnation = trail.history().of(1).id;
    let mut per_key: HashMap<String, Vec<u64>> = HashMap::new();
    let mut seen = 0;
    while seen < 50 {
        let m = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
            .await
            .expect("record")
            .unwrap();
        let headers = kafka_headers(&m);
        let seq: u64 = headers["ce_sequence"].parse().unwrap();
        let row = &rows[&seq];
        let key = format!("t1/{}", row.resource);
        assert_eq!(
            std::str::from_utf8(m.key().unwrap()).unwrap(),
            key,
            "record key = partitionkey"
        );
        assert_eq!(headers["ce_specversion"], "1.0");
        assert_eq!(headers["ce_id"], event_id(incarnation, seq).to_string());
        let verb = if row.action == "source.create" {
            "created"
        } else {
            "updated"
        };
        assert_eq!(headers["ce_type"], format!("io.ankusa.source.{verb}"));
        assert_eq!(headers["ce_source"], "urn:ankusa:e2e");
        assert_eq!(headers["ce_subject"], row.resource);
        assert_eq!(
            chrono::DateTime::parse_from_rfc3339(&headers["ce_time"])
                .unwrap()
                .timestamp_millis() as u64,
            row.at
        );
        assert_eq!(headers["ce_sequence"], format!("{seq:020}"));
        assert_eq!(headers["ce_incarnation"], incarnation.to_string());
        assert_eq!(
            headers["ce_dataschema"],
            format!("https://ankusa.io/schemas/io.ankusa.source.{verb}.v1.json")
        );
        assert_eq!(headers["ce_partitionkey"], key);
        assert_eq!(headers["content-type"], "application/json");
        let payload: Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
        assert_eq!(payload["action"], row.action.as_str());
        assert_eq!(payload["revision"], row.revision.unwrap());
        let raw =
            String::from_utf8_lossy(m.payload().unwrap()).to_string() + &format!("{headers:?}");
        assert!(
            !raw.contains("hunter2") && !raw.contains("x0"),
            "no secret in any record"
        );
        per_key.entry(key).or_default().push(seq);
        seen += 1;
    }
    assert_eq!(per_key.len(), 10);
    for (key, seqs) in &per_key {
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "{key}: out of order {seqs:?}"
        );
        assert_eq!(seqs.len(), 5, "{key}: every change exactly once");
    }
    publisher.stop().await;
    trail.shutdown().await;
    drop(broker);
}
