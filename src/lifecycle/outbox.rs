//! Reading the outbox: the flagged rows after a position, with their entities.
//!
//! Only flagged rows have an `o`+seq entity, so the `o` keys are an index of what is to be
//! published: scanning them skips every unflagged row without reading it.

use serde::de::IgnoredAny;
use serde::Deserialize;

use crate::audit;
use crate::store::{keys, Cf, Store, StoreError};

/// What a lifecycle event is made of: the parts of its flagged row the event carries. Decoded
/// from the stored row without the rest (who, the detail map and the hashes are skipped, not
/// built): the publisher reads every flagged row once per sink.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct EventRow {
    /// The row's seq (from its key).
    #[serde(skip)]
    pub seq: u64,
    /// The row's commit time, unix milliseconds (from its key).
    #[serde(skip)]
    pub at: u64,
    /// `<kind>.<verb>`, e.g. `route.update`.
    pub action: String,
    /// The tenant the subject belongs to.
    pub tenant: Option<String>,
    /// The subject, e.g. `routes/r1`.
    pub resource: String,
    /// The subject's change counter after the change, where it has one.
    pub revision: Option<u64>,
    /// Whether the row is flagged for publication.
    pub publish: bool,
    /// A state-refresh row (`io.ankusa.<kind>.refreshed`).
    #[serde(default)]
    pub refresh: bool,
}

impl EventRow {
    /// Decode the row stored at `key` (which gives its seq and time).
    pub fn decode(key: &[u8], value: &[u8]) -> Result<EventRow, StoreError> {
        let (mut row, seq, at) = audit::decode_row_as::<EventRow>(key, value)?;
        row.seq = seq;
        row.at = at;
        Ok(row)
    }
}

/// Up to `limit` flagged rows with seq greater than `after`, in seq order, each with its
/// redacted entity: the stored JSON bytes, checked to be JSON but not parsed into a value
/// (the event splices them into its data as they are).
pub fn read(
    store: &Store,
    after: u64,
    limit: usize,
) -> Result<Vec<(EventRow, Vec<u8>)>, StoreError> {
    if after == u64::MAX || limit == 0 {
        return Ok(Vec::new());
    }
    let mut entities: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut failure = None;
    store.scan_once(
        Cf::Audit,
        &[keys::OUTBOX],
        &keys::outbox_key(after + 1),
        |k, v| {
            match (
                keys::decode_seq_key(keys::OUTBOX, k),
                serde_json::from_slice::<IgnoredAny>(v),
            ) {
                (Some(seq), Ok(_)) => entities.push((seq, v.to_vec())),
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
    // Each flagged row by seek, through one iterator over the rows.
    let mut rows: Vec<Option<Result<EventRow, StoreError>>> =
        entities.iter().map(|_| None).collect();
    let seeks = entities
        .iter()
        .map(|(seq, _)| keys::row_seek(*seq).to_vec());
    store.seek_each(Cf::Audit, &[keys::ROW], seeks, |i, k, v| {
        // The seek lands on the next row when this one is gone: keep only exact hits.
        if keys::decode_row_key(k).map(|(seq, _)| seq) == Some(entities[i].0) {
            rows[i] = Some(EventRow::decode(k, v));
        }
    })?;
    let mut out = Vec::with_capacity(entities.len());
    for ((seq, entity), row) in entities.into_iter().zip(rows) {
        match row {
            Some(Ok(row)) if row.publish => out.push((row, entity)),
            Some(Err(e)) => return Err(e),
            // An entity without its flagged row: retention deletes both in one batch, so
            // this is damage; skip it rather than publish an event no row explains.
            _ => tracing::warn!(seq, "outbox entity without a flagged row; skipped"),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rocksdb::WriteBatch;
    use serde_json::{json, Value};

    use super::*;
    use crate::audit::{Change, CommitError, Context, SystemClock, Trail, TrailOptions};

    async fn change(trail: &Trail, i: u64, flagged: bool) {
        trail
            .commit(Context::system(), move |_tx| {
                let mut c = Change::new("route.create", format!("routes/r{i}"));
                if flagged {
                    c = c.entity(json!({"id": i}));
                }
                Ok::<_, CommitError<()>>((c, ()))
            })
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn reads_flagged_rows_in_order_and_passes_over_a_missing_row() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let trail = Trail::start(
            store.clone(),
            TrailOptions::default(),
            Arc::new(SystemClock),
        )
        .unwrap();
        for (i, flagged) in [(1, true), (2, false), (3, true), (4, true), (5, true)] {
            change(&trail, i, flagged).await;
        }
        let page: Vec<u64> = read(&store, 0, 10)
            .unwrap()
            .iter()
            .map(|(r, _)| r.seq)
            .collect();
        assert_eq!(page, vec![1, 3, 4, 5]);
        // The parts of the full row an event carries.
        let (first, _) = &read(&store, 0, 1).unwrap()[0];
        let row = crate::audit::get(&store, 1).unwrap().unwrap();
        let expected = EventRow {
            seq: row.seq,
            at: row.at,
            action: row.action,
            tenant: row.tenant,
            resource: row.resource,
            revision: row.revision,
            publish: row.publish,
            refresh: row.refresh,
        };
        assert_eq!((first, first.resource.as_str()), (&expected, "routes/r1"));
        let entity = |bytes: &[u8]| serde_json::from_slice::<Value>(bytes).unwrap();
        assert_eq!(entity(&read(&store, 3, 1).unwrap()[0].1), json!({"id": 4}));
        // Damage: row 4 gone, its entity left behind. Rows 3 and 5 still pair with theirs.
        let row4 = crate::audit::get(&store, 4).unwrap().unwrap();
        let mut batch = WriteBatch::default();
        batch.delete_cf(store.cf(Cf::Audit), keys::row_key(4, row4.at));
        store.write(batch, true).unwrap();
        let page = read(&store, 0, 10).unwrap();
        let pairs: Vec<(u64, Value)> = page.into_iter().map(|(r, e)| (r.seq, entity(&e))).collect();
        assert_eq!(
            pairs,
            vec![
                (1, json!({"id": 1})),
                (3, json!({"id": 3})),
                (5, json!({"id": 5}))
            ]
        );
        trail.shutdown().await;
    }
}
