//! The changes the watchers see: route changes through the admin API (memory route store),
//! one route per connection as the load bench makes them (`benches/load/changes.rs`), sent
//! at a steady rate (open loop) or as fast as the node answers (closed loop).
//!
//! Open loop as the load bench's Kafka latency: connection k sends its change j at
//! `t0 + (j * n + k) / rate` whether or not the one before answered (to tokio's 1 ms timer),
//! so a node that falls behind shows it in the latencies instead of slowing the load.
//! Each change notes the instant just before its request and the instant of its answer: the
//! commit lies between the two, so they bound the time from the commit to a watcher's event.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::changes::{self, Conn, Kind};
use crate::stats::Failures;

/// A change's `i` (its route's new destination) for the warm-up changes: never one the
/// loads reach, so each is a real change.
const WARM: u64 = 1 << 40;

/// One change that answered.
#[derive(Clone, Copy)]
pub struct Sent {
    /// Its row's seq (the answer's `X-Audit-Seq`).
    pub seq: u64,
    /// Just before its request.
    pub sent: Instant,
    /// When its answer was read.
    pub answered: Instant,
}

/// `n` connections, each with its route created; the last seq their creates wrote.
pub async fn connect(base: &str, n: usize, failures: &mut Failures) -> (Vec<Arc<Conn>>, u64) {
    let conns: Vec<Arc<Conn>> = (0..n)
        .map(|c| Arc::new(Conn::new(base, Kind::Route, c)))
        .collect();
    let created = futures::future::join_all(conns.iter().map(|c| c.create())).await;
    let mut last = 0;
    for c in created {
        match c {
            Ok(seq) => last = last.max(seq),
            Err(e) => failures.add(e),
        }
    }
    (conns, last)
}

/// One more change on `conn` (its `k`-th warm-up), to see the watchers have it: its seq.
pub async fn warm_up(conn: &Conn, k: u64) -> Result<u64, String> {
    conn.change(WARM + k).await
}

/// Changes at `rate`/s for `run_for` over `conns`; each answer's seq also goes into
/// `latest` (the highest answered so far, for a sampler of the watchers' lag).
pub async fn paced(
    conns: &[Arc<Conn>],
    rate: f64,
    run_for: Duration,
    latest: &Arc<AtomicU64>,
) -> (Vec<Sent>, Failures) {
    let latest = latest.clone();
    let track = move |p: &changes::Paced| {
        latest.fetch_max(p.seq, Ordering::Relaxed);
    };
    let (answered, _, failures) = changes::paced(conns, rate, run_for, track).await;
    let mut sent: Vec<Sent> = answered
        .iter()
        .map(|p| Sent {
            seq: p.seq,
            sent: p.sent,
            answered: p.answered,
        })
        .collect();
    sent.sort_unstable_by_key(|s| s.seq);
    (sent, failures)
}

/// Changes as fast as the node answers them, one in flight per connection, until
/// `deadline` or until `most` were begun, whichever comes first.
pub async fn closed(conns: &[Arc<Conn>], deadline: Instant, most: u64) -> (Vec<Sent>, Failures) {
    let begun = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = conns
        .iter()
        .map(|conn| {
            let (conn, begun) = (conn.clone(), begun.clone());
            tokio::spawn(async move {
                let (mut sent, mut failures) = (Vec::new(), Failures::default());
                let mut i = 1;
                while Instant::now() < deadline && begun.fetch_add(1, Ordering::Relaxed) < most {
                    let before = Instant::now();
                    match conn.change(i).await {
                        Ok(seq) => sent.push(Sent {
                            seq,
                            sent: before,
                            answered: Instant::now(),
                        }),
                        Err(e) => failures.add(e),
                    }
                    i += 1;
                }
                (sent, failures)
            })
        })
        .collect();
    gather(tasks).await
}

/// Every connection's changes, in seq order, and failures.
async fn gather(
    tasks: Vec<tokio::task::JoinHandle<(Vec<Sent>, Failures)>>,
) -> (Vec<Sent>, Failures) {
    let (mut all, mut failures) = (Vec::new(), Failures::default());
    for t in tasks {
        let (sent, f) = t.await.expect("a connection's task");
        all.extend(sent);
        failures.merge(f);
    }
    all.sort_unstable_by_key(|s| s.seq);
    (all, failures)
}
