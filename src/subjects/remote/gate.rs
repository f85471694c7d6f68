//! The gate a remote kind's changes pass: open, except while the kind is refreshed after a
//! restore.
//!
//! A refresh reads a subject's present state and then writes a row that publishes it. A
//! change made between the two would land first and be overwritten, for every consumer, by
//! the older state the refresh row carries. So the refresh closes the gate before the node
//! serves and opens it when the kind is done; a change waits for it a bounded time, then is
//! refused as `StoreUnavailable` (nothing written), as when the store itself does not answer.
//! Reads never wait: the store is the truth.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// Open, or closed with how long a change waits for it. Clones share one gate.
#[derive(Debug, Clone)]
pub struct Gate(Arc<watch::Sender<Option<Duration>>>);

impl Default for Gate {
    /// An open gate.
    fn default() -> Gate {
        Gate(Arc::new(watch::Sender::new(None)))
    }
}

/// A change that waited for a closed gate as long as it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("changes wait while the subjects are refreshed after a restore")]
pub struct Closed;

impl Gate {
    /// Close it: changes wait up to `wait` for it to open.
    pub fn close(&self, wait: Duration) {
        self.0.send_replace(Some(wait));
    }

    /// Open it, letting every waiting change through.
    pub fn open(&self) {
        self.0.send_replace(None);
    }

    /// Whether it is open.
    pub fn is_open(&self) -> bool {
        self.0.borrow().is_none()
    }

    /// Wait until it is open, or for as long as it was closed for.
    pub async fn pass(&self) -> Result<(), Closed> {
        let mut rx = self.0.subscribe();
        let Some(wait) = *rx.borrow_and_update() else {
            return Ok(());
        };
        // The sender lives in `self`: the channel cannot close while we wait.
        let opened = tokio::time::timeout(wait, rx.wait_for(Option::is_none))
            .await
            .is_ok();
        if opened {
            Ok(())
        } else {
            Err(Closed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_closed_gate_holds_a_change_until_it_opens_or_the_wait_is_over() {
        let gate = Gate::default();
        gate.pass().await.unwrap();
        gate.close(Duration::from_millis(50));
        assert!(!gate.is_open());
        assert_eq!(gate.pass().await, Err(Closed));
        gate.close(Duration::from_secs(10));
        let waiting = tokio::spawn({
            let gate = gate.clone();
            async move { gate.pass().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        gate.open();
        assert_eq!(waiting.await.unwrap(), Ok(()));
        assert!(gate.is_open());
    }
}
