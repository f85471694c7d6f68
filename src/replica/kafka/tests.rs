//! Reading records in both modes, and a replica file of another topic.

use rdkafka::message::{Header, OwnedHeaders, OwnedMessage, Timestamp};

use super::*;

fn record(value: Option<&[u8]>, headers: &[(&str, &str)]) -> OwnedMessage {
    let mut owned = OwnedHeaders::new();
    for (key, value) in headers {
        owned = owned.insert(Header {
            key,
            value: Some(*value),
        });
    }
    let headers = (!headers.is_empty()).then_some(owned);
    let key = Some(b"acme/routes/r1".to_vec());
    OwnedMessage::new(
        value.map(<[u8]>::to_vec),
        key,
        "t".into(),
        Timestamp::NotAvailable,
        0,
        7,
        headers,
    )
}

#[test]
fn records_are_read_in_both_modes_and_tombstones_are_none() {
    let binary = record(
        Some(br#"{"entity":{"id":"r1"}}"#),
        &[
            ("ce_specversion", "1.0"),
            ("ce_id", "e1"),
            ("ce_type", "io.ankusa.route.created"),
            ("ce_source", "urn:n"),
            ("content-type", "application/json"),
            ("ce_subjectversion", "00000000000000000003"),
        ],
    );
    let event = record_event(&binary).unwrap().unwrap();
    assert_eq!(cloudevents::AttributesReader::id(&event), "e1");
    assert_eq!(
        event.extension("subjectversion").unwrap().to_string(),
        "00000000000000000003"
    );
    let structured = record(
        Some(br#"{"specversion":"1.0","id":"e2","type":"t","source":"urn:n","data":{"a":1}}"#),
        &[("content-type", "application/cloudevents+json")],
    );
    let event = record_event(&structured).unwrap().unwrap();
    assert_eq!(cloudevents::AttributesReader::id(&event), "e2");
    assert_eq!(record_event(&record(None, &[])).unwrap(), None);
    let e = record_event(&record(Some(b"x"), &[])).unwrap_err();
    assert!(!e.is_empty());
    let e = record_event(&record(
        Some(b"{"),
        &[("content-type", "application/cloudevents+json")],
    ));
    assert!(e.is_err());
}

/// Options of a follower of topic `b` into `out`, on a broker that is not there.
fn options_b(out: &std::path::Path) -> KafkaOptions {
    KafkaOptions {
        brokers: "127.0.0.1:1".into(),
        topic: "b".into(),
        group: "g".into(),
        out: out.to_owned(),
        batch_events: 1,
        batch_interval: Duration::from_millis(10),
        until_caught_up: true,
        start: Default::default(),
    }
}

#[tokio::test]
async fn a_file_of_another_topic_or_of_a_watcher_is_refused_before_any_connection() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("replica.json");
    let mut other = ReplicaFile::default();
    other.progress.kafka = Some(KafkaProgress {
        topic: "a".into(),
        next: [(0, 5)].into(),
    });
    file::save(&out, &other).unwrap();
    let e = follow(options_b(&out), Metrics::new(), std::future::pending())
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "replica file {} follows kafka topic a, not kafka topic b: use another --out",
            out.display()
        )
    );
    assert_eq!(file::load(&out).unwrap(), Some(other), "left as it was");
    // A file kept by `follow http` holds positions in nodes' events, not offsets.
    let mut watched = ReplicaFile::default();
    let position = file::WatchPosition {
        position: 7,
        incarnation: "0b6e4a2c-0000-4000-8000-000000000000".into(),
    };
    watched.progress.http = [("http://node:8080".to_owned(), position)].into();
    file::save(&out, &watched).unwrap();
    let e = follow(options_b(&out), Metrics::new(), std::future::pending())
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "replica file {} follows the events of http://node:8080 over http, not kafka topic \
             b: use another --out",
            out.display()
        )
    );
    assert_eq!(file::load(&out).unwrap(), Some(watched), "left as it was");
}
