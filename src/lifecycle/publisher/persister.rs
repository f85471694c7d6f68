//! A lane's position writes, in a task of their own, so that delivery never waits on an fsync.
//!
//! The lane hands each new position (with the dead letters that go with it) over and moves
//! on; the task writes them through the writer (`Trail::advance`) in order, one at a time, and
//! merges into one write whatever was handed over while the previous write synced (the newest
//! position, every dead letter). The status shows a position once it is durable.
//!
//! A write that fails is tried again, merged with what came since, until it lands: a later
//! position must never be persisted without the dead letters of an earlier one (their events
//! would be past the position and in no store). Once the lane has stopped, a failed write is
//! given up: nothing was persisted, so after a restart those events are delivered again, with
//! their ids, and refused ones are dead-lettered again.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::audit::Trail;
use crate::lifecycle::status::{self, SharedStatus};
use crate::store::Entry;

/// A position handed over, with the dead letters written in its batch.
type Write = (u64, Vec<Entry>);

/// The handle of a lane's position-writing task.
pub(super) struct Persister {
    positions: mpsc::UnboundedSender<Write>,
    task: JoinHandle<()>,
}

/// The pause before a failed position write is tried again.
const PERSIST_RETRY: Duration = Duration::from_secs(1);

impl Persister {
    /// Start the task that persists sink `sink`'s positions, reporting to `status`.
    pub(super) fn start(trail: &Trail, sink: &str, status: &SharedStatus) -> Persister {
        let (positions, handed) = mpsc::unbounded_channel::<Write>();
        let (trail, sink, status) = (trail.clone(), sink.to_owned(), status.clone());
        let task = tokio::spawn(write_all(trail, sink, status, handed));
        Persister { positions, task }
    }

    /// Persist that the sink has everything up to `to` (and dead-lettered `dead`).
    pub(super) fn write(&self, to: u64, dead: Vec<Entry>) {
        // The task ends only after the sender is dropped (`finish`).
        let _ = self.positions.send((to, dead));
    }

    /// Write what was handed over and stop.
    pub(super) async fn finish(self) {
        drop(self.positions);
        if let Err(e) = self.task.await {
            crate::telemetry::lifecycle::position_writer_failed(&e);
        }
    }
}

/// The task: write what is handed over, merged, in order, until the lane has stopped and
/// everything is written (or a write failed after it stopped).
async fn write_all(
    trail: Trail,
    sink: String,
    status: SharedStatus,
    mut handed: mpsc::UnboundedReceiver<Write>,
) {
    // Handed over and not yet durable: the newest position and every dead letter.
    let mut unwritten: Option<Write> = None;
    let mut stopped = false;
    loop {
        let (mut to, mut dead) = match unwritten.take() {
            Some(write) => write,
            None => match handed.recv().await {
                Some(write) => write,
                None => break,
            },
        };
        stopped |= merge_handed(&mut handed, &mut to, &mut dead);
        // Dead letters are few: copied only so that a failed write keeps them.
        match trail.advance(&sink, to, dead.clone()).await {
            Ok(()) => {
                fail::fail_point!("lifecycle::after_persist");
                status::update(&status, |s| s.position = s.position.max(to));
                status::report_position(&sink, &status);
            }
            Err(e) => {
                status::note_error(&sink, &status, &format!("persisting the position: {e}"));
                if stopped {
                    break;
                }
                unwritten = Some((to, dead));
                tokio::time::sleep(PERSIST_RETRY).await;
            }
        }
    }
}

/// Merge into `to` and `dead` every write handed over since; true once the lane has stopped
/// (nothing more will come).
fn merge_handed(
    handed: &mut mpsc::UnboundedReceiver<Write>,
    to: &mut u64,
    dead: &mut Vec<Entry>,
) -> bool {
    loop {
        match handed.try_recv() {
            Ok((newer, more)) => {
                *to = (*to).max(newer);
                dead.extend(more);
            }
            Err(mpsc::error::TryRecvError::Empty) => return false,
            Err(mpsc::error::TryRecvError::Disconnected) => return true,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::audit::{SystemClock, TrailOptions};
    use crate::lifecycle::dead_letters;
    use crate::store::{keys, keys::meta, Store};

    /// A trail on a fresh store with one sink, `s`, and its status.
    fn sink_s() -> (tempfile::TempDir, Store, Trail, SharedStatus) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let options = TrailOptions {
            sinks: vec!["s".into()],
            ..TrailOptions::default()
        };
        let trail = Trail::start(store.clone(), options, Arc::new(SystemClock)).unwrap();
        (dir, store, trail, status::starting("s", "file", 0))
    }

    /// Positions handed over faster than they sync are merged, and none of what was handed
    /// over is lost: the last position and every dead letter reach the store, and the status
    /// shows the position once it is durable.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn handed_over_positions_all_reach_the_store_in_order() {
        let (_dir, store, trail, status) = sink_s();
        #[cfg(feature = "failpoints")]
        let _slow = {
            let scenario = fail::FailScenario::setup();
            // Every write through the syncer, each taking 20 ms.
            fail::cfg("audit::inline", "return").unwrap();
            fail::cfg("audit::sync_delay", "sleep(20)").unwrap();
            scenario
        };
        let persister = Persister::start(&trail, "s", &status);
        for to in 1..=50u64 {
            let letter = (keys::dead_letter_key("s", to), br#"{}"#.to_vec());
            persister.write(to, if to % 5 == 0 { vec![letter] } else { vec![] });
        }
        persister.finish().await;
        assert_eq!(store.meta_u64(&meta::sink_position("s")).unwrap(), 50);
        assert_eq!(dead_letters::count(&store, "s").unwrap(), 10);
        assert_eq!(status::snapshot(&status).position, 50);
        trail.shutdown().await;
    }

    /// A position write that fails is tried again with what came since: the dead letters of
    /// the failed write reach the store with the later position, never after it or not at all.
    #[cfg(feature = "failpoints")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_position_write_keeps_its_dead_letters() {
        let (_dir, store, trail, status) = sink_s();
        let scenario = fail::FailScenario::setup();
        // Every write through the syncer; the first one fails.
        fail::cfg("audit::inline", "return").unwrap();
        fail::cfg("audit::write", "1*return").unwrap();
        let persister = Persister::start(&trail, "s", &status);
        persister.write(7, vec![(keys::dead_letter_key("s", 7), br#"{}"#.to_vec())]);
        while status::snapshot(&status).last_error.is_none() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        persister.write(20, Vec::new());
        while status::snapshot(&status).position < 20 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        persister.finish().await;
        assert_eq!(store.meta_u64(&meta::sink_position("s")).unwrap(), 20);
        assert_eq!(dead_letters::count(&store, "s").unwrap(), 1);
        drop(scenario);
        trail.shutdown().await;
    }
}
