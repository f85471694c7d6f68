//! What both parts share: a publisher running on one sink for the whole part, route creates
//! from 64 tasks through `Routes`, and the wait for the sink to confirm a row.

use std::sync::Arc;
use std::time::Duration;

use ankusa::audit::{Context, Trail};
use ankusa::lifecycle::{Publisher, PublisherOptions, SinkSpec};
use ankusa::subjects::routes::{NewRoute, Routes};
use ankusa_sinks::{RetryPolicy, Sink};
use serde_json::Map;
use tokio_util::sync::CancellationToken;

use crate::env::in_flight;

/// Concurrent committers of the route creates.
pub const TASKS: u64 = 64;

/// A publisher of `trail` to `sink` (configured in the trail as `name`), and its stop.
pub struct Running {
    pub publisher: Arc<Publisher>,
    stop: CancellationToken,
}

impl Running {
    pub async fn start(trail: &Trail, name: &str, sink: Arc<dyn Sink>) -> Running {
        let stop = CancellationToken::new();
        let spec = SinkSpec {
            name: name.into(),
            sink,
            retry: RetryPolicy::default(),
        };
        let options = PublisherOptions {
            source: "urn:ankusa:bench".into(),
            batch: 1000,
            // A wake-up after each commit is the publisher's usual path; the idle poll only
            // bounds a missed one.
            idle: Duration::from_millis(50),
            in_flight: in_flight(),
            max_dead_letters: 100_000,
        };
        let publisher = Publisher::start(trail.clone(), vec![spec], options, stop.clone())
            .await
            .unwrap();
        Running {
            publisher: Arc::new(publisher),
            stop,
        }
    }

    /// Wait until the sink's persisted position covers row `seq`.
    pub async fn confirmed(&self, seq: u64) {
        loop {
            if self.publisher.statuses()[0].position >= seq {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    pub async fn stop(self) {
        self.stop.cancel();
        self.publisher.join().await;
    }
}

/// Create routes `r0..r{n-1}` of tenant `t1` from [`TASKS`] tasks; the last row committed.
pub async fn create_routes(routes: &Routes, trail: &Trail, n: u64) -> u64 {
    let per = n.div_ceil(TASKS);
    let mut tasks = Vec::with_capacity(TASKS as usize);
    for t in 0..TASKS {
        let routes = routes.clone();
        tasks.push(tokio::spawn(async move {
            for i in (t * per..(t + 1) * per).take_while(|i| *i < n) {
                let route = NewRoute {
                    id: format!("r{i}"),
                    source: "s1".into(),
                    destination: format!("https://example.invalid/ingest/{i}"),
                    filter: Map::new(),
                    enabled: true,
                };
                routes
                    .create(Context::new("bench", None, None), "t1".into(), route)
                    .await
                    .unwrap_or_else(|e| panic!("route r{i} was not created: {e:?}"));
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let last = *trail.committed().borrow();
    last
}
