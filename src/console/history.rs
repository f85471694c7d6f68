//! The last hour of each sink's delivery, kept by the node itself for the Delivery page's
//! plot: a sample every [`EVERY`] of each sink's backlog (rows committed and not yet
//! confirmed) and lag (the age of its oldest unconfirmed event), in memory. Prometheus keeps
//! the long history; this needs nothing but the node.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::audit::Trail;
use crate::lifecycle::Publisher;

/// How often the sinks are sampled.
pub const EVERY: Duration = Duration::from_secs(15);
/// Samples kept: one hour's.
const KEPT: usize = 240;

/// One sink at one time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    /// When, unix ms.
    pub at: u64,
    /// Rows committed that it has not confirmed.
    pub backlog: u64,
    /// Age of its oldest unconfirmed event, ms (0: caught up).
    pub lag_ms: u64,
}

/// The samples of every sink, oldest first.
#[derive(Debug, Default)]
pub struct History {
    samples: Mutex<VecDeque<(String, Point)>>,
}

impl History {
    /// Sample every sink of `publisher` now.
    pub fn sample(&self, trail: &Trail, publisher: &Publisher) {
        let now = now_ms();
        let committed = *trail.committed().borrow();
        let statuses = publisher.statuses();
        // Each sink has one sample a tick: an hour for all of them.
        let keep = KEPT * statuses.len().max(1);
        let mut samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        for s in statuses {
            let point = Point {
                at: now,
                backlog: committed.saturating_sub(s.position),
                lag_ms: s.oldest_unconfirmed_at.map_or(0, |t| now.saturating_sub(t)),
            };
            samples.push_back((s.name, point));
        }
        while samples.len() > keep {
            samples.pop_front();
        }
    }

    /// The last hour of sink `sink`, oldest first.
    pub fn of(&self, sink: &str) -> Vec<Point> {
        let samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let since = now_ms().saturating_sub(3_600_000);
        samples
            .iter()
            .filter(|(name, p)| name == sink && p.at >= since)
            .map(|(_, p)| p.clone())
            .collect()
    }
}

fn now_ms() -> u64 {
    u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0)
}

/// Sample `publisher`'s sinks into `history` every [`EVERY`] until `stop`.
pub fn keep(
    history: Arc<History>,
    trail: Trail,
    publisher: Arc<Publisher>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => history.sample(&trail, &publisher),
            }
        }
    })
}

/// A plot of `points`' backlog, as the points of an SVG polyline in a `width` x `height`
/// box (y grows down), and the highest backlog it shows.
pub fn polyline(points: &[Point], width: u32, height: u32) -> (String, u64) {
    let Some(first) = points.first() else {
        return (String::new(), 0);
    };
    let top = points.iter().map(|p| p.backlog).max().unwrap_or(0).max(1);
    let span = points
        .last()
        .map_or(1, |l| l.at.saturating_sub(first.at))
        .max(1);
    let line = points
        .iter()
        .map(|p| {
            let x = (p.at - first.at) as f64 / span as f64 * f64::from(width);
            let y = f64::from(height) - p.backlog as f64 / top as f64 * f64::from(height);
            format!("{x:.1},{y:.1}")
        })
        .collect::<Vec<_>>()
        .join(" ");
    (line, top)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plot_spans_the_box() {
        let p = |at, backlog| Point {
            at,
            backlog,
            lag_ms: 0,
        };
        let (line, top) = polyline(&[p(0, 0), p(50, 10), p(100, 5)], 200, 100);
        assert_eq!(line, "0.0,100.0 100.0,0.0 200.0,50.0");
        assert_eq!(top, 10);
        assert_eq!(polyline(&[], 200, 100), (String::new(), 0));
    }
}
