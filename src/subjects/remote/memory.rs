//! The in-memory store: the embedded default for routes, a table in this process (like an ETS
//! table). What it holds is gone when the node stops; a pending row left by a crash finds its
//! subject gone and settles as the reconcile rules say.
//!
//! A `std::sync::Mutex`, not tokio's: every operation is a few map lookups and never awaits
//! while holding it.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard};

use super::{Cas, RemoteStore, RemoteSubject};
use crate::store::StoreError;

/// Subjects by `(tenant, id)`: ordered, so a tenant's page comes back in id order.
#[derive(Debug)]
pub struct MemoryStore<T> {
    table: Mutex<BTreeMap<(String, String), T>>,
}

impl<T> Default for MemoryStore<T> {
    fn default() -> Self {
        MemoryStore {
            table: Mutex::new(BTreeMap::new()),
        }
    }
}

impl<T> MemoryStore<T> {
    fn table(&self) -> MutexGuard<'_, BTreeMap<(String, String), T>> {
        // A panic while holding the lock cannot leave a half-written subject: every write is
        // one insert or remove. Go on with the table as it is.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn key(tenant: &str, id: &str) -> (String, String) {
    (tenant.to_owned(), id.to_owned())
}

#[async_trait::async_trait]
impl<T: RemoteSubject + std::fmt::Debug> RemoteStore<T> for MemoryStore<T> {
    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn tenants(&self) -> Result<Vec<String>, StoreError> {
        let mut tenants: Vec<String> = Vec::new();
        // Keys are in (tenant, id) order: a tenant's subjects are together.
        for (tenant, _) in self.table().keys() {
            if tenants.last() != Some(tenant) {
                tenants.push(tenant.clone());
            }
        }
        Ok(tenants)
    }

    async fn get(&self, tenant: &str, id: &str) -> Result<Option<T>, StoreError> {
        Ok(self.table().get(&key(tenant, id)).cloned())
    }

    async fn list(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<T>, StoreError> {
        let from = match after {
            Some(after) => Bound::Excluded(key(tenant, after)),
            None => Bound::Included(key(tenant, "")),
        };
        Ok(self
            .table()
            .range((from, Bound::Unbounded))
            .take_while(|((t, _), _)| t == tenant)
            .take(limit)
            .map(|(_, s)| s.clone())
            .collect())
    }

    async fn put(&self, subject: &T, expected: u64) -> Result<Cas, StoreError> {
        let mut table = self.table();
        let k = key(subject.tenant(), subject.id());
        let actual = table.get(&k).map_or(0, |s| s.revision());
        if actual != expected {
            return Ok(Cas::Conflict { actual });
        }
        let mut stored = subject.clone();
        // The store keeps the revision: whatever the caller computed, it is expected + 1.
        stored.set_revision(expected + 1);
        table.insert(k, stored);
        Ok(Cas::Written)
    }

    async fn delete(&self, tenant: &str, id: &str, expected: u64) -> Result<Cas, StoreError> {
        let mut table = self.table();
        let k = key(tenant, id);
        let actual = table.get(&k).map_or(0, |s| s.revision());
        if actual == 0 || actual != expected {
            return Ok(Cas::Conflict { actual });
        }
        table.remove(&k);
        Ok(Cas::Written)
    }
}
