//! The trail the benchmarks drain: a fresh store, a backlog committed from 64 tasks, a
//! drain through a sink, and the events the publisher would build, for the baselines.

use std::sync::Arc;
use std::time::Duration;

use ankusa::audit::{Change, CommitError, Context, Limits, SystemClock, Trail, TrailOptions};
use ankusa::lifecycle::{outbox, Publisher, PublisherOptions, SinkSpec};
use ankusa::store::{Cf, Store};
use ankusa_sinks::{RetryPolicy, Sink};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::clock::{Clock, Run};
use crate::env::in_flight;

/// A trail on a fresh store with `sinks` configured.
pub fn trail(dir: &std::path::Path, sinks: &[&str]) -> Trail {
    let store = Store::open(dir).unwrap();
    let options = TrailOptions {
        sinks: sinks.iter().map(|s| s.to_string()).collect(),
        // The backlogs here are built on purpose: lift the outbox ceiling above them.
        limits: Limits {
            outbox_max_backlog: 10_000_000,
            ..Limits::default()
        },
        ..TrailOptions::default()
    };
    Trail::start(store, options, Arc::new(SystemClock)).unwrap()
}

pub async fn commit_one(trail: &Trail, key: String) -> u64 {
    trail
        .commit(Context::new("bench", None, None), move |tx| {
            let subject = json!({"id": key, "tenant": "t1", "kind": "http", "revision": 1,
                                 "config": {"url": "https://example.invalid/ingest", "timeout_ms": 5000}});
            tx.put_json(Cf::Sources, format!("t1/{key}").into_bytes(), &subject)?;
            let change = Change::new("source.create", format!("sources/{key}"))
                .tenant("t1")
                .states(None, Some(subject.clone()))
                .revision(1)
                .entity(subject);
            Ok::<_, CommitError<()>>((change, ()))
        })
        .await
        .unwrap()
        .seq
}

/// Commit `n` changes from 64 concurrent committers.
pub async fn fill(trail: &Trail, n: u64) {
    let per = n.div_ceil(64);
    let mut tasks = vec![];
    for c in 0..64u64 {
        let trail = trail.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                if c * per + i < n {
                    commit_one(&trail, format!("s{c}-{i}")).await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// Drain the whole backlog of `trail` through `sink`: its rate and CPU time per event.
pub async fn drain(trail: &Trail, sink: Arc<dyn Sink>, name: &str) -> Run {
    let last = *trail.committed().borrow();
    let stop = CancellationToken::new();
    let spec = SinkSpec {
        name: name.into(),
        sink,
        retry: RetryPolicy::default(),
    };
    let options = PublisherOptions {
        source: "urn:ankusa:bench".into(),
        batch: std::env::var("ANKUSA_BENCH_BATCH")
            .ok()
            .and_then(|b| b.parse().ok())
            .unwrap_or(1000),
        idle: Duration::from_millis(50),
        in_flight: in_flight(),
        max_dead_letters: 100_000,
    };
    // Start from a store at rest: the compaction a fill leaves behind is not the publisher's.
    let store = trail.store().clone();
    ankusa::store::blocking::run("a quiesce", move || store.quiesce())
        .await
        .unwrap()
        .unwrap();
    let clock = Clock::start();
    let publisher = Publisher::start(trail.clone(), vec![spec], options, stop.clone())
        .await
        .unwrap();
    while publisher.statuses()[0].position < last {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let run = clock.stop(last);
    stop.cancel();
    publisher.join().await;
    run
}

/// The events of the whole backlog, built exactly as the publisher builds them.
pub fn events_of(trail: &Trail) -> Vec<ankusa_sinks::Event> {
    let mut events = vec![];
    build_events(trail, 0, usize::MAX, &mut events);
    events
}

/// Read up to `limit` flagged rows after `after` and build their events into `events`, as the
/// publisher's reader does; how far the read went.
pub fn build_events(
    trail: &Trail,
    after: u64,
    limit: usize,
    events: &mut Vec<ankusa_sinks::Event>,
) -> outbox::Visited {
    outbox::visit(trail.store(), after, limit, |row, entity| {
        events.push(
            ankusa::lifecycle::event::build(&row, entity, trail.history(), "urn:ankusa:bench")
                .unwrap(),
        )
    })
    .unwrap()
}
