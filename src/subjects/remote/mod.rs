//! Subjects that live outside this node's RocksDB: routes always, sources when `[sources]
//! store = "redis"`. Their store is one of two [`RemoteStore`]s, in memory ([`memory`]) or in
//! Redis ([`redis`]), and every change is a dual write through `Trail::record` ([`Remote`]).
//!
//! Every write is a compare-and-set on the subject's revision, which the store keeps: it writes
//! only if the stored revision is the one the change read, and bumps it in the same atomic
//! step. That is what makes a read-modify-write from two nodes safe without a lock, and what
//! lets the trail say exactly which node's change took effect. The compare-and-set also decides
//! the row: written (`ok`, published), refused because the subject changed since it was read
//! (no row, as for any change the store refuses, and 409 to the caller), or unknown because the store did not answer (settlement
//! reads the subject back and decides; 503 to the caller).

mod gate;
pub mod memory;
mod order;
pub mod redis;
pub mod refresh;
mod write;

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::key::check_name;
use super::read::{Page, ReadError, MAX_PAGE};
use super::redact::Redacted;
use crate::audit::{Hold, Present, Reconcile, Reconcilers, Trail};
use crate::store::StoreError;

pub use gate::Gate;
use order::SubjectLocks;

/// A subject a [`RemoteStore`] keeps.
pub trait RemoteSubject: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {
    /// Its kind: the first half of its rows' actions, its Redis key infix, its reconciler's
    /// name (`route`, `source`).
    const KIND: &'static str;
    /// Its collection: the first half of its rows' resources (`routes`).
    const PLURAL: &'static str;
    /// Its tenant.
    fn tenant(&self) -> &str;
    /// Its id.
    fn id(&self) -> &str;
    /// Its revision.
    fn revision(&self) -> u64;
    /// Set its revision (the store's is the truth).
    fn set_revision(&mut self, revision: u64);
    /// Its redacted view (made by `subjects::redact`).
    fn view(&self) -> Result<Redacted, serde_json::Error>;
}

/// What a compare-and-set did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cas {
    /// Written; the subject is now at the new revision.
    Written,
    /// Not written: the subject is at `actual` (0: it does not exist), not the expected one.
    Conflict {
        /// The stored revision.
        actual: u64,
    },
}

/// Where subjects of one kind live, outside this node's store.
#[async_trait::async_trait]
pub trait RemoteStore<T: RemoteSubject>: Send + Sync + std::fmt::Debug {
    /// `memory` or `redis`.
    fn kind(&self) -> &'static str;

    /// Every tenant that has a subject, each once (the refresh after a restore walks them).
    async fn tenants(&self) -> Result<Vec<String>, StoreError>;

    /// Subject `id` of `tenant`.
    async fn get(&self, tenant: &str, id: &str) -> Result<Option<T>, StoreError>;

