//! What the Redis store keeps of its version counter: the floor every write script takes
//! (the greatest version this process issued or read), the counter values seen, and a loss
//! of data found when the counter is below them.

use std::sync::atomic::Ordering;

use super::{stamp, RedisStore};
use crate::audit::Stamp;
use crate::store::StoreError;
use crate::subjects::remote::{RemoteSubject, StoreLoss};
use crate::telemetry;

impl<T: RemoteSubject> RedisStore<T> {
    /// The store's version now, from its counter, its clock (`TIME`: seconds, microseconds)
    /// and this node's floor: every version issued so far is at or below it (a version is
    /// at least the clock in microseconds when it is issued, and every one this node saw is
    /// at or below its floor), and every later one above, even if the counter was lost.
    pub(super) fn store_version(&self, counter: Option<u64>, (seconds, micros): (u64, u64)) -> u64 {
        counter
            .unwrap_or(0)
            .max(seconds.saturating_mul(1_000_000).saturating_add(micros))
            .max(self.floor.load(Ordering::Relaxed))
    }

    /// Note what a write script's `reply` says of the counter: the value `INCR` found, which
    /// is above `seen` (the counter this process had seen when it sent the script) unless
    /// Redis lost data.
    pub(super) fn script_answered(
        &self,
        name: &str,
        (written, version, counter): (i64, i64, i64),
        seen: u64,
    ) {
        if written == 1 {
            let counter = u64::try_from(counter).unwrap_or(0);
            self.counter_read(name, counter.saturating_sub(1), seen);
            // The counter now holds the version issued.
            self.counted
                .fetch_max(u64::try_from(version).unwrap_or(0), Ordering::Relaxed);
        }
    }

    /// Note that Redis's counter read `counter`, by a command sent when this process had seen
    /// it at `seen`. Below that, Redis lost data: a command sent after another's answer runs
    /// after it, so the counter cannot have gone back otherwise. (Compared with what was seen
    /// when the command was sent, not when its answer is handled: answers of commands in
    /// flight together may be handled in any order.)
    pub(super) fn counter_read(&self, name: &str, counter: u64, seen: u64) {
        self.counted.fetch_max(counter, Ordering::Relaxed);
        if counter < seen {
            self.lost(name, counter, seen, StoreLoss::COUNTER_BACK);
        }
    }

    /// Keep a loss of the store named `name` for [`take_loss`](super::RemoteStore::take_loss)
    /// (the first one, until it is taken): its counter is `counter` now, after `seen`.
    pub(super) fn lost(&self, name: &str, counter: u64, seen: u64, found: &'static str) {
        let loss = StoreLoss {
            store: name.to_owned(),
            counter,
            seen,
            found,
        };
        telemetry::remote::store_lost(T::KIND, &loss.store, counter, seen, found);
        let mut lost = self.lost.lock().unwrap_or_else(|p| p.into_inner());
        lost.get_or_insert(loss);
        // What is seen from now on is what the store holds now.
        self.counted.store(counter, Ordering::Relaxed);
    }

    /// `stamp` of the store named `name`, raising the floor to its version.
    pub(super) fn seen(&self, name: &str, version: u64) -> Stamp {
        self.floor.fetch_max(version, Ordering::Relaxed);
        stamp(name, version)
    }

    /// [`RemoteStore::check`](crate::subjects::remote::RemoteStore::check): the store's id
    /// and counter against what this process knew.
    pub(super) async fn check_store(&self) -> Result<(), StoreError> {
        let (mut conn, name) = self.conn().await?;
        let seen = self.counted.load(Ordering::Relaxed);
        let (id, counter): (Option<String>, Option<u64>) = redis::pipe()
            .atomic()
            .cmd("GET")
            .arg(self.id_key())
            .cmd("GET")
            .arg(self.counter_key())
            .query_async(&mut conn)
            .await
            .map_err(|e| self.failed(e))?;
        if id.is_some_and(|id| name.strip_prefix("redis:") == Some(&id)) {
            self.counter_read(&name, counter.unwrap_or(0), seen);
            return Ok(());
        }
        // Not the store the connection was made to: connect again, which gives a store that
        // lost its id the known one back (and notes the loss), or names another store.
        self.disconnect();
        self.conn().await.map(|_| ())
    }
}
