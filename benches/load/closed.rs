//! The closed-loop load: N connections, each with one request in flight, each sending its
//! next change as soon as the last one answered, for a fixed time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Barrier;

use crate::changes::{Conn, Kind};
use crate::cpu::{per_change, Cpu};
use crate::redis::Redis;
use crate::stats::{Failures, Point, Stages};
use crate::GENERATOR;

/// Changes of `kind` on `conns` connections to the node at `base` for `run_for`, from a
/// runtime of the load generator's own; with the CPU time of `server`, the node's Redis, where
/// it has one.
pub fn measure(
    runtime: &tokio::runtime::Runtime,
    base: &str,
    kind: Kind,
    conns: usize,
    run_for: Duration,
    server: Option<&Redis>,
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
        let server_before = server.and_then(Redis::cpu_ticks);
        let stages = Stages::now();
        let mut latencies = Vec::new();
        let mut failures = Failures::default();
        for t in tasks {
            let (l, f) = t.await.expect("a connection task");
            latencies.extend(l);
            failures.merge(f);
        }
        // The changes begun before the deadline, over the time they all took to answer.
        let elapsed = began.elapsed();
        let server_after = server.and_then(Redis::cpu_ticks);
        let stage_means = stages.means_since();
        let count = latencies.len();
        let mut point = Point::of(
            latencies,
            elapsed,
            (cpu, Cpu::now(Some(GENERATOR))),
            failures,
        );
        if let (Some(before), Some(after)) = (server_before, server_after) {
            point.redis_us = per_change(after.saturating_sub(before), count);
        }
        point.stages = stage_means;
        point
    })
}

/// Wait at the barrier, then hand back the deadline of the measurement.
async fn start_at(start: &Barrier, run_for: Duration) -> Instant {
    start.wait().await;
    Instant::now() + run_for
}

/// How long each turn has the node, in an interleaved measurement.
pub const SWITCH: Duration = Duration::from_millis(250);

/// One side of an interleaved measurement: changes of `kind` from the first `conns`
/// connections.
#[derive(Clone, Copy)]
pub struct Turn {
    pub kind: Kind,
    pub conns: usize,
}

impl Turn {
    /// How the report names the side: `route at 64`.
    pub fn name(self) -> String {
        format!("{} at {}", self.kind.name(), self.conns)
    }
}

/// Two sides taking turns of [`SWITCH`] on one node for `run_for` (rounded up to whole pairs
/// of turns). Each connection sends its subject's changes of the kind whose turn it is when it
/// sends, and waits out a turn it has no part in. So whatever the machine does meanwhile falls
/// on both sides alike, and their ratio holds from run to run where two points measured one
/// after the other need not. A side's rate is its changes begun in its turns over the time of
/// its turns. A turn begins behind the changes the turn before left in flight: a change begun
/// at the end of a turn counts for its own side, and with 64 connections on both sides about
/// as many do so for either. A turn of 1 connection after one of 64 waits for the 64's last
/// changes to drain (a few milliseconds of its 250), which lowers its rate by a few percent at
/// most. No CPU figure: the process's time is not split by side.
pub fn interleaved(
    runtime: &tokio::runtime::Runtime,
    base: &str,
    sides: [Turn; 2],
    run_for: Duration,
) -> [Point; 2] {
    let pairs = run_for.as_secs_f64() / (2.0 * SWITCH.as_secs_f64());
    let turns = 2 * (pairs.ceil() as u32).max(1);
    let conns = sides[0].conns.max(sides[1].conns);
    runtime.block_on(async {
        let start = Arc::new(Barrier::new(conns + 1));
        let mut tasks = Vec::with_capacity(conns);
        for c in 0..conns {
            let conn = Conn::new(base, sides[0].kind, c);
            let start = start.clone();
            tasks.push(tokio::spawn(async move {
                let mut failures = [Failures::default(), Failures::default()];
                // The connection's subject of each kind it changes, created once.
                for (k, side) in sides.iter().enumerate() {
                    let made_before = sides[..k]
                        .iter()
                        .any(|s| s.kind == side.kind && c < s.conns);
                    if c < side.conns && !made_before {
                        if let Err(e) = conn.create_as(side.kind).await {
                            failures[k].add(e);
                        }
                    }
                }
                // Every connection starts its clock as the barrier lets them all go: the
                // turns agree to within microseconds.
                start.wait().await;
                let t0 = tokio::time::Instant::now();
                let mut latencies = [Vec::new(), Vec::new()];
                // Per kind, the next change of the connection's subject: a kind on both sides
                // carries on where the other side left it, so every change is a real one.
                let mut next = [1u64; 3];
                loop {
                    let sent = tokio::time::Instant::now();
                    let turn = ((sent - t0).as_secs_f64() / SWITCH.as_secs_f64()) as u32;
                    if turn >= turns {
                        break;
                    }
                    let k = (turn % 2) as usize;
                    let side = sides[k];
                    if c >= side.conns {
                        tokio::time::sleep_until(t0 + SWITCH * (turn + 1)).await;
                        continue;
                    }
                    let i = &mut next[side.kind as usize];
                    match conn.change_as(side.kind, *i).await {
                        Ok(_) => latencies[k].push(sent.elapsed()),
                        Err(e) => failures[k].add(e),
                    }
                    *i += 1;
                }
                (latencies, failures)
            }));
        }
        start.wait().await;
        let mut latencies = [Vec::new(), Vec::new()];
        let mut failures = [Failures::default(), Failures::default()];
        for t in tasks {
            let (l, f) = t.await.expect("a connection task");
            for ((all, mine), (fails, my_fails)) in
                latencies.iter_mut().zip(l).zip(failures.iter_mut().zip(f))
            {
                all.extend(mine);
                fails.merge(my_fails);
            }
        }
        let each = SWITCH * (turns / 2);
        let [a, b] = latencies;
        let [fa, fb] = failures;
        [
            Point::of(a, each, (None, None), fa),
            Point::of(b, each, (None, None), fb),
        ]
    })
}
