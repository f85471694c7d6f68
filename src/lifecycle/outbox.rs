//! Reading the outbox: the flagged rows after a position, with their entities.
//!
//! Only flagged rows have an `o`+seq entity, so the `o` keys are an index of what is to be
//! published: scanning them skips every unflagged row without reading it.

use serde_json::Value;

use crate::audit::{self, Row};
use crate::store::{keys, Cf, Store, StoreError};

/// Up to `limit` flagged rows with seq greater than `after`, in seq order, each with its
/// redacted entity.
pub fn read(store: &Store, after: u64, limit: usize) -> Result<Vec<(Row, Value)>, StoreError> {
    if after == u64::MAX || limit == 0 {
        return Ok(Vec::new());
    }
    let mut entities: Vec<(u64, Value)> = Vec::new();
    let mut failure = None;
    store.scan(
        Cf::Audit,
        &[keys::OUTBOX],
        &keys::outbox_key(after + 1),
        |k, v| {
            match (
                keys::decode_seq_key(keys::OUTBOX, k),
                serde_json::from_slice::<Value>(v),
            ) {
                (Some(seq), Ok(entity)) => entities.push((seq, entity)),
                (_, Err(e)) => {
                    failure = Some(StoreError::Corrupt {
                        what: format!("outbox entity {}", hex::encode(k)),
                        detail: e.to_string(),
                    })
                }
                (None, _) => {}
            }
            failure.is_none() && entities.len() < limit
        },
    )?;
    if let Some(e) = failure {
        return Err(e);
    }
    let mut out = Vec::with_capacity(entities.len());
    for (seq, entity) in entities {
        match audit::get(store, seq)? {
            Some(row) if row.publish => out.push((row, entity)),
            // An entity without its flagged row: retention deletes both in one batch, so
            // this is damage; skip it rather than publish an event no row explains.
            _ => tracing::warn!(seq, "outbox entity without a flagged row; skipped"),
        }
    }
    Ok(out)
}
