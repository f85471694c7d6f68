//! Part 3: the node's peak RSS with many watchers connected while changes flow, beside the
//! same node idle.
//!
//! The node runs as a process of its own (`process.rs`), so its RSS is its own. A phase, on
//! a fresh node and store:
//!
//! 1. idle: the node ready and settled for a second, before any change (`VmRSS`);
//! 2. fill: [`FILL`] route changes as fast as the node takes them, watched by one stream.
//!    The watchers' tail holds the newest 16,384 events (`lifecycle/watch/tail.rs`), built
//!    only while someone watches: a node that has been watched for a while holds that many,
//!    so the figure is taken with the tail full, not after a few seconds of a young node;
//! 3. flow: W streams connect at the newest position and have a warm-up change (caught
//!    up), the first stream leaves, and route changes go at a steady rate (open loop, 64
//!    connections) for the run's time; every watcher must then have every event of it.
//!
//! The peak is the kernel's `VmHWM` at the end (the highest RSS since the start, so a start
//! that peaked higher would show, never hide). A sampler notes the watchers' largest lag
//! during the flow (the newest answered seq minus the slowest watcher's last), so that
//! "caught up" is a figure. The phase with no watcher makes the same changes unwatched.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::group::Group;
use crate::process::Process;
use crate::stats::Failures;
use crate::traffic::{self, Sent};
use crate::watcher::Mode;

/// Connections of the loads.
const CONNS: usize = 64;
/// Changes of the fill: the tail's 16,384 events and some more.
pub const FILL: u64 = 17_000;
/// How long the last events may take to reach every watcher after a load.
const DRAIN: Duration = Duration::from_secs(60);
/// How often the lag is sampled.
const SAMPLE: Duration = Duration::from_millis(20);

/// One phase's figures, RSS in KiB.
#[derive(Clone, Copy, Default)]
pub struct Phase {
    pub watchers: usize,
    /// `VmRSS` once ready and settled, before any change.
    pub idle: u64,
    /// `VmHWM` after the flow.
    pub peak: u64,
    /// `VmRSS` after the flow, the watchers still connected.
    pub end: u64,
    /// Changes answered per second in the flow.
    pub changes_rate: f64,
    /// The largest lag sampled in the flow, in seqs.
    pub max_lag: u64,
    /// From the flow's last answer until the last watcher had its event, ms.
    pub catch_up_ms: f64,
    /// The node's CPU time per change of the flow, us.
    pub node_us: f64,
}

/// A phase with `watchers` streams in the flow, at `rate`/s for `run_for`.
pub fn phase(
    runtimes: &crate::Runtimes,
    watchers: usize,
    rate: f64,
    run_for: Duration,
    failures: &mut Failures,
) -> Option<Phase> {
    let node = Process::start(&runtimes.load, watchers);
    std::thread::sleep(Duration::from_secs(1));
    let idle = node.status_kib("VmRSS");
    let load = &runtimes.load;
    let (conns, created) = load.block_on(traffic::connect(&node.base, CONNS, failures));
    let watched =
        |modes: &[Mode], after| Group::start(&runtimes.watch, &node.base, modes, after, false);
    let first = (watchers > 0).then(|| watched(&[Mode::Stream], created));
    let (fill, f) = load.block_on(traffic::closed(&conns, far(), FILL));
    failures.merge(f);
    let filled = fill.last().map_or(created, |s| s.seq);
    let group = watched(&vec![Mode::Stream; watchers], filled);
    let ready = first
        .as_ref()
        .map_or(Ok(Instant::now()), |first| first.reached(filled, DRAIN))
        .and_then(|_| load.block_on(traffic::warm_up(&conns[0], 0)))
        .and_then(|warm| group.reached(warm, DRAIN).map(|_| warm));
    let warm = match ready {
        Ok(warm) => warm,
        Err(e) => {
            failures.add(e);
            eprintln!("the node's log:\n{}", node.log());
            return None;
        }
    };
    if let Some(first) = first {
        first.stop(&runtimes.watch);
    }
    group.count_after(warm);
    let ticks = node.cpu_ticks();
    let (sent, max_lag) = flow(runtimes, &conns, &group, warm, (rate, run_for), failures);
    let last = sent.last().map_or(warm, |s| s.seq);
    let answered = sent.iter().map(|s| s.answered).max();
    let caught_up = group.reached(last, DRAIN);
    let (peak, end) = (node.status_kib("VmHWM"), node.status_kib("VmRSS"));
    let node_us = match (ticks, node.cpu_ticks()) {
        (Some(a), Some(b)) => crate::cpu::per_change(b.saturating_sub(a), sent.len()),
        _ => f64::NAN,
    };
    if let Err(e) = group.check(sent.len()) {
        failures.add(e);
    }
    for ended in group.stop(&runtimes.watch) {
        if let Err(e) = ended {
            failures.add(e);
        }
    }
    let catch_up_ms = match (caught_up, watchers) {
        (_, 0) => f64::NAN,
        (Ok(at), _) => at.saturating_duration_since(answered?).as_secs_f64() * 1000.0,
        (Err(e), _) => {
            failures.add(e);
            f64::NAN
        }
    };
    let first = sent.iter().map(|s| s.sent).min()?;
    Some(Phase {
        watchers,
        idle,
        peak,
        end,
        changes_rate: sent.len() as f64 / (answered? - first).as_secs_f64(),
        max_lag,
        catch_up_ms,
        node_us,
    })
}

/// A deadline no fill reaches: it ends by its count.
fn far() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

/// The flow: changes at `rate`/s for `run_for`, the lag of `group` sampled meanwhile; the
/// changes and the largest lag.
fn flow(
    runtimes: &crate::Runtimes,
    conns: &[Arc<crate::changes::Conn>],
    group: &Group,
    warm: u64,
    (rate, run_for): (f64, Duration),
    failures: &mut Failures,
) -> (Vec<Sent>, u64) {
    let latest = Arc::new(AtomicU64::new(warm));
    let paced = runtimes.load.spawn({
        let (conns, latest) = (conns.to_vec(), latest.clone());
        async move { traffic::paced(&conns, rate, run_for, &latest).await }
    });
    let mut max_lag = 0;
    while !paced.is_finished() {
        let newest = latest.load(Ordering::Relaxed);
        max_lag = max_lag.max(newest.saturating_sub(group.slowest()));
        std::thread::sleep(SAMPLE);
    }
    let (sent, f) = runtimes.load.block_on(paced).expect("the paced load");
    failures.merge(f);
    (sent, max_lag)
}
