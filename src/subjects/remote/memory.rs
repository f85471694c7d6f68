//! The in-memory store: the embedded default for routes, a table in this process (like an ETS
//! table). What it holds is gone when the node stops; a pending row left by a crash finds its
//! subject gone and settles as the reconcile rules say.
//!
//! Its version counter is a hybrid logical clock: each change takes the greater of the last
//! version + 1 and the wall clock in microseconds. So versions increase within a run, and a
//! run that starts after a restart issues versions above every earlier run's (consumers keep
//! those), without a counter on disk: only a clock set back across the restart could repeat
//! one. (A burst of changes can run the counter ahead of the clock by a microsecond per
//! change; a restart takes far longer than such a lead.)
//!
//! A `std::sync::Mutex`, not tokio's: every operation is a few map lookups and never awaits
//! while holding it.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard};

use super::{Cas, Found, RemoteStore, RemoteSubject, Versioned};
use crate::audit::{now_micros, Stamp, State};
use crate::store::StoreError;

/// Subjects by `(tenant, id)`: ordered, so a tenant's page comes back in id order.
#[derive(Debug)]
pub struct MemoryStore<T> {
    table: Mutex<Table<T>>,
}

#[derive(Debug)]
struct Table<T> {
    subjects: BTreeMap<(String, String), Versioned<T>>,
    /// The last version issued or read as a floor.
    version: u64,
}

impl<T> Table<T> {
    /// The version now: every version issued so far is at or below it, and every later one
    /// above it.
    fn now(&mut self) -> u64 {
        self.version = self.version.max(now_micros());
        self.version
    }

    /// The next version.
    fn next(&mut self) -> u64 {
        self.version = (self.version + 1).max(now_micros());
        self.version
    }
}

impl<T> Default for MemoryStore<T> {
    fn default() -> Self {
        MemoryStore {
            table: Mutex::new(Table {
                subjects: BTreeMap::new(),
                version: 0,
            }),
        }
    }
}

impl<T> MemoryStore<T> {
    fn table(&self) -> MutexGuard<'_, Table<T>> {
        // A panic while holding the lock cannot leave a half-written subject: every write is
        // one insert or remove. Go on with the table as it is.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn key(tenant: &str, id: &str) -> (String, String) {
    (tenant.to_owned(), id.to_owned())
}

/// A version of this node's own store.
fn own(version: u64) -> Stamp {
    Stamp {
        version,
        store: None,
    }
}

#[async_trait::async_trait]
impl<T: RemoteSubject + std::fmt::Debug> RemoteStore<T> for MemoryStore<T> {
    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn tenants(&self) -> Result<Vec<String>, StoreError> {
        let mut tenants: Vec<String> = Vec::new();
        // Keys are in (tenant, id) order: a tenant's subjects are together.
        for (tenant, _) in self.table().subjects.keys() {
            if tenants.last() != Some(tenant) {
                tenants.push(tenant.clone());
            }
        }
        Ok(tenants)
    }

    async fn get(&self, tenant: &str, id: &str) -> Result<Found<T>, StoreError> {
        let mut table = self.table();
        let subject = table.subjects.get(&key(tenant, id)).cloned();
        let version = match &subject {
            Some(s) => s.version,
            None => table.now(),
        };
        Ok(Found {
            subject,
            stamp: own(version),
        })
    }

    async fn exists(&self, tenant: &str, id: &str) -> Result<bool, StoreError> {
        Ok(self.table().subjects.contains_key(&key(tenant, id)))
    }

