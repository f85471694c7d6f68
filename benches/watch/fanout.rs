//! Part 2: events served to caught-up watchers while the node takes changes as fast as it
//! answers them, beside a bare scan of the outbox of the same store.
//!
//! A point is a fresh node in this process with W server-sent-event streams, all caught up
//! (each has had a warm-up change), then route changes from closed-loop connections for
//! the run's time. Its figures:
//!
//! - changes/s: answered changes over the time from the load's start to its last answer;
//! - delivered/s: the events every watcher had, summed over the watchers, over the time from
//!   the load's start until the last watcher had the last change's event (every watcher
//!   must have every event, in order, exactly once);
//! - node CPU per delivered event: the process's CPU time apart from the load generator's
//!   and the watchers' threads (both named `load*`).
//!
//! The bare scan reads the outbox of the last point's store once the node has stopped:
//! `ankusa::lifecycle::outbox::visit` in pages of 1024 (the watchers' tail reads so) from the
//! oldest event to the newest, doing nothing with them: events/s, the median of five
//! measurements (each of whole scans for at least half a second) after a warm-up one.

use std::path::Path;
use std::time::{Duration, Instant};

use ankusa::lifecycle::outbox::visit;
use ankusa::store::Store;
use serde_json::json;

use crate::cpu::Cpu;
use crate::figures::median;
use crate::group::Group;
use crate::node::Node;
use crate::stats::Failures;
use crate::traffic;
use crate::watcher::Mode;

/// How long the last events may take to reach every watcher after the load.
const DRAIN: Duration = Duration::from_secs(60);
/// Measurements of the bare baseline (after a warm-up one).
const SCANS: usize = 5;
/// The least time of one measurement of the bare baseline.
const SCAN_TIME: Duration = Duration::from_millis(500);

/// One point: W watchers on a node taking changes.
#[derive(Clone, Copy, Default)]
pub struct Point {
    pub watchers: usize,
    pub changes_rate: f64,
    /// Events had per second, summed over the watchers.
    pub delivered_rate: f64,
    /// From the load's last answer until the last watcher had its event, ms.
    pub catch_up_ms: f64,
    /// The node's CPU time per delivered event (per change with no watcher), us.
    pub node_us: f64,
    /// The watchers' and the generator's CPU time per delivered event, us.
    pub client_us: f64,
}

/// A point of `watchers` streams and `writers` closed-loop connections for `run_for`, on a
/// node whose store is at `dir` (left there for the bare scan).
pub fn point(
    runtimes: &crate::Runtimes,
    watchers: usize,
    writers: usize,
    run_for: Duration,
    dir: &Path,
    failures: &mut Failures,
) -> Option<Point> {
    let node = Node::start(|v| {
        crate::room(v, watchers);
        v["node"]["data_dir"] = json!(dir);
    });
    let load = &runtimes.load;
    let (conns, created) = load.block_on(traffic::connect(&node.base, writers, failures));
    let modes = vec![Mode::Stream; watchers];
    let group = Group::start(&runtimes.watch, &node.base, &modes, created, false);
    let ready = load
        .block_on(traffic::warm_up(&conns[0], 0))
        .and_then(|warm| group.reached(warm, DRAIN).map(|_| warm));
    let warm = match ready {
        Ok(warm) => warm,
        Err(e) => {
            failures.add(e);
            node.stop();
            return None;
        }
    };
    group.count_after(warm);
    let cpu = Cpu::now(Some(crate::CLIENT));
    let began = Instant::now();
    let (sent, f) = load.block_on(traffic::closed(&conns, began + run_for, u64::MAX));
    failures.merge(f);
    let last = sent.last().map_or(warm, |s| s.seq);
    let answered = sent.iter().map(|s| s.answered).max().unwrap_or(began);
    let reached = group.reached(last, DRAIN);
    let cpu = Cpu::now(Some(crate::CLIENT)).map(|after| after.split_since(cpu, 1));
    let each = group.check(sent.len());
    let delivered: u64 = group.tallies.iter().map(|t| t.counted()).sum();
    for ended in group.stop(&runtimes.watch) {
        if let Err(e) = ended {
            failures.add(e);
        }
    }
    node.stop();
    let done = match reached {
        Ok(done) => done,
        Err(e) => {
            failures.add(e);
            return None;
        }
    };
    // Each watcher must have had every event the outbox holds after the warm-up's.
    match each.map(|each| (each, events_after(dir, warm, last))) {
        Ok((each, stored)) if watchers > 0 && each != stored => failures.add(format!(
            "each of {watchers} watchers had {each} events, the outbox holds {stored}"
        )),
        Ok(_) => {}
        Err(e) => failures.add(e),
    }
    let events = if watchers == 0 {
        sent.len()
    } else {
        delivered as usize
    };
    let (node_us, client_us) = cpu.map_or((f64::NAN, f64::NAN), |(n, c)| {
        (n / events.max(1) as f64, c / events.max(1) as f64)
    });
    Some(Point {
        watchers,
        changes_rate: sent.len() as f64 / (answered - began).as_secs_f64(),
        delivered_rate: delivered as f64 / (done.max(answered) - began).as_secs_f64(),
        catch_up_ms: match watchers {
            0 => f64::NAN,
            _ => done.saturating_duration_since(answered).as_secs_f64() * 1000.0,
        },
        node_us,
        client_us,
    })
}

/// The events the outbox of the (stopped) node's store at `dir` holds in `(after, last]`.
fn events_after(dir: &Path, after: u64, last: u64) -> u64 {
    let store = Store::open(dir).expect("the point's store");
    let (mut from, mut events) = (after, 0);
    loop {
        let visited = visit(&store, from, 1024, |row, _| {
            events += u64::from(row.seq <= last)
        })
        .expect("a read of the outbox");
        match visited.last {
            Some(seq) if seq < last => from = seq,
            _ => return events,
        }
    }
}

/// The bare scan of the outbox of the store at `dir`: its events, and events/s (the median
/// of [`SCANS`] measurements after a warm-up one).
pub fn bare_scan(dir: &Path) -> (u64, f64) {
    let store = Store::open(dir).expect("the point's store");
    let mut rates = Vec::with_capacity(SCANS + 1);
    let mut events = 0;
    for _ in 0..=SCANS {
        // Whole scans for at least SCAN_TIME: one scan of a small store is too short to
        // time on a busy machine.
        let (began, mut read) = (Instant::now(), 0);
        while began.elapsed() < SCAN_TIME {
            events = scan(&store);
            read += events;
        }
        rates.push(read as f64 / began.elapsed().as_secs_f64());
    }
    (events, median(rates.split_off(1)))
}

/// Every outbox event, a page at a time, each looked at and dropped.
fn scan(store: &Store) -> u64 {
    let (mut after, mut events, mut bytes) = (0, 0u64, 0usize);
    loop {
        let visited = visit(store, after, 1024, |row, entity| {
            events += 1;
            bytes += entity.len() + row.resource.len();
        })
        .expect("a bare scan");
        match visited.last {
            Some(last) => after = last,
            None => break,
        }
    }
    std::hint::black_box(bytes);
    events
}