    /// Up to `limit` subjects of `tenant` with ids after `after`, in id order.
    async fn list(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<T>, StoreError>;

    /// Write `subject` if the stored revision is `expected` (0: only if it does not exist);
    /// the store's revision becomes `expected + 1`, which `subject`'s must be.
    async fn put(&self, subject: &T, expected: u64) -> Result<Cas, StoreError>;

    /// Delete subject `id` of `tenant` if its stored revision is `expected`.
    async fn delete(&self, tenant: &str, id: &str, expected: u64) -> Result<Cas, StoreError>;
}

/// Subjects of one kind in a remote store, their changes recorded in a trail.
#[derive(Debug)]
pub struct Remote<T: RemoteSubject> {
    store: Arc<dyn RemoteStore<T>>,
    trail: Trail,
    /// Holds changes back while the kind's refresh after a restore runs; shared by every
    /// clone, so the handle the API holds is the one the refresh opens.
    gate: Gate,
    /// One dual write at a time per subject, so that rows finish in the order the store
    /// applied them (see `order.rs`).
    locks: SubjectLocks,
}

impl<T: RemoteSubject> Clone for Remote<T> {
    fn clone(&self) -> Self {
        Remote {
            store: self.store.clone(),
            trail: self.trail.clone(),
            gate: self.gate.clone(),
            locks: self.locks.clone(),
        }
    }
}

impl<T: RemoteSubject> Remote<T> {
    /// Subjects kept in `store`, their changes recorded in `trail`; changes are not held.
    pub fn new(store: Arc<dyn RemoteStore<T>>, trail: Trail) -> Remote<T> {
        Remote {
            store,
            trail,
            gate: Gate::default(),
            locks: SubjectLocks::default(),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn RemoteStore<T>> {
        &self.store
    }

    /// The gate changes pass (closed while the kind is refreshed after a restore).
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// The reconciler settlement needs for this kind, by kind.
    pub fn reconcilers(&self) -> Reconcilers {
        let mut map = Reconcilers::new();
        let reconciler = Reconciler {
            store: self.store.clone(),
            locks: self.locks.clone(),
        };
        map.insert(T::KIND.to_owned(), Arc::new(reconciler));
        map
    }

    /// Subject `id` of `tenant`, redacted.
    pub async fn get(&self, tenant: &str, id: &str) -> Result<Option<Redacted>, ReadError> {
        check_name("tenant", tenant)?;
        check_name("id", id)?;
        match self.store.get(tenant, id).await? {
            Some(subject) => Ok(Some(view(&subject)?)),
            None => Ok(None),
        }
    }

    /// Up to `limit` (at most [`MAX_PAGE`]) subjects of `tenant` with ids after `after`.
    pub async fn list(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, ReadError> {
        check_name("tenant", tenant)?;
        if let Some(after) = after {
            check_name("after", after)?;
        }
        let limit = limit.clamp(1, MAX_PAGE);
        let mut subjects = self.store.list(tenant, after, limit + 1).await?;
        let next = if subjects.len() > limit {
            subjects.truncate(limit);
            subjects.last().map(|s| s.id().to_owned())
        } else {
            None
        };
        let items = subjects.iter().map(view).collect::<Result<_, _>>()?;
        Ok(Page { items, next })
    }
}

/// A row's resource: `<plural>/<id>`.
pub(crate) fn resource<T: RemoteSubject>(id: &str) -> String {
    format!("{}/{id}", T::PLURAL)
}

/// The redacted view, a bad encoding reported as a corrupt value.
pub(crate) fn view<T: RemoteSubject>(subject: &T) -> Result<Redacted, StoreError> {
    subject.view().map_err(|e| corrupt::<T>(e))
}

pub(crate) fn corrupt<T: RemoteSubject>(e: serde_json::Error) -> StoreError {
    StoreError::Corrupt {
        what: format!("{} value", T::KIND),
        detail: e.to_string(),
    }
}

/// Settles a kind's pending rows: reads the subject back from its store, holding the subject's
/// lock (see `order.rs`).
#[derive(Debug)]
pub struct Reconciler<T: RemoteSubject> {
    store: Arc<dyn RemoteStore<T>>,
    locks: SubjectLocks,
}

/// The tenant and id of a change's locator.
fn located<T: RemoteSubject>(locator: &Value) -> Result<(&str, &str), String> {
    match (locator["tenant"].as_str(), locator["id"].as_str()) {
        (Some(tenant), Some(id))
            if check_name("tenant", tenant).is_ok() && check_name("id", id).is_ok() =>
        {
            Ok((tenant, id))
        }
        _ => Err(format!("not a {} locator", T::KIND)),
    }
}

#[async_trait::async_trait]
impl<T: RemoteSubject> Reconcile for Reconciler<T> {
    async fn hold(&self, locator: &Value) -> Option<Hold> {
        let (tenant, id) = located::<T>(locator).ok()?;
        Some(Box::new(self.locks.lock(tenant, id).await))
    }

    async fn present(&self, locator: &Value) -> Result<Option<Present>, String> {
        let (tenant, id) = located::<T>(locator)?;
        let Some(subject) = self
            .store
            .get(tenant, id)
            .await
            .map_err(|e| e.to_string())?
        else {
            return Ok(None);
        };
        let state = serde_json::to_value(&subject).map_err(|e| e.to_string())?;
        let view = subject.view().map_err(|e| e.to_string())?;
        Ok(Some(Present {
            state,
            view: view.into_value(),
        }))
    }
}