    async fn list(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Versioned<T>>, StoreError> {
        let from = match after {
            Some(after) => Bound::Excluded(key(tenant, after)),
            None => Bound::Included(key(tenant, "")),
        };
        Ok(self
            .table()
            .subjects
            .range((from, Bound::Unbounded))
            .take_while(|((t, _), _)| t == tenant)
            .take(limit)
            .map(|(_, s)| s.clone())
            .collect())
    }

    async fn version(&self) -> Result<Stamp, StoreError> {
        Ok(own(self.table().now()))
    }

    async fn put(
        &self,
        subject: &T,
        state: Option<&State>,
        expected: Option<u64>,
    ) -> Result<Cas, StoreError> {
        let mut table = self.table();
        let k = key(subject.tenant(), subject.id());
        let current = table.subjects.get(&k);
        if current.map(|s| s.version) != expected {
            let actual = current.map_or(0, |s| s.subject.revision());
            return Ok(Cas::Conflict { actual });
        }
        let mut stored = subject.clone();
        // The store keeps the revision: whatever the caller computed, it is the stored + 1.
        let revision = current.map_or(0, |s| s.subject.revision()) + 1;
        stored.set_revision(revision);
        // The caller's encoding is the stored subject's only at the revision it was made at.
        let state = state.filter(|_| subject.revision() == revision).cloned();
        let version = table.next();
        table.subjects.insert(
            k,
            Versioned {
                subject: stored,
                version,
                state,
            },
        );
        Ok(Cas::Written(own(version)))
    }

    async fn delete(&self, tenant: &str, id: &str, expected: u64) -> Result<Cas, StoreError> {
        let mut table = self.table();
        let k = key(tenant, id);
        match table.subjects.get(&k) {
            Some(s) if s.version == expected => {}
            other => {
                let actual = other.map_or(0, |s| s.subject.revision());
                return Ok(Cas::Conflict { actual });
            }
        }
        table.subjects.remove(&k);
        let version = table.next();
        Ok(Cas::Written(own(version)))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Map;

    use super::*;
    use crate::subjects::routes::Route;

    fn route(revision: u64) -> Route {
        Route {
            id: "r1".into(),
            tenant: "t1".into(),
            source: "s1".into(),
            destination: "https://example.test/a".into(),
            filter: Map::new(),
            enabled: true,
            revision,
        }
    }

    fn state_of(route: &Route) -> State {
        State::of(&serde_json::to_value(route).unwrap())
    }

    async fn stored_state(store: &MemoryStore<Route>) -> Option<State> {
        let found = store.get("t1", "r1").await.unwrap();
        found.subject.expect("the route is stored").state
    }

    #[tokio::test]
    async fn the_state_written_with_a_subject_comes_back_with_it() {
        let store = MemoryStore::default();
        let first = route(1);
        let version = match store.put(&first, Some(&state_of(&first)), None).await {
            Ok(Cas::Written(stamp)) => stamp.version,
            other => panic!("a create is written: {other:?}"),
        };
        let found = store.get("t1", "r1").await.unwrap().subject.unwrap();
        assert_eq!(found.subject, first);
        assert_eq!(found.state, Some(state_of(&found.subject)));

        // Made for another revision than the one the store gives it: not kept.
        let mut next = route(7);
        next.destination = "https://example.test/b".into();
        let written = store
            .put(&next, Some(&state_of(&next)), Some(version))
            .await;
        assert!(matches!(written, Ok(Cas::Written(_))));
        assert_eq!(stored_state(&store).await, None);

        // Not given: none kept.
        let version = store.get("t1", "r1").await.unwrap().version().unwrap();
        let written = store.put(&route(3), None, Some(version)).await;
        assert!(matches!(written, Ok(Cas::Written(_))));
        assert_eq!(stored_state(&store).await, None);
    }

    #[tokio::test]
    async fn a_refused_write_keeps_the_stored_state() {
        let store = MemoryStore::default();
        let first = route(1);
        let created = store.put(&first, Some(&state_of(&first)), None).await;
        assert!(matches!(created, Ok(Cas::Written(_))));
        let mut other = route(2);
        other.enabled = false;
        let refused = store.put(&other, Some(&state_of(&other)), Some(0)).await;
        assert_eq!(refused.unwrap(), Cas::Conflict { actual: 1 });
        assert_eq!(stored_state(&store).await, Some(state_of(&first)));
    }
}
