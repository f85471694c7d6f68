//! What a node keeps of a shared store across its own restarts: the store's name and the
//! greatest version the node issued or read there (its floor), as `m:remote:<kind>` in its
//! RocksDB.
//!
//! A Redis that lost data no longer knows the versions it published; the nodes that wrote
//! them do. A node hands its floor to every write script (see `redis/scripts.rs`), so a version
//! it published is never issued again even when Redis and the node restart together. The
//! name keeps a store's events under one name through a loss: a Redis that lost its
//! `store_id` is given back the one the node knew (and the loss is noticed, see `loss.rs`).
//!
//! The floor is kept every `[settlement] interval` while it moves, not with every change: a
//! node that crashes keeps the floor of at most one interval before. Versions also take
//! Redis's clock in microseconds, so only a Redis that lost the versions of that last
//! interval and whose clock is behind the lost primary's can issue one of them again.

use serde::{Deserialize, Serialize};

use crate::audit::Trail;
use crate::store::keys::meta;
use crate::store::{blocking, Store, StoreError};

/// What a node knows of a kind's shared store.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recalled {
    /// The store's name (`redis:<id>`), once the node has connected.
    pub store: Option<String>,
    /// The greatest version the node issued or read in it.
    pub floor: u64,
}

impl Recalled {
    /// What `trail` kept for `kind` (nothing on a new store), read off the runtime. A value
    /// that does not decode is an error: a floor silently lost could let a version be
    /// issued twice.
    pub async fn read(trail: &Trail, kind: &'static str) -> Result<Recalled, StoreError> {
        let store = trail.store().clone();
        blocking::try_run("reading m:remote", move || {
            Recalled::read_store(&store, kind)
        })
        .await
    }

    /// [`Recalled::read`] from the node's store itself (blocks: a node stopped, or off the
    /// runtime).
    pub fn read_store(store: &Store, kind: &str) -> Result<Recalled, StoreError> {
        Ok(store.meta_json(&meta::remote(kind))?.unwrap_or_default())
    }

    /// Keep it for `kind` in `trail`.
    pub async fn keep(&self, trail: &Trail, kind: &str) -> Result<(), StoreError> {
        let value = serde_json::to_vec(self).expect("a recollection always serializes");
        trail.remember(kind, value).await
    }
}
