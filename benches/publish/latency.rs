//! Latency: commit to confirmed (the sink's persisted position covers the row) at a steady
//! 1,000 changes/s, through the Kafka sink.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ankusa::lifecycle::{Publisher, PublisherOptions, SinkSpec};
use ankusa_sinks::{KafkaConfig, KafkaSink, RetryPolicy};
use tokio_util::sync::CancellationToken;

use crate::backlog::{commit_one, trail};
use crate::{in_flight, TOPIC};

pub async fn latency(brokers: &str) -> (f64, f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    let trail = trail(dir.path(), &["kafka"]);
    let sink = KafkaSink::new(KafkaConfig::new(brokers, TOPIC)).unwrap();
    let stop = CancellationToken::new();
    let spec = SinkSpec {
        name: "kafka".into(),
        sink: Arc::new(sink),
        retry: RetryPolicy::default(),
    };
    let options = PublisherOptions {
        source: "urn:ankusa:bench".into(),
        batch: 1000,
        idle: Duration::from_secs(1),
        in_flight: in_flight(),
        max_dead_letters: 100_000,
    };
    let publisher = Arc::new(
        Publisher::start(trail.clone(), vec![spec], options, stop.clone())
            .await
            .unwrap(),
    );
    // Warm up the producer's connection.
    commit_one(&trail, "warmup".into()).await;
    while publisher.statuses()[0].position < 1 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (starts_tx, mut starts_rx) = tokio::sync::mpsc::unbounded_channel::<(u64, Instant)>();
    let watcher = {
        let publisher = publisher.clone();
        tokio::spawn(async move {
            let mut latencies = vec![];
            let mut waiting: std::collections::VecDeque<(u64, Instant)> = Default::default();
            loop {
                while let Ok(s) = starts_rx.try_recv() {
                    waiting.push_back(s);
                }
                let position = publisher.statuses()[0].position;
                while waiting.front().is_some_and(|(seq, _)| *seq <= position) {
                    let (_, t) = waiting.pop_front().unwrap();
                    latencies.push(t.elapsed().as_secs_f64() * 1000.0);
                }
                if starts_rx.is_closed() && waiting.is_empty() {
                    return latencies;
                }
                tokio::time::sleep(Duration::from_micros(100)).await;
            }
        })
    };
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    for i in 0..5000 {
        tick.tick().await;
        let (trail, tx) = (trail.clone(), starts_tx.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let seq = commit_one(&trail, format!("l{i}")).await;
            let _ = tx.send((seq, started));
        });
    }
    drop(starts_tx);
    let mut latencies = watcher.await.unwrap();
    stop.cancel();
    publisher.join().await;
    trail.shutdown().await;
    latencies.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    (pct(0.50), pct(0.99), *latencies.last().unwrap())
}
