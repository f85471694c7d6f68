//! A publisher that stops cleanly, a file sink and the events it wrote, and the order a
//! downstream consumer applies them in.

use std::collections::HashMap;
use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ankusa::audit::Trail;
use ankusa::lifecycle::{Publisher, PublisherOptions, SinkSpec};
use ankusa_sinks::{FileConfig, FileSink, RetryPolicy};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::eventually;

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
        max_dead_letters: 100_000,
    };
    let publisher = Running::start(trail, vec![file_sink(events)], options).await;
    let published = async || publisher.statuses()[0].position >= last;
    eventually("publication", Duration::from_secs(60), published).await;
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
