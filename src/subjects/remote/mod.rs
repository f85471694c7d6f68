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

pub mod drift;
mod gate;
pub mod loss;
pub mod memory;
mod order;
mod pages;
pub mod recall;
pub mod redis;
pub mod refresh;
mod snapshot;
mod write;

use std::sync::Arc;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::key::check_name;
use super::read::{Page, ReadError, MAX_PAGE};
use super::redact::{self, redact_fields, Redacted};
use crate::audit::{Hold, Present, Reading, Reconcile, Reconcilers, Stamp, State, Trail};
use crate::store::StoreError;

use drift::{DriftPage, Drifted};
pub use gate::Gate;
use order::SubjectLocks;
pub use recall::Recalled;

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
    /// Its secret fields, which its views redact (one of `subjects::redact`'s lists).
    const SECRET_FIELDS: &'static [&'static str];
    /// Its redacted view.
    fn view(&self) -> Result<Redacted, serde_json::Error> {
        redact_fields(self, Self::SECRET_FIELDS)
    }
    /// Its state, for a row's hashes.
    fn state(&self) -> Result<State, serde_json::Error> {
        State::of_subject(self)
    }
    /// Its state and the JSON of its redacted view, from one encoding (see
    /// [`redact::state_and_view`]). A kind with no secret field has nothing to redact: its
    /// view is its state's bytes, however [`RemoteSubject::state`] makes them.
    fn state_and_view(&self) -> Result<(State, Bytes), serde_json::Error> {
        if !Self::SECRET_FIELDS.is_empty() {
            return redact::state_and_view(self, Self::SECRET_FIELDS);
        }
        let state = self.state()?;
        let view = state.encoded().clone();
        Ok((state, view))
    }
}

/// A subject and its version, as its store keeps them.
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned<T> {
    /// The subject.
    pub subject: T,
    /// The version of the change that made it what it is.
    pub version: u64,
    /// Its canonical encoding, when the store kept the one its change was hashed with (the
    /// memory store does): the next change's state before is then that buffer, not encoded
    /// again.
    pub state: Option<State>,
}

/// What a read of one subject found: the subject (`None`: it does not exist) and the version
/// its state is at. For a subject that does not exist that is the store's version at the
/// read, taken in the same atomic step: at or above the change that deleted it, below any
/// change that creates it again.
#[derive(Debug, Clone, PartialEq)]
pub struct Found<T> {
    /// The subject.
    pub subject: Option<Versioned<T>>,
    /// The version its state is at, and the store.
    pub stamp: Stamp,
}

impl<T> Found<T> {
    /// The subject, without its version.
    pub fn into_subject(self) -> Option<T> {
        self.subject.map(|s| s.subject)
    }

    /// The version the subject is at, if it exists.
    pub fn version(&self) -> Option<u64> {
        self.subject.as_ref().map(|s| s.version)
    }
}

/// What a compare-and-set did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cas {
    /// Written, at this version (taken from the store's counter in the same atomic step).
    Written(Stamp),
    /// Not written: the subject is not at the expected version. `actual` is its revision
    /// (0: it does not exist), for the caller's answer.
    Conflict {
        /// The stored revision.
        actual: u64,
    },
}

/// Where subjects of one kind live, outside this node's store.
///
/// The store keeps one version counter per kind. Every change takes the next value of it in
/// the same atomic step that applies it, and is a compare-and-set on the version the change
/// read, so a subject's versions increase over all its changes: across nodes, and across a
/// delete and a create again, which restarts its revision.
#[async_trait::async_trait]
pub trait RemoteStore<T: RemoteSubject>: Send + Sync + std::fmt::Debug {
    /// `memory` or `redis`.
    fn kind(&self) -> &'static str;

    /// Every tenant that has a subject, each once (the refresh after a restore walks them).
    async fn tenants(&self) -> Result<Vec<String>, StoreError>;

    /// Subject `id` of `tenant` and the version its state is at.
    async fn get(&self, tenant: &str, id: &str) -> Result<Found<T>, StoreError>;

    /// Whether subject `id` of `tenant` exists: a create's early check (its compare-and-set
    /// decides), which needs no version.
    async fn exists(&self, tenant: &str, id: &str) -> Result<bool, StoreError> {
        Ok(self.get(tenant, id).await?.subject.is_some())
    }

