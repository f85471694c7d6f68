//! The pending row `p`+id: what a begun dual write is about to do, and reading it back.
//!
//! A pending row is written before the change is applied to the other store, and deleted in
//! the batch that writes its trail row. Its id counts apart from seqs, in `m:pending_seq`: a
//! begun change never holds a trail seq (see `dual/mod.rs`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::store::{keys, keys::meta, Cf, Store, StoreError};

/// The format version written into every pending row.
pub const PENDING_FORMAT: u32 = 1;

/// A pending row: what a begun change is about to do. Never a secret or a spec, like a row,
/// nor an entity. A delete's entity (redacted, when lifecycle events are on) is beside it at
/// `q`+id (written in the same batch), and finishing moves it to `o`+seq: a delete's event
/// carries the subject as it was, which a settlement after a crash cannot read back. Any
/// other change's entity is the view of the subject it writes, which settlement reads back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingRow {
    /// Format version ([`PENDING_FORMAT`]).
    pub v: u32,
    /// When it was begun (unix milliseconds).
    pub begun_at: u64,
    /// Who asked.
    pub actor: String,
    /// The client's address.
    pub remote_ip: Option<String>,
    /// The request's id.
    pub request_id: Option<String>,
    /// `<kind>.<verb>`, e.g. `route.update`.
    pub action: String,
    /// The subject's tenant.
    pub tenant: Option<String>,
    /// The subject, e.g. `routes/r1`.
    pub resource: String,
    /// What the caller put in the detail.
    pub detail: Map<String, Value>,
    /// HMAC of the subject before the change.
    pub before_hash: Option<String>,
    /// HMAC of the subject as the change is about to write it.
    pub after_hash: Option<String>,
    /// The subject's revision after the change.
    pub revision: Option<u64>,
    /// The subject's kind: which reconciler settles it (`None`: none can).
    pub kind: Option<String>,
    /// Where the reconciler finds the subject.
    pub locator: Option<Value>,
    /// Only in pending rows written before the entity moved to `q`+id: the redacted entity
    /// to publish if the change settles `ok`. Read, never written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entity: Option<Value>,
    /// The W3C `traceparent` of the change, for its trail row (see [`crate::audit::Row`]),
    /// so a change settled after a crash keeps its trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The W3C `tracestate` of the change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

/// Decode a pending row's value.
pub fn decode_pending(key: &[u8], value: &[u8]) -> Result<PendingRow, StoreError> {
    serde_json::from_slice(value).map_err(|e| StoreError::Corrupt {
        what: format!("pending row {}", hex::encode(key)),
        detail: e.to_string(),
    })
}

/// Every pending row of the store, by id, in id order.
pub fn pending_rows(store: &Store) -> Result<Vec<(u64, PendingRow)>, StoreError> {
    let mut rows = Vec::new();
    let mut failure = None;
    store.scan(Cf::Audit, &[keys::PENDING], &[keys::PENDING], |k, v| {
        match (keys::decode_seq_key(keys::PENDING, k), decode_pending(k, v)) {
            (Some(id), Ok(row)) => rows.push((id, row)),
            (_, Err(e)) => failure = Some(e),
            (None, _) => {}
        }
        failure.is_none()
    })?;
    failure.map_or(Ok(rows), Err)
}

/// The last pending id handed out: `m:pending_seq`, or the newest pending row if a damaged
/// store says less. Never hand out an id twice.
pub(crate) fn last_id(store: &Store) -> Result<u64, StoreError> {
    let newest = store
        .last(Cf::Audit, &[keys::PENDING])?
        .and_then(|(k, _)| keys::decode_seq_key(keys::PENDING, &k))
        .unwrap_or(0);
    let last = store.meta_u64(meta::PENDING_SEQ)?.max(newest);
    crate::audit::writer::reachable("m:pending_seq", last)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rocksdb::WriteBatch;

    /// A pending row of `action` on route r1 (tests beside this one use it too).
    pub(crate) fn row(action: &str) -> PendingRow {
        PendingRow {
            v: PENDING_FORMAT,
            begun_at: 1,
            actor: "alice".into(),
            remote_ip: None,
            request_id: None,
            action: action.into(),
            tenant: Some("t1".into()),
            resource: "routes/r1".into(),
            detail: Map::new(),
            before_hash: None,
            after_hash: Some("ab".into()),
            revision: Some(1),
            kind: Some("route".into()),
            locator: Some(serde_json::json!({"tenant": "t1", "id": "r1"})),
            entity: None,
            traceparent: None,
            tracestate: None,
        }
    }

    #[test]
    fn the_last_id_is_never_below_a_stored_pending_row() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(last_id(&store).unwrap(), 0);
        let mut batch = WriteBatch::default();
        let audit = store.cf(Cf::Audit);
        batch.put_cf(audit, keys::meta_key(meta::PENDING_SEQ), 5u64.to_be_bytes());
        for (id, action) in [(3, "route.create"), (7, "route.update")] {
            let value = serde_json::to_vec(&row(action)).unwrap();
            batch.put_cf(audit, keys::pending_key(id), value);
        }
        store.write(batch, true).unwrap();
        // A damaged m:pending_seq below a stored row: the row wins.
        assert_eq!(last_id(&store).unwrap(), 7);
        let rows = pending_rows(&store).unwrap();
        assert_eq!(rows.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [3, 7]);
        assert_eq!(rows[1].1, row("route.update"));
        let mut batch = WriteBatch::default();
        batch.put_cf(audit, keys::pending_key(9), b"not json");
        store.write(batch, true).unwrap();
        assert!(matches!(
            pending_rows(&store),
            Err(StoreError::Corrupt { .. })
        ));
    }
}
