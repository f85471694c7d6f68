//! The closed-loop load: N connections, each with one request in flight, each sending its
//! next change as soon as the last one answered, for a fixed time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Barrier;

use crate::changes::{Conn, Kind};
use crate::cpu::Cpu;
use crate::stats::{Failures, Point};
use crate::GENERATOR;

/// Changes of `kind` on `conns` connections to the node at `base` for `run_for`, from a
/// runtime of the load generator's own.
pub fn measure(
    runtime: &tokio::runtime::Runtime,
    base: &str,
    kind: Kind,
    conns: usize,
    run_for: Duration,
) -> Point {
    runtime.block_on(async {
        // Every connection creates its subject first (and so opens its connection), then
        // all start at once.
        let start = Arc::new(Barrier::new(conns + 1));
        let mut tasks = Vec::with_capacity(conns);
        for c in 0..conns {
            let conn = Conn::new(base, kind, c);
            let start = start.clone();
            tasks.push(tokio::spawn(async move {
                let mut failures = Failures::default();
                if let Err(e) = conn.create().await {
                    failures.add(e);
                }
                let deadline = start_at(&start, run_for).await;
                let mut latencies = Vec::new();
                let mut i = 1;
                while Instant::now() < deadline {
                    let began = Instant::now();
                    match conn.change(i).await {
                        Ok(_) => latencies.push(began.elapsed()),
                        Err(e) => failures.add(e),
                    }
                    i += 1;
                }
                (latencies, failures)
            }));
        }
        start.wait().await;
        let began = Instant::now();
        let cpu = Cpu::now(Some(GENERATOR));
        let mut latencies = Vec::new();
        let mut failures = Failures::default();
        for t in tasks {
            let (l, f) = t.await.expect("a connection task");
            latencies.extend(l);
            failures.merge(f);
        }
        // The changes begun before the deadline, over the time they all took to answer.
        let elapsed = began.elapsed();
        Point::of(
            latencies,
            elapsed,
            (cpu, Cpu::now(Some(GENERATOR))),
            failures,
        )
    })
}

/// Wait at the barrier, then hand back the deadline of the measurement.
async fn start_at(start: &Barrier, run_for: Duration) -> Instant {
    start.wait().await;
    Instant::now() + run_for
}
