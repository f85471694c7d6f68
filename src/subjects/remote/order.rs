//! One dual write at a time per subject, on this node.
//!
//! A dual write's row takes its seq when it is finished, not when the store applied it. Two
//! changes of one subject made at once on this node could then apply in one order (revision
//! 116, then 117) and finish in the other, and the trail, and the lifecycle events a replica
//! applies in seq order, would end at 116 while the store holds 117. Holding a subject's lock
//! from the store's compare-and-set to the row keeps finish order equal to apply order. Two
//! such changes would race on the compare-and-set anyway (one of them is refused), so the
//! lock costs them nothing; changes of other subjects share a lock only when their keys hash
//! to the same one of a fixed set (lock striping). Settlement holds the lock too, from its read
//! of a subject to the row it settles with that state (see `Reconciler::hold`).

use std::hash::BuildHasher;
use std::sync::Arc;

use tokio::sync::{Mutex, OwnedMutexGuard};

/// How many locks: enough that unrelated subjects rarely share one. With 64 changes in flight,
/// one shares its lock with another 1.5% of the time (with 64 locks, 63%: such a pair runs one
/// after the other, which was most of a route change's p99).
const STRIPES: usize = 4096;

/// The locks of one kind of subject, shared by every clone of its `Remote`.
#[derive(Clone)]
pub(crate) struct SubjectLocks {
    locks: Arc<[Arc<Mutex<()>>]>,
    hasher: std::collections::hash_map::RandomState,
}

impl Default for SubjectLocks {
    fn default() -> Self {
        SubjectLocks {
            locks: (0..STRIPES).map(|_| Arc::new(Mutex::new(()))).collect(),
            hasher: Default::default(),
        }
    }
}

impl std::fmt::Debug for SubjectLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubjectLocks")
            .field("locks", &self.locks.len())
            .finish()
    }
}

impl SubjectLocks {
    /// Wait for the lock of subject `id` of `tenant`; it is held until the guard drops.
    pub(crate) async fn lock(&self, tenant: &str, id: &str) -> OwnedMutexGuard<()> {
        let stripe = (self.hasher.hash_one((tenant, id)) as usize) % self.locks.len();
        Arc::clone(&self.locks[stripe]).lock_owned().await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_subject_has_one_change_at_a_time() {
        let locks = SubjectLocks::default();
        let held = locks.lock("t1", "r1").await;
        let again = tokio::time::timeout(Duration::from_millis(50), locks.lock("t1", "r1"));
        assert!(again.await.is_err(), "the same subject waits");
        drop(held);
        let again = tokio::time::timeout(Duration::from_millis(50), locks.lock("t1", "r1"));
        assert!(again.await.is_ok(), "and goes once the first is done");
    }
}
