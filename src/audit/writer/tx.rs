//! `Tx`: what a change sees and writes of the local subjects while the writer validates it.
//!
//! A change must see the writes of the changes validated before it (two updates of one
//! subject must not both pass a revision check), also those in its own group and in the
//! groups the syncer has not yet written. So reads look at this change's own ops, then the
//! group's overlay, then those of the unwritten groups (newest first), then the store.

use std::collections::{HashMap, VecDeque};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::store::{Cf, Store, StoreError};

/// A pending write: a put (`Some`) or a delete (`None`).
pub(crate) type Op = (Cf, Vec<u8>, Option<Vec<u8>>);

/// The writes of the changes already accepted into the group being built.
pub(crate) type Overlay = HashMap<(Cf, Vec<u8>), Option<Vec<u8>>>;

/// One change's view of the local subjects, and the ops it will commit with its row.
pub struct Tx<'a> {
    store: &'a Store,
    overlay: &'a Overlay,
    unsynced: &'a VecDeque<Overlay>,
    ops: Vec<Op>,
}

impl<'a> Tx<'a> {
    /// A change's view: `overlay` is its group's writes so far, `unsynced` those of the
    /// groups handed to the syncer and not yet on disk, oldest first.
    pub(crate) fn new(
        store: &'a Store,
        overlay: &'a Overlay,
        unsynced: &'a VecDeque<Overlay>,
    ) -> Tx<'a> {
        Tx {
            store,
            overlay,
            unsynced,
            ops: Vec::new(),
        }
    }

    pub(crate) fn into_ops(self) -> Vec<Op> {
        self.ops
    }

    /// The value at `key` of `cf`, as this change would leave it so far.
    pub fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some((_, _, v)) = self.ops.iter().rev().find(|(c, k, _)| *c == cf && k == key) {
            return Ok(v.clone());
        }
        let key = (cf, key.to_vec());
        let layers = std::iter::once(self.overlay).chain(self.unsynced.iter().rev());
        for overlay in layers {
            if let Some(v) = overlay.get(&key) {
                return Ok(v.clone());
            }
        }
        self.store.get(cf, &key.1)
    }

    /// [`Tx::get`], decoded from JSON.
    pub fn get_json<T: DeserializeOwned>(
        &self,
        cf: Cf,
        key: &[u8],
    ) -> Result<Option<T>, StoreError> {
        match self.get(cf, key)? {
            None => Ok(None),
            Some(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|e| StoreError::Corrupt {
                        what: format!("{} {}", cf.name(), String::from_utf8_lossy(key)),
                        detail: e.to_string(),
                    })
            }
        }
    }

    /// Put `value` at `key` of `cf`, in the same batch as the change's row.
    pub fn put(&mut self, cf: Cf, key: Vec<u8>, value: Vec<u8>) -> Result<(), StoreError> {
        Self::check(cf)?;
        self.ops.push((cf, key, Some(value)));
        Ok(())
    }

    /// [`Tx::put`] of `value` encoded as JSON.
    pub fn put_json<T: Serialize>(
        &mut self,
        cf: Cf,
        key: Vec<u8>,
        value: &T,
    ) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(value).map_err(|e| StoreError::Unencodable {
            what: format!("{} value", cf.name()),
            detail: e.to_string(),
        })?;
        self.put(cf, key, bytes)
    }

    /// Delete `key` of `cf`, in the same batch as the change's row.
    pub fn delete(&mut self, cf: Cf, key: Vec<u8>) -> Result<(), StoreError> {
        Self::check(cf)?;
        self.ops.push((cf, key, None));
        Ok(())
    }

    /// Only the writer itself writes the audit column family.
    fn check(cf: Cf) -> Result<(), StoreError> {
        if cf == Cf::Audit {
            return Err(StoreError::Corrupt {
                what: "audit column family".into(),
                detail: "a change may not write the audit column family".into(),
            });
        }
        Ok(())
    }
}
