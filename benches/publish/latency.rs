//! Latency: commit to confirmed (the sink's persisted position covers the row) at a steady
//! 1,000 changes/s, through the Kafka sink, in three stages, so that a tail is told where it
//! comes from: the commit itself (its synced batch), the sink's delivery report (the
//! publisher's wake-up, the read, the producer's linger and the broker's ack), and the
//! position's synced write that confirms it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ankusa::lifecycle::{Publisher, PublisherOptions, SinkSpec};
use ankusa_sinks::{KafkaConfig, KafkaSink, RetryPolicy};
use tokio_util::sync::CancellationToken;

use crate::backlog::{commit_one, trail};
use crate::env::in_flight;
use crate::TOPIC;

/// Percentiles of one stage, milliseconds from the commit's start.
#[derive(Debug, Clone, Copy)]
pub struct Stage {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Stage {
    fn of(mut ms: Vec<f64>) -> Stage {
        ms.sort_by(|a, b| a.total_cmp(b));
        let pct = |p: f64| crate::figures::percentile(&ms, p).unwrap_or(f64::NAN);
        Stage {
            p50: pct(0.50),
            p99: pct(0.99),
            max: *ms.last().unwrap(),
        }
    }
}

/// One run's stages: committed, delivered (the sink's report), confirmed (the position).
#[derive(Debug, Clone, Copy)]
pub struct Stages {
    pub committed: Stage,
    pub delivered: Stage,
    pub confirmed: Stage,
}

pub async fn latency(brokers: &str) -> Stages {
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
    let (starts_tx, mut starts_rx) = tokio::sync::mpsc::unbounded_channel::<(u64, Instant, f64)>();
    let watcher = {
        let publisher = publisher.clone();
        tokio::spawn(async move {
            let (mut committed, mut delivered, mut confirmed) = (vec![], vec![], vec![]);
            // (seq, start, delivered at): confirmed follows delivered.
            let mut waiting: std::collections::VecDeque<(u64, Instant, Option<f64>)> =
                Default::default();
            loop {
                while let Ok((seq, t, commit_ms)) = starts_rx.try_recv() {
                    committed.push(commit_ms);
                    waiting.push_back((seq, t, None));
                }
                waiting.make_contiguous().sort_by_key(|w| w.0);
                let status = publisher.statuses()[0].clone();
                // One sink, one event per row, every seq flagged: the count delivered (the
                // warm-up's included) is the last seq delivered.
                for w in waiting.iter_mut() {
                    if w.2.is_none() && w.0 <= status.delivered {
                        w.2 = Some(w.1.elapsed().as_secs_f64() * 1000.0);
                    }
                }
                while waiting
                    .front()
                    .is_some_and(|(seq, _, d)| d.is_some() && *seq <= status.position)
                {
                    let (_, t, d) = waiting.pop_front().unwrap();
                    delivered.push(d.unwrap());
                    confirmed.push(t.elapsed().as_secs_f64() * 1000.0);
                }
                if starts_rx.is_closed() && waiting.is_empty() {
                    return Stages {
                        committed: Stage::of(committed),
                        delivered: Stage::of(delivered),
                        confirmed: Stage::of(confirmed),
                    };
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
            let _ = tx.send((seq, started, started.elapsed().as_secs_f64() * 1000.0));
        });
    }
    drop(starts_tx);
    let stages = watcher.await.unwrap();
    stop.cancel();
    publisher.join().await;
    trail.shutdown().await;
    stages
}