    /// Up to `limit` subjects of `tenant` with ids after `after`, in id order.
    async fn list(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Versioned<T>>, StoreError>;

    /// The store's version now (a snapshot's floor): every change applied so far has a
    /// version at or below it, every later one a greater version.
    async fn version(&self) -> Result<Stamp, StoreError>;

    /// Write `subject` if it is at version `expected` (`None`: only if it does not exist);
    /// its revision becomes the stored one + 1, which `subject`'s must be. `state` is
    /// `subject`'s canonical encoding when the caller has it, for a store that keeps it
    /// ([`Versioned::state`]).
    async fn put(
        &self,
        subject: T,
        state: Option<State>,
        expected: Option<u64>,
    ) -> Result<Cas, StoreError>;

    /// Delete subject `id` of `tenant` if it is at version `expected`.
    async fn delete(&self, tenant: &str, id: &str, expected: u64) -> Result<Cas, StoreError>;

    /// [`put`](RemoteStore::put) as one change of a dual write, refused if [`fence`] was
    /// called with its `token`. A store whose writes cannot arrive late (in process) needs
    /// no more than `put`.
    ///
    /// [`fence`]: RemoteStore::fence
    async fn put_fenced(
        &self,
        subject: T,
        state: Option<State>,
        expected: Option<u64>,
        token: &str,
    ) -> Result<Cas, StoreError> {
        let _ = token;
        self.put(subject, state, expected).await
    }

    /// [`delete`](RemoteStore::delete) as one change of a dual write, refused if
    /// [`fence`](RemoteStore::fence) was called with its `token`.
    async fn delete_fenced(
        &self,
        tenant: &str,
        id: &str,
        expected: u64,
        token: &str,
    ) -> Result<Cas, StoreError> {
        let _ = token;
        self.delete(tenant, id, expected).await
    }

    /// One page of the drift check's scan of every subject (see `drift.rs`), from `from`
    /// (0: the start), about `count` subjects. A store in this process is only ever written
    /// by the node: nothing drifts.
    async fn drift_page(&self, from: u64, count: usize) -> Result<DriftPage<T>, StoreError> {
        let _ = (from, count);
        Ok(DriftPage::default())
    }

    /// Adopt a drifted subject at a new version, marked, if it is still as found; `None`: it
    /// changed meanwhile.
    async fn adopt(&self, drifted: &Drifted<T>) -> Result<Option<Stamp>, StoreError> {
        let _ = drifted;
        Ok(None)
    }

    /// Drop the mark of a drifted subject adopted at `version`: its rows are written.
    async fn unmark(&self, drifted: &Drifted<T>, version: u64) -> Result<(), StoreError> {
        let _ = (drifted, version);
        Ok(())
    }

    /// The ids of a page of `tenant`'s subjects after `after` (about `count`) that its index
    /// lists and that are gone (deleted around the node), and the last id looked at (`None`:
    /// done). A store in this process keeps no index apart from its subjects.
    async fn gone_page(
        &self,
        tenant: &str,
        after: Option<&str>,
        count: usize,
    ) -> Result<(Vec<String>, Option<String>), StoreError> {
        let _ = (tenant, after, count);
        Ok((Vec::new(), None))
    }

    /// Drop `id` from `tenant`'s index if it is still gone: its drift rows are written.
    async fn unindex(&self, tenant: &str, id: &str) -> Result<(), StoreError> {
        let _ = (tenant, id);
        Ok(())
    }

    /// Refuse, from now on, the write of the change `token` names, wherever it still is (a
    /// write that timed out may sit on a connection that was replaced, and land later).
    /// Settlement calls it before it reads the subject back: a write that lands after the
    /// fence is refused, one that landed before it is what the read sees. Either way the row
    /// says what happened.
    async fn fence(&self, token: &str) -> Result<(), StoreError> {
        let _ = token;
        Ok(())
    }

    /// A loss of data the store found since the last call (its counter below what this
    /// process saw in it, its id gone), once.
    fn take_loss(&self) -> Option<StoreLoss> {
        None
    }

    /// Take what this node kept of the store across its restarts (see `recall.rs`), before
    /// the store is used.
    fn recall(&self, recalled: &Recalled) {
        let _ = recalled;
    }

    /// What this node knows of the store now, to keep across its restarts (`None`: nothing
    /// outlives this process, as in a store in it).
    fn recollection(&self) -> Option<Recalled> {
        None
    }

    /// Check that the store is the one this node knew (its id, its counter against what the
    /// node saw), between changes: a loss found is kept for [`take_loss`]. A store in this
    /// process cannot lose anything behind the node's back.
    ///
    /// [`take_loss`]: RemoteStore::take_loss
    async fn check(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// What a store that lost data was found with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreLoss {
    /// The store's name (`redis:<id>`).
    pub store: String,
    /// Its version counter, as found.
    pub counter: u64,
    /// The greatest counter value seen in it before.
    pub seen: u64,
    /// What was found, for the row.
    pub found: &'static str,
}

impl StoreLoss {
    /// What a counter found below the one seen says.
    pub const COUNTER_BACK: &'static str = "the store's version counter went back";
    /// What a store found without its id says (restarted empty, flushed).
    pub const ID_GONE: &'static str = "the store's id was gone: it restarted empty or was flushed";
    /// What a store found with another id than the one the node knew says.
    pub const RENAMED: &'static str = "the store's id is not the one this node knew: another store, or one emptied and named again by a node that did not know it";
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
    /// The drift check's passes over the kind (one at a time) and what they reported.
    passes: drift::Passes,
}

impl<T: RemoteSubject> Clone for Remote<T> {
    fn clone(&self) -> Self {
        Remote {
            store: self.store.clone(),
            trail: self.trail.clone(),
            gate: self.gate.clone(),
            locks: self.locks.clone(),
            passes: self.passes.clone(),
        }
    }
}

impl<T: RemoteSubject> Remote<T> {
    /// Subjects kept in `store`, their changes recorded in `trail`; changes never wait for a gate.
    pub fn new(store: Arc<dyn RemoteStore<T>>, trail: Trail) -> Remote<T> {
        Remote {
            store,
            trail,
            gate: Gate::default(),
            locks: SubjectLocks::default(),
            passes: drift::Passes::default(),
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
        match self.store.get(tenant, id).await?.subject {
            Some(found) => Ok(Some(view(&found.subject)?)),
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
            subjects.last().map(|s| s.subject.id().to_owned())
        } else {
            None
        };
        let items = subjects
            .iter()
            .map(|s| view(&s.subject))
            .collect::<Result<_, _>>()?;
        Ok(Page { items, next })
    }
}

/// A row's resource: `<plural>/<id>`.
pub(crate) fn resource<T: RemoteSubject>(id: &str) -> String {
    [T::PLURAL, "/", id].concat()
}

/// The redacted view.
pub(crate) fn view<T: RemoteSubject>(subject: &T) -> Result<Redacted, StoreError> {
    subject.view().map_err(unencodable::<T>)
}

/// A subject of kind `T` that does not encode.
pub(crate) fn unencodable<T: RemoteSubject>(e: serde_json::Error) -> StoreError {
    StoreError::Unencodable {
        what: format!("a {}", T::KIND),
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

    async fn present(&self, locator: &Value) -> Result<Reading, String> {
        let (tenant, id) = located::<T>(locator)?;
        // The change's own write, if it is still on its way, must not land after this read.
        if let Some(token) = locator["fence"].as_str() {
            self.store.fence(token).await.map_err(|e| e.to_string())?;
        }
        let found = self
            .store
            .get(tenant, id)
            .await
            .map_err(|e| e.to_string())?;
        let present = match found.subject {
            Some(found) => Some(present(&found.subject).map_err(|e| e.to_string())?),
            None => None,
        };
        Ok(Reading {
            present,
            stamp: Some(found.stamp),
        })
    }
}

/// `subject`'s complete state and redacted view.
pub(crate) fn present<T: RemoteSubject>(subject: &T) -> Result<Present, StoreError> {
    Ok(Present {
        state: serde_json::to_value(subject).map_err(unencodable::<T>)?,
        view: view(subject)?.into_value(),
    })
}
