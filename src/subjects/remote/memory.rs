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

/// Subjects by tenant, then id: ordered, so a tenant's page comes back in id order, and found
/// by `&str` without building a key.
#[derive(Debug)]
pub struct MemoryStore<T> {
    table: Mutex<Table<T>>,
}

#[derive(Debug)]
struct Table<T> {
    /// A tenant is here while it has a subject.
    subjects: BTreeMap<String, BTreeMap<String, Versioned<T>>>,
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

    fn find(&self, tenant: &str, id: &str) -> Option<&Versioned<T>> {
        self.subjects.get(tenant)?.get(id)
    }

    fn remove(&mut self, tenant: &str, id: &str) {
        if let Some(ids) = self.subjects.get_mut(tenant) {
            ids.remove(id);
            if ids.is_empty() {
                self.subjects.remove(tenant);
            }
        }
    }
}

impl<T: RemoteSubject> Table<T> {
    /// Store `subject`, in place of what was there under its tenant and id.
    fn insert(&mut self, subject: Versioned<T>) {
        let s = &subject.subject;
        let Some(ids) = self.subjects.get_mut(s.tenant()) else {
            let (tenant, id) = (s.tenant().to_owned(), s.id().to_owned());
            self.subjects
                .insert(tenant, BTreeMap::from([(id, subject)]));
            return;
        };
        match ids.get_mut(s.id()) {
            Some(stored) => *stored = subject,
            None => {
                ids.insert(s.id().to_owned(), subject);
            }
        }
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
        Ok(self.table().subjects.keys().cloned().collect())
    }

    async fn get(&self, tenant: &str, id: &str) -> Result<Found<T>, StoreError> {
        let mut table = self.table();
        let subject = table.find(tenant, id).cloned();
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
        Ok(self.table().find(tenant, id).is_some())
    }

    async fn list(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Versioned<T>>, StoreError> {
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        let table = self.table();
        let Some(ids) = table.subjects.get(tenant) else {
            return Ok(Vec::new());
        };
        Ok(ids
            .range::<str, _>((from, Bound::Unbounded))
            .take(limit)
            .map(|(_, s)| s.clone())
            .collect())
    }

    async fn version(&self) -> Result<Stamp, StoreError> {
        Ok(own(self.table().now()))
    }

    async fn put(
        &self,
        mut subject: T,
        state: Option<State>,
        expected: Option<u64>,
    ) -> Result<Cas, StoreError> {
        let mut table = self.table();
        let current = table.find(subject.tenant(), subject.id());
        if current.map(|s| s.version) != expected {
            let actual = current.map_or(0, |s| s.subject.revision());
            return Ok(Cas::Conflict { actual });
        }
        // The store keeps the revision: whatever the caller computed, it is the stored + 1.
        let revision = current.map_or(0, |s| s.subject.revision()) + 1;
        // The caller's encoding is the stored subject's only at the revision it was made at.
        let state = state.filter(|_| subject.revision() == revision);
        subject.set_revision(revision);
        let version = table.next();
        table.insert(Versioned {
            subject,
            version,
            state,
        });
        Ok(Cas::Written(own(version)))
    }

    async fn delete(&self, tenant: &str, id: &str, expected: u64) -> Result<Cas, StoreError> {
        let mut table = self.table();
        match table.find(tenant, id) {
            Some(s) if s.version == expected => {}
            other => {
                let actual = other.map_or(0, |s| s.subject.revision());
                return Ok(Cas::Conflict { actual });
            }
        }
        table.remove(tenant, id);
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
        State::of_subject(route).unwrap()
    }

    async fn stored_state(store: &MemoryStore<Route>) -> Option<State> {
        let found = store.get("t1", "r1").await.unwrap();
        found.subject.expect("the route is stored").state
    }

    #[tokio::test]
    async fn the_state_written_with_a_subject_comes_back_with_it() {
        let store = MemoryStore::default();
        let first = route(1);
        let version = match store.put(first.clone(), Some(state_of(&first)), None).await {
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
            .put(next.clone(), Some(state_of(&next)), Some(version))
            .await;
        assert!(matches!(written, Ok(Cas::Written(_))));
        assert_eq!(stored_state(&store).await, None);

        // Not given: none kept.
        let version = store.get("t1", "r1").await.unwrap().version().unwrap();
        let written = store.put(route(3), None, Some(version)).await;
        assert!(matches!(written, Ok(Cas::Written(_))));
        assert_eq!(stored_state(&store).await, None);
    }

    #[tokio::test]
    async fn a_refused_write_keeps_the_stored_state() {
        let store = MemoryStore::default();
        let first = route(1);
        let created = store.put(first.clone(), Some(state_of(&first)), None).await;
        assert!(matches!(created, Ok(Cas::Written(_))));
        let mut other = route(2);
        other.enabled = false;
        let refused = store
            .put(other.clone(), Some(state_of(&other)), Some(0))
            .await;
        assert_eq!(refused.unwrap(), Cas::Conflict { actual: 1 });
        assert_eq!(stored_state(&store).await, Some(state_of(&first)));
    }

    #[tokio::test]
    async fn tenants_and_pages_follow_the_subjects() {
        let store = MemoryStore::default();
        for (tenant, id) in [("t2", "r1"), ("t1", "r2"), ("t1", "r1"), ("t1", "r3")] {
            let mut r = route(1);
            (r.tenant, r.id) = (tenant.into(), id.into());
            assert!(matches!(
                store.put(r, None, None).await,
                Ok(Cas::Written(_))
            ));
        }
        assert_eq!(store.tenants().await.unwrap(), ["t1", "t2"]);
        let ids = |page: Vec<Versioned<Route>>| -> Vec<String> {
            page.into_iter().map(|v| v.subject.id).collect()
        };
        assert_eq!(ids(store.list("t1", None, 2).await.unwrap()), ["r1", "r2"]);
        assert_eq!(ids(store.list("t1", Some("r2"), 2).await.unwrap()), ["r3"]);
        assert!(store.list("t3", None, 2).await.unwrap().is_empty());

        // A tenant whose last subject is deleted is gone.
        let version = store.get("t2", "r1").await.unwrap().version().unwrap();
        let deleted = store.delete("t2", "r1", version).await;
        assert!(matches!(deleted, Ok(Cas::Written(_))));
        assert_eq!(store.tenants().await.unwrap(), ["t1"]);
        assert!(!store.exists("t2", "r1").await.unwrap());
    }
}
