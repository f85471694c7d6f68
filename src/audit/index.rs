//! The rows' secondary index entries: by actor, by subject, by tenant, by time, and by a
//! result other than `ok` (key layouts in [`keys::Index`]).
//!
//! Entries are written with their row, in its batch (`writer/stage.rs`), deleted with it by
//! the same pruning batch (`bounds/prune.rs`), and counted in `m:audit_usage` beside it, so
//! after any crash there is never a row without its entries nor an entry without its row. A
//! store written before the entries existed has them built at its boot, once
//! ([`build_missing`]), before the writer serves.

use std::borrow::Cow;
use std::time::Instant;

use rocksdb::WriteBatch;
use serde::Deserialize;

use super::row::{decode_row_as, Row, RowResult};
use crate::store::{keys, keys::meta, Cf, Store, StoreError};
use crate::telemetry;

/// The format of the entries, kept in `m:index`: a store holding another has them rebuilt.
pub const FORMAT: u8 = 1;

/// Rows a boot that builds the entries reads and writes per batch.
const BUILD_BATCH: usize = 10_000;

/// The index entries of one row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Entries(Vec<Vec<u8>>);

impl Entries {
    /// The entries of row `seq` committed at `at`.
    fn of(
        seq: u64,
        at: u64,
        actor: &str,
        tenant: Option<&str>,
        resource: &str,
        result: RowResult,
    ) -> Entries {
        let result = match result {
            RowResult::Ok => None,
            RowResult::Failed => Some(keys::Index::Result(1)),
            RowResult::Interrupted => Some(keys::Index::Result(2)),
        };
        let indexes = [
            Some(keys::Index::Actor(actor)),
            Some(keys::Index::Subject(resource)),
            tenant.map(keys::Index::Tenant),
            Some(keys::Index::Time(at)),
            result,
        ];
        Entries(
            indexes
                .iter()
                .flatten()
                .filter_map(|i| i.key(seq))
                .collect(),
        )
    }

    /// The entries of `row`.
    pub(crate) fn of_row(row: &Row) -> Entries {
        Entries::of(
            row.seq,
            row.at,
            &row.actor,
            row.tenant.as_deref(),
            &row.resource,
            row.result,
        )
    }

    /// The entries of the row stored at `key` with `value`, decoding only what they need.
    pub(crate) fn of_stored(key: &[u8], value: &[u8]) -> Result<Entries, StoreError> {
        let (fields, seq, at) = decode_row_as::<Indexed<'_>>(key, value)?;
        let tenant = fields.tenant.as_deref();
        Ok(Entries::of(
            seq,
            at,
            &fields.actor,
            tenant,
            &fields.resource,
            fields.result,
        ))
    }

    /// Their bytes, as `m:audit_usage` counts them (keys; the values are empty).
    pub(crate) fn bytes(&self) -> u64 {
        self.0.iter().map(|k| k.len() as u64).sum()
    }

    /// Put them into `batch`.
    pub(crate) fn put(&self, audit: &rocksdb::ColumnFamily, batch: &mut WriteBatch) {
        for key in &self.0 {
            batch.put_cf(audit, key, []);
        }
    }

    /// The keys of the entries.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.0.iter().map(Vec::as_slice)
    }
}

/// The index entries of `row` as the writer puts them beside it: for a tool that builds a
/// store the way a node writes one (the benches), which then sets `m:index` to [`FORMAT`].
pub fn entries_of(row: &Row) -> Vec<Vec<u8>> {
    Entries::of_row(row).0
}

/// What a row's entries are made of, decoded from its stored JSON without the rest.
#[derive(Deserialize)]
struct Indexed<'a> {
    #[serde(borrow)]
    actor: Cow<'a, str>,
    #[serde(default)]
    tenant: Option<String>,
    #[serde(borrow)]
    resource: Cow<'a, str>,
    result: RowResult,
}

/// Build the entries of every row when the store has none of this format (`m:index`
/// missing: a store written before them, or one whose build a crash cut short). Runs at boot,
/// before the writer serves: the rows cannot change meanwhile. The caller writes `m:index`
/// and recounts `m:audit_usage` in its boot batch, after this returned `true`.
pub(crate) fn build_missing(store: &Store) -> Result<bool, StoreError> {
    let built = store.meta(meta::INDEX)?;
    if built.as_deref() == Some(&[FORMAT]) {
        return Ok(false);
    }
    let audit = store.cf(Cf::Audit);
    let started = Instant::now();
    let mut from = 0u64;
    let mut rows = 0u64;
    loop {
        let mut batch = WriteBatch::default();
        let mut read = 0;
        let mut failed = None;
        store.scan(Cf::Audit, &[keys::ROW], &keys::row_seek(from), |k, v| {
            match Entries::of_stored(k, v) {
                Ok(entries) => entries.put(audit, &mut batch),
                Err(e) => {
                    failed = Some(e);
                    return false;
                }
            }
            from = keys::decode_row_key(k).map_or(from, |(seq, _)| seq + 1);
            read += 1;
            read < BUILD_BATCH
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        // Each batch whole: a crash between two leaves `m:index` unwritten, and the next boot
        // builds again (the same entries: puts).
        store.write(batch, true)?;
        rows += read as u64;
        if read > 0 {
            telemetry::audit::index_building(rows);
        }
        if read < BUILD_BATCH {
            break;
        }
    }
    telemetry::audit::index_built(rows, started.elapsed());
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::row::ROW_FORMAT;

    fn row(seq: u64, tenant: Option<&str>, result: RowResult) -> Row {
        Row {
            v: ROW_FORMAT,
            seq,
            at: 1_700_000_000_000 + seq,
            actor: "alice".into(),
            remote_ip: None,
            request_id: None,
            action: "source.update".into(),
            tenant: tenant.map(str::to_owned),
            resource: "tenants/t1/sources/s1".into(),
            detail: Default::default(),
            before_hash: None,
            after_hash: None,
            revision: Some(2),
            result,
            publish: false,
            refresh: false,
            version: None,
            store: None,
            snapshot: None,
            traceparent: None,
            tracestate: None,
        }
    }

    #[test]
    fn a_rows_entries_are_the_same_from_the_row_and_from_its_stored_bytes() {
        for (tenant, result, count) in [
            (Some("t1"), RowResult::Ok, 4),
            (None, RowResult::Ok, 3),
            (Some("t1"), RowResult::Failed, 5),
            (None, RowResult::Interrupted, 4),
        ] {
            let row = row(7, tenant, result);
            let value = serde_json::to_vec(&row).unwrap();
            let key = keys::row_key(row.seq, row.at);
            let entries = Entries::of_row(&row);
            assert_eq!(entries.0.len(), count, "{tenant:?} {result:?}");
            assert_eq!(Entries::of_stored(&key, &value).unwrap(), entries);
            for entry in &entries.0 {
                assert_eq!(keys::decode_index_seq(entry), Some(7));
            }
        }
        let entries = Entries::of_row(&row(7, Some("t1"), RowResult::Failed));
        let expected: Vec<Vec<u8>> = [
            keys::Index::Actor("alice"),
            keys::Index::Subject("tenants/t1/sources/s1"),
            keys::Index::Tenant("t1"),
            keys::Index::Time(1_700_000_000_007),
            keys::Index::Result(1),
        ]
        .iter()
        .map(|i| i.key(7).unwrap())
        .collect();
        assert_eq!(entries.0, expected);
        assert_eq!(
            entries.bytes(),
            expected.iter().map(|k| k.len() as u64).sum::<u64>()
        );
    }
}
