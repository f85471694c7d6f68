//! Kafka sink tests against rdkafka's in-process `MockCluster` (one per test, own topics),
//! read back with a real consumer: key, every `ce_` header, content type and payload bytes.
//!
//! `MockCluster` is not `Send`, so it lives on the test thread: `#[tokio::test]` runs the
//! test on a current-thread runtime, on the very thread that made the cluster.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::message::{Headers, OwnedMessage};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{DefaultProducerContext, Producer};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::Message;

use super::*;
use crate::test_support::{event_id, sample, sample_data, DATASCHEMA, INCARNATION, SOURCE};
use crate::{Delivery, Outcome, Sink, SinkError};

mod tombstones;

type Cluster = MockCluster<'static, DefaultProducerContext>;

fn cluster(topic: &str, partitions: i32) -> Cluster {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(topic, partitions, 1).unwrap();
    cluster
}

fn config(cluster: &Cluster, topic: &str) -> KafkaConfig {
    let mut config = KafkaConfig::new(cluster.bootstrap_servers(), topic);
    config.message_timeout = Duration::from_secs(10);
    config
}

/// Reads `count` records from every partition of `topic`, from the beginning.
async fn read(cluster: &Cluster, topic: &str, partitions: i32, count: usize) -> Vec<OwnedMessage> {
    let group = format!("ankusa-test-{topic}");
    let consumer =
        crate::test_support::reader(&cluster.bootstrap_servers(), topic, partitions, &group);
    let mut records = Vec::with_capacity(count);
    while records.len() < count {
        let next = tokio::time::timeout(Duration::from_secs(20), consumer.recv()).await;
        records.push(next.expect("timed out reading records").unwrap().detach());
    }
    records
}

fn headers(record: &OwnedMessage) -> BTreeMap<String, String> {
    let headers = record.headers().expect("record has headers");
    (0..headers.count())
        .map(|i| {
            let header = headers.get(i);
            let value = String::from_utf8(header.value.unwrap().to_vec()).unwrap();
            (header.key.to_string(), value)
        })
        .collect()
}

fn header<'a>(record: &'a BTreeMap<String, String>, name: &str) -> &'a str {
    record.get(name).map(String::as_str).unwrap()
}

