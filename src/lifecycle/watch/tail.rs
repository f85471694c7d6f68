//! The tail: the newest events, built once for every watcher that is caught up.
//!
//! One task follows the trail's committed seq. While anyone watches, each commit wakes it: it
//! reads the new outbox entities, builds and serializes their events, appends them, and
//! moves `to`, which wakes the watchers waiting on it. The tail holds every flagged row in
//! `(from, to]`; it drops its oldest events past [`MAX_EVENTS`] or [`MAX_BYTES`] (a watcher
//! behind `from` reads the outbox itself). With no watcher for [`IDLE`], it reads nothing:
//! it only moves `from` and `to` up to the committed seq.

use std::collections::VecDeque;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::filter::Filter;
use super::read::{self, Outbox};
use super::Served;
use crate::telemetry;

/// Most events the tail keeps.
pub(super) const MAX_EVENTS: usize = 16_384;

/// Most bytes of serialized events the tail keeps.
pub(super) const MAX_BYTES: usize = 32 << 20;

/// Most outbox entities one read of the tail takes.
const PAGE: usize = 1024;

/// How long the tail goes on reading after the last watcher left: one that comes back
/// between two long-polls finds the events built.
pub(super) const IDLE: Duration = Duration::from_secs(60);

/// The newest events: every flagged row with a seq in `(from, to]`, in seq order.
#[derive(Debug, Default)]
pub(super) struct Tail {
    pub(super) from: u64,
    pub(super) to: u64,
    events: VecDeque<Arc<Served>>,
    bytes: usize,
}

impl Tail {
    /// An empty tail at `at`.
    pub(super) fn at(at: u64) -> Tail {
        Tail {
            from: at,
            to: at,
            ..Tail::default()
        }
    }

    /// Up to `limit` events `filter` admits after `after` (which must be at least `from`),
    /// and the position they cover: the last one's seq when `limit` were found, else `to`.
    pub(super) fn after(
        &self,
        after: u64,
        filter: &Filter,
        limit: usize,
    ) -> (Vec<Arc<Served>>, u64) {
        let start = self.events.partition_point(|e| e.seq <= after);
        let mut found = Vec::new();
        for event in self.events.range(start..) {
            if filter.admits(event) {
                found.push(event.clone());
                if found.len() == limit {
                    let last = event.seq;
                    return (found, last);
                }
            }
        }
        (found, self.to.max(after))
    }

    /// Append events read up to `to`, then drop the oldest past the bounds.
    fn extend(&mut self, events: Vec<Arc<Served>>, to: u64) {
        for event in events {
            self.bytes += event.json.get().len();
            self.events.push_back(event);
        }
        self.to = to;
        while self.events.len() > MAX_EVENTS || self.bytes > MAX_BYTES {
            let Some(dropped) = self.events.pop_front() else {
                break;
            };
            self.bytes -= dropped.json.get().len();
            self.from = dropped.seq;
        }
    }
}

/// What the tail task shares with the watchers.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) tail: RwLock<Tail>,
    /// `to`, sent each time the tail moves.
    pub(super) moved: watch::Sender<u64>,
}

/// Whether anyone watches, or did within [`IDLE`].
pub(super) trait Watched: Send + Sync + 'static {
    fn watched_since(&self, now: Instant, idle: Duration) -> bool;
}

/// Follow `committed` until `stop`: read each commit's events into the tail while watched.
pub(super) async fn follow(
    shared: Arc<Shared>,
    outbox: Outbox,
    mut committed: watch::Receiver<u64>,
    watched: Arc<dyn Watched>,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            changed = committed.changed() => if changed.is_err() { return },
            () = stop.cancelled() => return,
        }
        let up_to = *committed.borrow_and_update();
        if !watched.watched_since(Instant::now(), IDLE) {
            *shared.tail.write().unwrap_or_else(|p| p.into_inner()) = Tail::at(up_to);
            shared.moved.send_replace(up_to);
            continue;
        }
        // Until a page is not full: a burst is read in pages, each served as it comes.
        loop {
            let after = shared.tail.read().unwrap_or_else(|p| p.into_inner()).to;
            if after >= up_to {
                break;
            }
            let reading = outbox.clone();
            let page = crate::store::blocking::run("the watchers' tail", move || {
                read::read(&reading, after, PAGE, up_to)
            })
            .await;
            let page = match page {
                Ok(Ok(page)) => page,
                Ok(Err(e)) | Err(e) => {
                    // The watchers behind read the outbox themselves; the next commit retries.
                    telemetry::watch::tail_unread(&e);
                    break;
                }
            };
            let (full, to) = (page.full, page.position);
            shared
                .tail
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .extend(page.events, to);
            shared.moved.send_replace(to);
            if !full {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(seq: u64, ty: &str, bytes: usize) -> Arc<Served> {
        Arc::new(Served {
            seq,
            ty: ty.to_owned(),
            tenant: None,
            json: serde_json::value::to_raw_value(&"x".repeat(bytes)).unwrap(),
        })
    }

    fn seqs(events: &[Arc<Served>]) -> Vec<u64> {
        events.iter().map(|e| e.seq).collect()
    }

    #[test]
    fn a_page_stops_at_its_limit_or_covers_the_whole_tail() {
        let mut tail = Tail::at(10);
        tail.extend(
            vec![
                served(12, "io.ankusa.route.created", 1),
                served(13, "io.ankusa.source.created", 1),
                served(15, "io.ankusa.route.deleted", 1),
            ],
            20,
        );
        let all = Filter::default();
        let (events, position) = tail.after(10, &all, 2);
        assert_eq!((seqs(&events), position), (vec![12, 13], 13));
        let (events, position) = tail.after(13, &all, 2);
        assert_eq!((seqs(&events), position), (vec![15], 20));
        // Filtered out: the position still passes them.
        let routes = Filter::parse(Some("io.ankusa.source.*"), None).unwrap();
        let (events, position) = tail.after(13, &routes, 10);
        assert_eq!((seqs(&events), position), (vec![], 20));
        assert_eq!(tail.after(20, &all, 10).1, 20);
    }

    #[test]
    fn the_oldest_events_go_past_the_bounds_and_from_follows() {
        let mut tail = Tail::at(0);
        let events = (1..=MAX_EVENTS as u64 + 2)
            .map(|s| served(s, "t", 1))
            .collect();
        tail.extend(events, MAX_EVENTS as u64 + 5);
        assert_eq!((tail.from, tail.to), (2, MAX_EVENTS as u64 + 5));
        assert_eq!(tail.events.front().map(|e| e.seq), Some(3));
        let mut tail = Tail::at(0);
        let big = MAX_BYTES / 2;
        tail.extend(
            vec![served(1, "t", big), served(2, "t", big), served(3, "t", 10)],
            3,
        );
        assert_eq!((tail.from, tail.events.len()), (1, 2));
    }
}
