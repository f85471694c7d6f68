//! `m:audit_usage`: how many rows and bytes the trail holds, kept in every batch so that
//! ceilings can be checked without scanning the trail.

use serde::{Deserialize, Serialize};

use crate::store::{keys, Cf, Store, StoreError};

/// Rows and bytes of the trail (row keys and values, plus their outbox entities), valid for
/// the trail as of `seq`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Trail rows.
    pub rows: u64,
    /// Bytes of rows and their outbox entities (keys and values).
    pub bytes: u64,
    /// The `m:audit_seq` these figures are valid for.
    pub seq: u64,
}

impl Usage {
    /// Decode `m:audit_usage`; `None` when it cannot be read (then recount).
    pub fn decode(bytes: &[u8]) -> Option<Usage> {
        serde_json::from_slice(bytes).ok()
    }

    /// Encode for `m:audit_usage`.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("usage always serializes")
    }

    /// Count the trail as it is in `store`, valid for `seq`.
    pub fn recount(store: &Store, seq: u64) -> Result<Usage, StoreError> {
        let mut usage = Usage {
            seq,
            ..Usage::default()
        };
        store.scan(Cf::Audit, &[keys::ROW], &[keys::ROW], |k, v| {
            usage.rows += 1;
            usage.bytes += (k.len() + v.len()) as u64;
            true
        })?;
        store.scan(Cf::Audit, &[keys::OUTBOX], &[keys::OUTBOX], |k, v| {
            usage.bytes += (k.len() + v.len()) as u64;
            true
        })?;
        Ok(usage)
    }
}
