//! `tombstones = true`: a delete's record is followed, in its partition, by a record of its key
//! with a null value and no headers, before the key's next event; a delete is `Delivered` only
//! once both are confirmed.
//!
//! The order tests run against a real broker (tansu, one per test, its own topic) and read
//! back every record of every partition up to an end marker written after the sink is done,
//! so an extra or a missing record fails them. The failure test needs a broker that refuses one request and not the
//! one before it: rdkafka's `MockCluster`.

use std::collections::BTreeMap;
use std::time::Duration;

use cloudevents::event::AttributesWriter;
use rdkafka::message::{Headers, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::{ClientConfig, Message};

use super::{cluster, config};
use crate::kafka::sink::combine;
use crate::kafka::{KafkaConfig, KafkaSink};
use crate::test_support::{event_id, sample, Broker};
use crate::{Delivery, Outcome, Sink};

const PARTITIONS: i32 = 3;

/// The `verb` event (`created`, `updated`, `deleted`) of route `key` at `seq`, its data as
/// the publisher builds it: bytes.
fn change(seq: u64, key: &str, verb: &str) -> Delivery {
    let mut delivery = sample(seq, key);
    delivery.event.set_type(format!("io.ankusa.route.{verb}"));
    delivery
        .event
        .set_data("application/json", data(seq, key, verb).into_bytes());
    delivery
}

/// The exact value of [`change`]'s record.
fn data(seq: u64, key: &str, verb: &str) -> String {
    format!(r#"{{"action":"{verb}","entity":{{"id":"{key}"}},"revision":{seq}}}"#)
}

/// A record's key, value and `ce_id`.
type Brief = (Option<String>, Option<String>, String);

/// What a test checks of a record: its key, its value, and its headers by name.
#[derive(Debug, PartialEq)]
struct Seen {
    key: Option<String>,
    value: Option<String>,
    headers: BTreeMap<String, String>,
}

impl Seen {
    fn of(record: &OwnedMessage) -> Seen {
        let headers = record.headers().map_or_else(BTreeMap::new, |headers| {
            headers
                .iter()
                .map(|h| {
                    let value = String::from_utf8(h.value.unwrap_or_default().to_vec()).unwrap();
                    (h.key.to_owned(), value)
                })
                .collect()
        });
        Seen {
            key: record.key().map(|k| String::from_utf8(k.to_vec()).unwrap()),
            value: record
                .payload()
                .map(|v| String::from_utf8(v.to_vec()).unwrap()),
            headers,
        }
    }

    /// The record of `change(seq, key, verb)`, as far as these tests tell records apart.
    fn event(seq: u64, key: &str, verb: &str) -> Brief {
        (Some(key.into()), Some(data(seq, key, verb)), event_id(seq))
    }

    /// A tombstone of `key`.
    fn tombstone(key: &str) -> Brief {
        (Some(key.into()), None, String::new())
    }

    /// Key, value and `ce_id` ("" when absent).
    fn brief(&self) -> Brief {
        let id = self.headers.get("ce_id").cloned().unwrap_or_default();
        (self.key.clone(), self.value.clone(), id)
    }
}

/// The key of the record [`everything`] ends each partition with.
const END: &str = "test/end";

/// Every record of every partition of `topic`, partition by partition in offset order. It
/// first writes a record of key [`END`] to each partition and reads up to it: the sink's
/// records are all confirmed by then, so each partition's are exactly those before it. (A
/// partition's high watermark would say as much, but tansu counts a batch of records as one.)
async fn everything(brokers: &str, topic: &str, partitions: i32) -> Vec<Vec<Seen>> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap();
    for partition in 0..partitions {
        let end = FutureRecord::<str, str>::to(topic)
            .partition(partition)
            .key(END)
            .payload("end");
        producer.send(end, Duration::from_secs(20)).await.unwrap();
    }
    let group = format!("ankusa-test-{topic}");
    let consumer = crate::test_support::reader(brokers, topic, partitions, &group);
    let mut seen: Vec<Vec<Seen>> = (0..partitions).map(|_| Vec::new()).collect();
    let mut ended = vec![false; seen.len()];
    while ended.contains(&false) {
        let next = tokio::time::timeout(Duration::from_secs(20), consumer.recv()).await;
        let record = next.expect("timed out reading records").unwrap().detach();
        let partition = usize::try_from(record.partition()).unwrap();
        assert!(!ended[partition], "a record after the end: {record:?}");
        if record.key() == Some(END.as_bytes()) {
            ended[partition] = true;
        } else {
            seen[partition].push(Seen::of(&record));
        }
    }
    seen
}

/// The one partition that holds records, and its records; fails if several do.
fn one_partition(partitions: Vec<Vec<Seen>>) -> Vec<Seen> {
    let mut filled: Vec<Vec<Seen>> = partitions.into_iter().filter(|p| !p.is_empty()).collect();
    assert_eq!(filled.len(), 1, "records in several partitions: {filled:?}");
    filled.remove(0)
}

async fn broker_sink(tombstones: bool, topic: &str) -> (Broker, KafkaSink) {
    let broker = Broker::start();
    broker.create_topic(topic, PARTITIONS).await;
    let mut config = KafkaConfig::new(broker.address.clone(), topic);
    config.message_timeout = Duration::from_secs(20);
    config.tombstones = tombstones;
    let sink = KafkaSink::new(config).unwrap();
    (broker, sink)
}

fn created_updated_deleted() -> Vec<Delivery> {
    vec![
        change(1, "acme/r1", "created"),
        change(2, "acme/r1", "updated"),
        change(3, "acme/r1", "deleted"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_is_followed_by_a_tombstone_in_its_partition() {
    let topic = "ankusa-tombstones";
    let (broker, sink) = broker_sink(true, topic).await;

    let outcomes = sink.send(&created_updated_deleted()).await;

    assert_eq!(outcomes, vec![Outcome::Delivered; 3]);
    let records = one_partition(everything(&broker.address, topic, PARTITIONS).await);
    let briefs: Vec<_> = records.iter().map(Seen::brief).collect();
    assert_eq!(
        briefs,
        [
            Seen::event(1, "acme/r1", "created"),
            Seen::event(2, "acme/r1", "updated"),
            Seen::event(3, "acme/r1", "deleted"),
            Seen::tombstone("acme/r1"),
        ]
    );
    let types: Vec<Option<&str>> = records
        .iter()
        .map(|r| r.headers.get("ce_type").map(String::as_str))
        .collect();
    assert_eq!(
        types,
        [
            Some("io.ankusa.route.created"),
            Some("io.ankusa.route.updated"),
            Some("io.ankusa.route.deleted"),
            None,
        ]
    );
    let tombstone = &records[3];
    assert_eq!(tombstone.value, None, "a tombstone has no value");
    assert!(tombstone.headers.is_empty(), "{tombstone:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tombstones_a_delete_is_one_record() {
    let topic = "ankusa-no-tombstones";
    let (broker, sink) = broker_sink(false, topic).await;

    let outcomes = sink.send(&created_updated_deleted()).await;

    assert_eq!(outcomes, vec![Outcome::Delivered; 3]);
    let records = one_partition(everything(&broker.address, topic, PARTITIONS).await);
    let briefs: Vec<_> = records.iter().map(Seen::brief).collect();
    assert_eq!(
        briefs,
        [
            Seen::event(1, "acme/r1", "created"),
            Seen::event(2, "acme/r1", "updated"),
            Seen::event(3, "acme/r1", "deleted"),
        ]
    );
    assert!(records.iter().all(|r| r.value.is_some()));
}

/// Two attempts in flight at once, deletes of two keys among other events: each tombstone
/// comes right after its delete, before the key's next event, even one of the next attempt
/// (a re-create).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tombstone_comes_before_the_next_event_of_its_key() {
    let topic = "ankusa-tombstones-in-flight";
    let (broker, sink) = broker_sink(true, topic).await;
    let (a, b) = ("acme/a", "acme/b");

    let first = sink
        .submit(&[
            change(1, a, "created"),
            change(2, b, "created"),
            change(3, a, "deleted"),
            change(4, b, "updated"),
        ])
        .await;
    assert!(first.open);
    let second = sink
        .submit(&[change(5, a, "created"), change(6, b, "deleted")])
        .await;

    assert_eq!(first.outcomes.await, vec![Outcome::Delivered; 4]);
    assert_eq!(second.outcomes.await, vec![Outcome::Delivered; 2]);
    let partitions = everything(&broker.address, topic, PARTITIONS).await;
    let of_key = |key: &str| -> Vec<_> {
        let holding: Vec<&Vec<Seen>> = partitions
            .iter()
            .filter(|p| p.iter().any(|r| r.key.as_deref() == Some(key)))
            .collect();
        assert_eq!(holding.len(), 1, "{key} in several partitions");
        holding[0]
            .iter()
            .filter(|r| r.key.as_deref() == Some(key))
            .map(Seen::brief)
            .collect()
    };
    assert_eq!(
        of_key(a),
        [
            Seen::event(1, a, "created"),
            Seen::event(3, a, "deleted"),
            Seen::tombstone(a),
            Seen::event(5, a, "created"),
        ]
    );
    assert_eq!(
        of_key(b),
        [
            Seen::event(2, b, "created"),
            Seen::event(4, b, "updated"),
            Seen::event(6, b, "deleted"),
            Seen::tombstone(b),
        ]
    );
    assert_eq!(partitions.iter().map(Vec::len).sum::<usize>(), 8);
}

/// The broker confirms a delete's record and refuses its tombstone (each record is a
/// request of its own): the delete is a `Retry`, the event before it `Delivered`; the resend
/// writes the delete and its tombstone again.
#[tokio::test]
async fn a_refused_tombstone_makes_its_delete_a_retry() {
    let topic = "ankusa-tombstone-refused";
    let cluster = cluster(topic, 1);
    let mut config = config(&cluster, topic);
    config.tombstones = true;
    config
        .properties
        .insert("batch.num.messages".into(), "1".into());
    let sink = KafkaSink::new(config).unwrap();
    let ok = RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR;
    let refused = RDKafkaRespErr::RD_KAFKA_RESP_ERR_POLICY_VIOLATION;
    cluster.request_errors(RDKafkaApiKey::Produce, &[ok, ok, refused]);
    let key = "acme/r1";

    let outcomes = sink
        .send(&[change(1, key, "created"), change(2, key, "deleted")])
        .await;

    assert_eq!(outcomes[0], Outcome::Delivered);
    assert!(
        matches!(&outcomes[1], Outcome::Retry { after: None, .. }),
        "{outcomes:?}"
    );
    assert_eq!(
        sink.send(&[change(2, key, "deleted")]).await,
        vec![Outcome::Delivered]
    );
    let records = one_partition(everything(&cluster.bootstrap_servers(), topic, 1).await);
    let briefs: Vec<_> = records.iter().map(Seen::brief).collect();
    assert_eq!(
        briefs,
        [
            Seen::event(1, key, "created"),
            Seen::event(2, key, "deleted"),
            Seen::event(2, key, "deleted"),
            Seen::tombstone(key),
        ]
    );
}

/// An event with no partition key has no record a tombstone could compact away: none is
/// written.
#[tokio::test]
async fn a_delete_without_a_key_gets_no_tombstone() {
    let topic = "ankusa-tombstone-keyless";
    let cluster = cluster(topic, 1);
    let mut config = config(&cluster, topic);
    config.tombstones = true;
    let sink = KafkaSink::new(config).unwrap();
    let mut keyless = change(1, "acme/r1", "deleted");
    keyless.event.remove_extension("partitionkey");

    let outcomes = sink.send(&[keyless, change(2, "acme/r2", "deleted")]).await;

    assert_eq!(outcomes, vec![Outcome::Delivered; 2]);
    let partitions = everything(&cluster.bootstrap_servers(), topic, 1).await;
    let briefs: Vec<Brief> = partitions[0].iter().map(Seen::brief).collect();
    assert_eq!(
        briefs,
        [
            (None, Some(data(1, "acme/r1", "deleted")), event_id(1)),
            Seen::event(2, "acme/r2", "deleted"),
            Seen::tombstone("acme/r2"),
        ]
    );
}

#[test]
fn a_delete_is_delivered_only_when_both_records_are() {
    let retry = || Outcome::Retry {
        after: None,
        reason: "kafka_MsgTimedOut".into(),
    };
    let rejected = || Outcome::Rejected {
        reason: "kafka_InvalidRecord".into(),
    };
    let cases = [
        (None, Outcome::Delivered, Outcome::Delivered),
        (None, retry(), retry()),
        (
            Some(Outcome::Delivered),
            Outcome::Delivered,
            Outcome::Delivered,
        ),
        (Some(Outcome::Delivered), retry(), retry()),
        (Some(retry()), Outcome::Delivered, retry()),
        (Some(Outcome::Delivered), rejected(), rejected()),
        (Some(rejected()), Outcome::Delivered, rejected()),
        (Some(rejected()), retry(), retry()),
        (Some(retry()), rejected(), retry()),
    ];
    for (known, report, expected) in cases {
        let case = format!("{known:?} + {report:?}");
        assert_eq!(combine(known, report), expected, "{case}");
    }
}

#[test]
fn the_tombstones_key_is_a_bool_and_off_by_default() {
    let parse = |json: serde_json::Value| {
        serde_json::from_value::<crate::SinkConfig>(json).map_err(|e| e.to_string())
    };
    let base = serde_json::json!({"kind": "kafka", "brokers": "b:9092", "topic": "t"});
    let with = |value: serde_json::Value| {
        let mut json = base.clone();
        json["tombstones"] = value;
        parse(json)
    };
    let kafka = |config: crate::SinkConfig| match config {
        crate::SinkConfig::Kafka(kafka) => kafka.tombstones,
        other => panic!("not kafka: {other:?}"),
    };
    assert!(!kafka(parse(base.clone()).unwrap()));
    assert!(kafka(with(serde_json::json!(true)).unwrap()));
    assert!(!kafka(with(serde_json::json!(false)).unwrap()));
    for wrong in [serde_json::json!("yes"), serde_json::json!(1)] {
        let err = with(wrong.clone()).unwrap_err();
        assert!(err.contains("expected a boolean"), "{wrong}: {err}");
    }
    assert!(!KafkaConfig::new("b:9092", "t").tombstones);
}
