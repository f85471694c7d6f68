//! Waiting for replicas (`min_replicas`). `WAIT` blocks the connection it is sent on, and
//! every write shares the store's one connection: a `WAIT` per write would queue each write
//! behind the previous one's acknowledgements. So one `WAIT` at a time is sent per
//! connection, and it covers every write answered on that connection before it was sent:
//! writers in flight together share one round of acknowledgements.

use std::sync::atomic::{AtomicU64, Ordering};

use redis::aio::ConnectionManager;

use super::RedisStore;
use crate::store::StoreError;
use crate::subjects::remote::RemoteSubject;

/// One connection's writes and what the replicas hold of them.
#[derive(Debug, Default)]
pub(super) struct Waits {
    /// Writes answered on the connection so far.
    answered: AtomicU64,
    /// The number of the last write a `WAIT` saw enough replicas hold; one `WAIT` at a time.
    covered: tokio::sync::Mutex<u64>,
}

impl Waits {
    /// Note a write answered on the connection; its number.
    pub(super) fn answered(&self) -> u64 {
        self.answered.fetch_add(1, Ordering::SeqCst) + 1
    }
}

impl<T: RemoteSubject> RedisStore<T> {
    /// Wait until the replicas asked for hold write number `mine` of `conn` (`waits` is its
    /// tally), by a `WAIT` sent after it was answered: this one, or one another writer sent.
    /// Not in time: an error, as a write that did not answer (its settlement reads it back).
    pub(super) async fn replicated(
        &self,
        conn: &mut ConnectionManager,
        waits: &Waits,
        mine: u64,
    ) -> Result<(), StoreError> {
        let (replicas, wait) = self.replicas;
        let mut covered = waits.covered.lock().await;
        if *covered >= mine {
            return Ok(());
        }
        // Every write numbered up to here was answered before this WAIT is sent.
        let upto = waits.answered.load(Ordering::SeqCst);
        let acked: u32 = redis::cmd("WAIT")
            .arg(replicas)
            .arg(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1))
            .query_async(conn)
            .await
            .map_err(|e| self.failed(e))?;
        if acked < replicas {
            return Err(StoreError::Redis(format!(
                "the write reached {acked} of {replicas} replicas in time"
            )));
        }
        *covered = upto;
        Ok(())
    }
}
