//! One drain, or its baseline alone, in a process of its own on a store filled by `--fill`:
//! for a profiler.

use std::sync::Arc;
use std::time::Instant;

use ankusa_sinks::{KafkaConfig, KafkaSink, WebhookConfig, WebhookSink};
use rdkafka::mocking::MockCluster;

use crate::backlog::{build_events, drain, trail};
use crate::runtime;
use crate::webhook::{receiver, BareWebhook};
use crate::{SECRET, TOPIC};

/// Drain a store filled by `--fill` to a Kafka MockCluster and print the rate: the drain
/// alone, in a process of its own, for a profiler.
pub fn drain_kafka_process(store: &str) {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, 8, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let runtime = runtime();
    runtime.block_on(async {
        let trail = trail(std::path::Path::new(store), &["kafka"]);
        let sink = KafkaSink::new(KafkaConfig::new(&brokers, TOPIC)).unwrap();
        let run = drain(&trail, Arc::new(sink), "kafka").await;
        run.print("kafka drain");
        trail.shutdown().await;
    });
}

/// Read a store filled by `--fill` and build its events, pages of 1000 as the publisher does,
/// on this thread alone, five times; print the fastest pass per event: the publisher's own
/// work per event, apart from any sink.
pub fn read_process(store: &str) {
    let runtime = runtime();
    runtime.block_on(async {
        let trail = trail(std::path::Path::new(store), &[]);
        trail.store().quiesce().unwrap();
        let mut best = f64::MAX;
        for _ in 0..5 {
            let started = Instant::now();
            let (mut after, mut events) = (0, 0usize);
            loop {
                let mut page = Vec::with_capacity(1000);
                let visited = build_events(&trail, after, 1000, &mut page);
                events += page.len();
                match visited.last {
                    Some(last) if visited.entities == 1000 => after = last,
                    _ => break,
                }
            }
            best = best.min(started.elapsed().as_secs_f64() * 1e6 / events as f64);
        }
        println!("read and build: {best:.2} us per event");
        trail.shutdown().await;
    });
}

/// Drain a store filled by `--fill` to a webhook receiver on loopback and print the rate.
pub fn drain_webhook_process(store: &str) {
    let runtime = runtime();
    runtime.block_on(async {
        let url = receiver().await;
        let trail = trail(std::path::Path::new(store), &["hook"]);
        let config = WebhookConfig::new(url, vec![SECRET.into()]);
        let sink = WebhookSink::new(config).unwrap();
        let run = drain(&trail, Arc::new(sink), "hook").await;
        run.print("webhook drain");
        trail.shutdown().await;
    });
}

/// Send the requests of a store filled by `--fill` with the bare reqwest loop, to a webhook
/// receiver on loopback, and print the rate: the baseline of `--drain-webhook`, in a process
/// of its own, for a profiler.
pub fn bare_webhook_process(store: &str) {
    let runtime = runtime();
    runtime.block_on(async {
        let url = receiver().await;
        let trail = trail(std::path::Path::new(store), &[]);
        let bare = BareWebhook::new(&trail, &url);
        let concurrency = WebhookConfig::new(url, vec![SECRET.into()]).max_in_flight;
        let run = bare.send(concurrency).await;
        run.print("bare webhook");
        trail.shutdown().await;
    });
}