#[tokio::test]
async fn produces_binary_mode_records_with_every_ce_header() {
    let topic = "ankusa-binary";
    let cluster = cluster(topic, 1);
    let (sink, _) = crate::SinkConfig::Kafka(config(&cluster, topic))
        .build()
        .await
        .unwrap();
    assert_eq!(sink.kind(), "kafka");
    let events = [
        sample(1, "acme/r1"),
        sample(2, "acme/r2"),
        sample(3, "acme/r1"),
    ];

    assert_eq!(sink.send(&events).await, vec![Outcome::Delivered; 3]);

    let records = read(&cluster, topic, 1, 3).await;
    for (record, (seq, key)) in records
        .iter()
        .zip([(1, "acme/r1"), (2, "acme/r2"), (3, "acme/r1")])
    {
        assert_eq!(record.key(), Some(key.as_bytes()));
        assert_eq!(record.payload(), Some(sample_data(seq, key).as_bytes()));
        let expected: BTreeMap<String, String> = [
            ("ce_specversion", "1.0".to_string()),
            ("ce_id", event_id(seq)),
            ("ce_type", "io.ankusa.route.created".into()),
            ("ce_source", SOURCE.into()),
            ("ce_subject", format!("routes/{key}")),
            ("ce_time", format!("2024-05-06T07:08:{:02}+00:00", 9 + seq)),
            ("ce_dataschema", DATASCHEMA.into()),
            ("ce_sequence", format!("{seq:020}")),
            ("ce_incarnation", INCARNATION.into()),
            ("ce_partitionkey", key.into()),
            ("content-type", "application/json".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(headers(record), expected, "seq {seq}");
    }
}

#[tokio::test]
async fn each_key_stays_on_one_partition_in_order() {
    let topic = "ankusa-keys";
    let cluster = cluster(topic, 4);
    let sink = KafkaSink::new(config(&cluster, topic)).unwrap();
    let keys = ["t/a", "t/b", "t/c", "t/d", "t/e"];
    let events: Vec<Delivery> = (1..=40).map(|s| sample(s, keys[s as usize % 5])).collect();

    assert_eq!(sink.send(&events).await, vec![Outcome::Delivered; 40]);

    let records = read(&cluster, topic, 4, 40).await;
    for key in keys {
        let of_key: Vec<&OwnedMessage> = records
            .iter()
            .filter(|r| r.key() == Some(key.as_bytes()))
            .collect();
        assert_eq!(of_key.len(), 8, "key {key}");
        assert!(of_key
            .iter()
            .all(|r| r.partition() == of_key[0].partition()));
        let seqs: Vec<String> = of_key
            .iter()
            .map(|r| header(&headers(r), "ce_sequence").to_string())
            .collect();
        let mut sorted = seqs.clone();
        sorted.sort();
        assert_eq!(seqs, sorted, "key {key} out of order");
    }
}

#[tokio::test]
async fn a_record_too_large_is_rejected_and_the_rest_delivered() {
    let topic = "ankusa-large";
    let cluster = cluster(topic, 1);
    let mut config = config(&cluster, topic);
    config
        .properties
        .insert("message.max.bytes".into(), "2000".into());
    let sink = KafkaSink::new(config).unwrap();
    let mut big = sample(1, "big");
    let blob = serde_json::json!({ "blob": "x".repeat(5000) });
    big.event.set_data("application/json", blob);

    let outcomes = sink.send(&[big, sample(2, "small")]).await;

    let reason = "kafka_MessageSizeTooLarge".to_string();
    assert_eq!(
        outcomes,
        vec![Outcome::Rejected { reason }, Outcome::Delivered]
    );
    let records = read(&cluster, topic, 1, 1).await;
    assert_eq!(header(&headers(&records[0]), "ce_id"), event_id(2));
}

#[tokio::test]
async fn an_unreachable_cluster_is_retry_within_the_message_timeout() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let brokers = listener.local_addr().unwrap().to_string();
    drop(listener);
    let mut config = KafkaConfig::new(brokers, "ankusa-nowhere");
    config.message_timeout = Duration::from_millis(800);
    let sink = KafkaSink::new(config).unwrap();

    let started = Instant::now();
    let outcomes = sink.send(&[sample(1, "k"), sample(2, "k")]).await;

    assert!(started.elapsed() < Duration::from_secs(5));
    for outcome in outcomes {
        assert!(
            matches!(&outcome, Outcome::Retry { after: None, .. }),
            "{outcome:?}"
        );
    }
}

#[tokio::test]
async fn a_fatal_producer_error_recreates_the_producer() {
    let topic = "ankusa-fatal";
    let cluster = cluster(topic, 1);
    let sink = KafkaSink::new(config(&cluster, topic)).unwrap();
    // A head-of-line sequence desync is fatal for an idempotent producer.
    let desync = RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER;
    cluster.request_errors(RDKafkaApiKey::Produce, &[desync]);

    let outcomes = sink.send(&[sample(1, "k"), sample(2, "k")]).await;
    let fatal = Outcome::Retry {
        after: None,
        reason: "producer_fatal".into(),
    };
    assert_eq!(outcomes, vec![fatal.clone(), fatal]);
    assert_eq!(sink.producer_recreations(), 1);

    assert_eq!(
        sink.send(&[sample(1, "k"), sample(2, "k")]).await,
        vec![Outcome::Delivered; 2]
    );
    let records = read(&cluster, topic, 1, 2).await;
    assert_eq!(header(&headers(&records[0]), "ce_id"), event_id(1));
    assert_eq!(header(&headers(&records[1]), "ce_id"), event_id(2));
}

fn producer_fatal() -> Outcome {
    Outcome::Retry {
        after: None,
        reason: "producer_fatal".into(),
    }
}

/// An attempt submitted while an earlier one is still under way on a producer that turned
/// fatal fails at once: on a fresh producer its records would overtake the earlier ones,
/// which fail. The producer is replaced once nothing is under way on it.
#[tokio::test]
async fn a_fatal_producer_is_replaced_only_once_its_attempts_are_settled() {
    let topic = "ankusa-fatal-in-flight";
    let cluster = cluster(topic, 1);
    let sink = KafkaSink::new(config(&cluster, topic)).unwrap();
    let desync = RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER;
    cluster.request_errors(RDKafkaApiKey::Produce, &[desync]);

    let first = sink.submit(&[sample(1, "k")]).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while sink.producer().client().fatal_error().is_none() {
        assert!(Instant::now() < deadline, "the producer never turned fatal");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let second = sink.submit(&[sample(2, "k")]).await;
    assert!(!second.open);
    assert_eq!(second.outcomes.await, vec![producer_fatal()]);
    assert_eq!(first.outcomes.await, vec![producer_fatal()]);
    assert_eq!(sink.producer_recreations(), 0);

    assert_eq!(
        sink.send(&[sample(1, "k"), sample(2, "k")]).await,
        vec![Outcome::Delivered; 2]
    );
    assert_eq!(sink.producer_recreations(), 1);
    let records = read(&cluster, topic, 1, 2).await;
    assert_eq!(header(&headers(&records[0]), "ce_id"), event_id(1));
    assert_eq!(header(&headers(&records[1]), "ce_id"), event_id(2));
}

/// A record that timed out while its partition had no leader is not overtaken by a record
/// of its key enqueued after it (a later attempt in flight): that one fails too, so the
/// resend keeps the key's order. Without the purge, the later record went out as soon as
/// the broker was back. The two are enqueued 1 s apart, a period of librdkafka's scan for
/// timed-out records, so they never time out in one scan; and the second is enqueued well
/// before the first can time out (3 s), even on a loaded machine.
#[tokio::test]
async fn a_record_that_failed_is_not_overtaken_by_a_later_one_of_its_key() {
    let topic = "ankusa-overtake";
    let cluster = cluster(topic, 1);
    let mut config = config(&cluster, topic);
    config.message_timeout = Duration::from_millis(3000);
    for (key, value) in [
        ("reconnect.backoff.ms", "10"),
        ("reconnect.backoff.max.ms", "50"),
    ] {
        config.properties.insert(key.into(), value.into());
    }
    let sink = KafkaSink::new(config).unwrap();
    assert_eq!(sink.send(&[sample(1, "k")]).await, vec![Outcome::Delivered]);

    cluster.broker_down(1).unwrap();
    let first = sink.submit(&[sample(2, "k")]).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let second = sink.submit(&[sample(3, "k")]).await;
    assert!(second.open);
    let failed = first.outcomes.await;
    assert!(matches!(failed[0], Outcome::Retry { .. }), "{failed:?}");
    // Nothing new goes out while an attempt is still under way after a failure.
    let third = sink.submit(&[sample(4, "k")]).await;
    assert!(!third.open);
    let refused = Outcome::Retry {
        after: None,
        reason: "earlier_delivery_failed".into(),
    };
    assert_eq!(third.outcomes.await, vec![refused]);
    cluster.broker_up(1).unwrap();
    let later = second.outcomes.await;
    assert!(matches!(later[0], Outcome::Retry { .. }), "{later:?}");

    assert_eq!(
        sink.send(&[sample(2, "k"), sample(3, "k")]).await,
        vec![Outcome::Delivered; 2]
    );
    let records = read(&cluster, topic, 1, 3).await;
    let ids: Vec<&str> = records
        .iter()
        .map(|r| std::str::from_utf8(r.key().unwrap()).unwrap())
        .collect();
    assert_eq!(ids, ["k"; 3]);
    let ids: Vec<String> = records
        .iter()
        .map(|r| header(&headers(r), "ce_id").to_owned())
        .collect();
    assert_eq!(ids, [event_id(1), event_id(2), event_id(3)]);
}

#[tokio::test]
async fn healthcheck_fetches_the_topic_metadata() {
    let topic = "ankusa-health";
    let cluster = cluster(topic, 2);
    let sink = KafkaSink::new(config(&cluster, topic)).unwrap();
    sink.healthcheck().await.unwrap();

    let failing = RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED;
    cluster.topic_error(topic, failing).unwrap();
    let err = sink.healthcheck().await.unwrap_err();
    assert!(
        matches!(&err, SinkError::Unhealthy(m) if m.contains(topic)),
        "{err}"
    );
}

#[tokio::test]
async fn healthcheck_fails_without_a_broker() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let brokers = listener.local_addr().unwrap().to_string();
    drop(listener);
    let mut config = KafkaConfig::new(brokers, "ankusa-nowhere");
    config.healthcheck_timeout = Duration::from_millis(500);
    let sink = KafkaSink::new(config).unwrap();

    let started = Instant::now();
    let err = sink.healthcheck().await.unwrap_err();
    assert!(matches!(err, SinkError::Unhealthy(_)), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn invalid_config_names_the_field_and_hides_values() {
    let good = KafkaConfig::new("127.0.0.1:9092", "t");
    let with_property = |key: &str, value: &str| {
        let mut config = good.clone();
        config.properties.insert(key.into(), value.into());
        config
    };
    let cases = [
        (
            KafkaConfig {
                brokers: " ".into(),
                ..good.clone()
            },
            "brokers",
        ),
        (
            KafkaConfig {
                topic: "".into(),
                ..good.clone()
            },
            "topic",
        ),
        (
            KafkaConfig {
                topic: "a/b".into(),
                ..good.clone()
            },
            "topic",
        ),
        (
            KafkaConfig {
                message_timeout: Duration::ZERO,
                ..good.clone()
            },
            "message_timeout",
        ),
        (with_property("acks", "1"), "properties.acks"),
        (
            with_property("enable.idempotence", "false"),
            "properties.enable.idempotence",
        ),
        (
            with_property("no.such.property", "s3cr3t"),
            "properties.no.such.property",
        ),
        (with_property("linger.ms", "s3cr3t"), "properties.linger.ms"),
    ];
    for (config, field) in cases {
        let err = KafkaSink::new(config).unwrap_err().to_string();
        assert!(err.contains(field), "{err} should name {field}");
        assert!(!err.contains("s3cr3t"), "{err}");
    }
    let shown = format!("{:?}", with_property("sasl.password", "s3cr3t"));
    assert!(
        !shown.contains("s3cr3t") && shown.contains("sasl.password"),
        "{shown}"
    );
}
