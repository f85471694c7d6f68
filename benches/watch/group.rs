//! A group of watchers on a runtime of their own (threads named `load-watch`, so that their
//! CPU time is told apart from the node's), and the waits the parts share: until every one
//! of them has had a given event.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::watcher::{watch, Ended, Mode, Tally, Window};

/// Watchers started together, each with its tally.
pub struct Group {
    pub window: Arc<Window>,
    pub tallies: Vec<Arc<Tally>>,
    tasks: Vec<tokio::task::JoinHandle<Ended>>,
    stop: CancellationToken,
}

/// The client every watcher of a group shares: one connection per watcher (HTTP/1.1), no
/// timeout (a stream lasts the whole measurement).
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("an HTTP client")
}

impl Group {
    /// One watcher per entry of `modes` on the node at `base`, each from `after`; `keep`:
    /// each hands back every event's time.
    pub fn start(
        runtime: &tokio::runtime::Runtime,
        base: &str,
        modes: &[Mode],
        after: u64,
        keep: bool,
    ) -> Group {
        let (window, stop, client) = (Window::new(), CancellationToken::new(), client());
        let mut tallies = Vec::with_capacity(modes.len());
        let mut tasks = Vec::with_capacity(modes.len());
        for mode in modes {
            let tally = Arc::new(Tally::default());
            let seen = (tally.clone(), window.clone());
            let (client, base, stop) = (client.clone(), base.to_owned(), stop.clone());
            tasks.push(runtime.spawn(watch(*mode, client, base, after, seen, keep, stop)));
            tallies.push(tally);
        }
        Group {
            window,
            tallies,
            tasks,
            stop,
        }
    }

    /// Count the events after `seq` from now on.
    pub fn count_after(&self, seq: u64) {
        self.window.from.store(seq, Ordering::Relaxed);
    }

    /// The lowest seq every watcher has had.
    pub fn slowest(&self) -> u64 {
        let lasts = self.tallies.iter().map(|t| t.last());
        lasts.min().unwrap_or(u64::MAX)
    }

    /// Wait until every watcher has had event `seq` (the last one committed); when the last
    /// of them had it, or `Err` after `timeout` (or when one of them stopped).
    pub fn reached(&self, seq: u64, timeout: Duration) -> Result<Instant, String> {
        let deadline = Instant::now() + timeout;
        while self.slowest() < seq {
            if let Some(ended) = self.tasks.iter().position(|t| t.is_finished()) {
                return Err(format!("watcher {ended} stopped before seq {seq}"));
            }
            if Instant::now() >= deadline {
                let behind = self.tallies.iter().filter(|t| t.last() < seq);
                return Err(format!(
                    "{} of {} watchers did not have seq {seq} within {timeout:?} (the slowest at {})",
                    behind.count(),
                    self.tallies.len(),
                    self.slowest()
                ));
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        // Nothing was committed after `seq`: each watcher's last event is that one.
        let at = self.tallies.iter().map(|t| t.last_at(&self.window)).max();
        Ok(at.unwrap_or_else(Instant::now))
    }

    /// Whether every watcher had the same events after the window's `from`, in order, at
    /// least `changes` (the answered ones: the node also publishes a checkpoint row every
    /// `audit.checkpoint_rows` rows and `checkpoint_interval`): the events each had.
    pub fn check(&self, changes: usize) -> Result<u64, String> {
        let counts: Vec<u64> = self.tallies.iter().map(|t| t.counted()).collect();
        let disorder: u64 = self.tallies.iter().map(|t| t.disorder()).sum();
        let (least, most) = (counts.iter().min(), counts.iter().max());
        match (least, most) {
            (Some(l), Some(m)) if l != m || *l < changes as u64 || disorder > 0 => Err(format!(
                "{} watchers had {l} to {m} events ({disorder} out of order) for {changes} changes",
                counts.len()
            )),
            (Some(l), _) => Ok(*l),
            _ => Ok(0),
        }
    }

    /// Stop them all: each one's end.
    pub fn stop(self, runtime: &tokio::runtime::Runtime) -> Vec<Ended> {
        self.stop.cancel();
        runtime.block_on(async {
            let mut ended = Vec::with_capacity(self.tasks.len());
            for task in self.tasks {
                ended.push(
                    task.await
                        .unwrap_or_else(|e| Err(format!("a watcher: {e}"))),
                );
            }
            ended
        })
    }
}
