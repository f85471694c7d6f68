//! Helpers for the lifecycle tests: a webhook receiver whose answer a test can change
//! mid-run, a publisher that stops cleanly, a Kafka reader, and a file sink with what it
//! wrote.
//!
//! Included with `#[path = "common/lifecycle.rs"] mod lifecycle_support;`.
#![allow(dead_code)]

use std::collections::HashMap;
use std::ops::Deref;
use std::path::Path;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ankusa::audit::Trail;
use ankusa::lifecycle::{Publisher, PublisherOptions, SinkSpec};
use ankusa_sinks::{FileConfig, FileSink, RetryPolicy};
use axum::http::{HeaderMap, StatusCode};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{BorrowedMessage, Headers};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// A webhook receiver on 127.0.0.1:0 answering with the status the test sets; it records
/// `(webhook-id, ce-sequence)` of every event it accepted (answered 2xx).
#[derive(Clone, Default)]
pub struct Receiver {
    /// The status it answers with.
    pub status: Arc<AtomicU16>,
    /// What it accepted, in arrival order.
    pub received: Arc<Mutex<Vec<(String, String)>>>,
}

impl Receiver {
    /// Start a receiver answering `status`; returns it and its URL.
    pub async fn start(status: u16) -> (Receiver, String) {
        let receiver = Receiver::default();
        receiver.status.store(status, Ordering::SeqCst);
        let state = receiver.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap| {
                let state = state.clone();
                async move {
                    let code = state.status.load(Ordering::SeqCst);
                    if (200..300).contains(&code) {
                        let h = |n: &str| header(&headers, n);
                        let entry = (h("webhook-id"), h("ce-sequence"));
                        state.received.lock().unwrap().push(entry);
                    }
                    StatusCode::from_u16(code).unwrap()
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (receiver, url)
    }

    /// Answer `status` from now on.
    pub fn answer(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }

    /// The seqs accepted, in arrival order.
    pub fn sequences(&self) -> Vec<u64> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .map(|(_, s)| s.parse().unwrap())
            .collect()
    }

    /// The webhook ids accepted, in arrival order.
    pub fn ids(&self) -> Vec<String> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .map(|(id, _)| id.clone())
            .collect()
    }
}

fn header(headers: &HeaderMap, name: &str) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

/// A running publisher that the test stops explicitly.
pub struct Running {
    publisher: Publisher,
    shutdown: CancellationToken,
}

impl Running {
    /// Start the publisher on `trail` with `sinks`.
    pub async fn start(trail: &Trail, sinks: Vec<SinkSpec>, options: PublisherOptions) -> Running {
        let shutdown = CancellationToken::new();
        let publisher = Publisher::start(trail.clone(), sinks, options, shutdown.clone())
            .await
            .unwrap();
        Running {
            publisher,
            shutdown,
        }
    }

    /// Stop every loop and wait for them.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.publisher.join().await;
    }
}

impl Deref for Running {
    type Target = Publisher;
    fn deref(&self) -> &Publisher {
        &self.publisher
    }
}

/// Poll `done` every 20 ms for up to 60 s (a bound for a loaded machine; it returns as soon
/// as `done`).
pub async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

/// A consumer of every partition of `topic` from the beginning.
pub fn kafka_reader(brokers: &str, topic: &str, partitions: i32) -> StreamConsumer {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", format!("reader-{topic}"))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions {
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).unwrap();
    consumer
}

/// A record's headers, by name.
pub fn kafka_headers(m: &BorrowedMessage<'_>) -> HashMap<String, String> {
    use rdkafka::Message;
    m.headers()
        .map(|hs| {
            hs.iter()
                .map(|h| {
                    (
                        h.key.to_owned(),
                        String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A file sink named `file` writing to `path`, retrying quickly.
pub fn file_sink(path: &Path) -> SinkSpec {
    let retry = RetryPolicy {
        initial: Duration::from_millis(5),
        max: Duration::from_millis(50),
        max_retry_after: Duration::from_millis(50),
    };
    let config = FileConfig {
        path: path.to_owned(),
        retry,
    };
    SinkSpec {
        name: "file".into(),
        sink: Arc::new(FileSink::new(config).unwrap()),
        retry,
    }
}

/// Publish every flagged row up to `last` to the file sink `events` (small batches), then
/// stop the publisher.
pub async fn publish_to(trail: &Trail, events: &Path, last: u64) {
    let options = PublisherOptions {
        source: "urn:ankusa:test".into(),
        batch: 4,
        idle: Duration::from_millis(20),
        in_flight: 4,
    };
    let publisher = Running::start(trail, vec![file_sink(events)], options).await;
    wait_for("publication", || publisher.statuses()[0].position >= last).await;
    assert_eq!(
        publisher.statuses()[0].position,
        last,
        "published up to {last}"
    );
    publisher.stop().await;
}

/// Publish every row committed so far to the file sink `events`, then stop the publisher.
pub async fn publish_all(trail: &Trail, events: &Path) {
    let last = *trail.committed().borrow();
    publish_to(trail, events, last).await;
}

/// The events a file sink wrote to `path`, in order.
pub fn read_events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// An event's seq, from its `sequence` extension.
pub fn seq_of(event: &Value) -> u64 {
    event["sequence"].as_str().unwrap().parse().unwrap()
}

/// The events a downstream consumer applies, in the order it applies them: it drops repeated
/// ids (checking that a repeat is the same event), orders incarnations as it first saw them
/// and events by (incarnation, seq), and on `instance.restored` forgets what the lost store
/// did after the restored seq.
pub fn consumer_order(events: &[Value]) -> Vec<&Value> {
    let mut by_id: HashMap<&str, &Value> = HashMap::new();
    let mut incarnations: Vec<&str> = Vec::new();
    let mut unique = Vec::new();
    for e in events {
        let id = e["id"].as_str().unwrap();
        match by_id.get(id) {
            Some(first) => assert_eq!(*first, e, "a repeated id is the same event"),
            None => {
                by_id.insert(id, e);
                unique.push(e);
            }
        }
        let incarnation = e["incarnation"].as_str().unwrap();
        if !incarnations.contains(&incarnation) {
            incarnations.push(incarnation);
        }
    }
    unique.sort_by_key(|e| {
        let incarnation = e["incarnation"].as_str().unwrap();
        let rank = incarnations.iter().position(|i| *i == incarnation).unwrap();
        (rank, seq_of(e))
    });
    let mut applied: Vec<&Value> = Vec::new();
    for e in unique {
        if e["type"] == "io.ankusa.instance.restored" {
            let restored = e["data"]["entity"]["restored_seq"].as_u64().unwrap();
            applied.retain(|a| seq_of(a) <= restored);
        } else {
            applied.push(e);
        }
    }
    applied
}
