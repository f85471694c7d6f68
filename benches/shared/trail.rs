//! A big trail written straight into RocksDB, the way a node leaves one: each row with its
//! outbox entity (when it has one) and its index entries, and the meta that matches
//! (`m:audit_seq`, `m:audit_usage`, `m:index`). Committing a million rows through the writer
//! would take minutes of synced batches; this takes seconds, and a trail started on it finds
//! its counters exact (the retention bench checks that with a forced recount).

// Each bench includes this file and uses some of it.
#![allow(dead_code)]

use std::path::Path;

use ankusa::audit::{Row, Usage};
use ankusa::store::{keys, keys::meta, Cf};
use rocksdb::{ColumnFamilyDescriptor, DBCompressionType, Options, WriteBatch, DB};

/// Rows per unsynced batch while building.
const BATCH_ROWS: u64 = 10_000;

/// The store at `dir` opened as bare RocksDB, with the node's column families.
pub fn raw_db(dir: &Path) -> DB {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    let cfs = Cf::ALL.iter().map(|cf| {
        let mut o = Options::default();
        o.set_compression_type(DBCompressionType::Lz4);
        if *cf == Cf::Audit {
            o.set_write_buffer_size(64 << 20);
        }
        ColumnFamilyDescriptor::new(cf.name(), o)
    });
    DB::open_cf_descriptors(&opts, dir, cfs).unwrap()
}

/// Write rows `1..=n` into the store at `dir`: `row(seq)` gives each row (its `at` never
/// below its predecessor's, as the writer stamps them) and its outbox entity, if any. With
/// `confirmed_by`, that sink has confirmed every row (its position and `m:lifecycle_cursor`
/// at `n`). Returns the usage written to `m:audit_usage`.
pub fn build(
    dir: &Path,
    n: u64,
    mut row: impl FnMut(u64) -> (Row, Option<Vec<u8>>),
    confirmed_by: Option<&str>,
) -> Usage {
    let db = raw_db(dir);
    let audit = db.cf_handle(Cf::Audit.name()).unwrap();
    let mut usage = Usage {
        from: 1,
        ..Usage::default()
    };
    let mut batch = WriteBatch::default();
    for seq in 1..=n {
        let (row, entity) = row(seq);
        let (k, v) = (
            keys::row_key(seq, row.at),
            serde_json::to_vec(&row).unwrap(),
        );
        usage.rows += 1;
        usage.bytes += (k.len() + v.len()) as u64;
        batch.put_cf(audit, k, v);
        if let Some(entity) = entity {
            usage.bytes += (keys::SEQ_KEY_LEN + entity.len()) as u64;
            batch.put_cf(audit, keys::outbox_key(seq), entity);
        }
        // Its index entries, as a node writes them beside it.
        for entry in ankusa::audit::index_entries(&row) {
            usage.bytes += entry.len() as u64;
            batch.put_cf(audit, entry, []);
        }
        if seq.is_multiple_of(BATCH_ROWS) {
            db.write(std::mem::take(&mut batch)).unwrap();
        }
    }
    usage.seq = n;
    let meta_put =
        |b: &mut WriteBatch, name: &str, v: &[u8]| b.put_cf(audit, keys::meta_key(name), v);
    meta_put(&mut batch, meta::AUDIT_SEQ, &n.to_be_bytes());
    meta_put(&mut batch, meta::AUDIT_USAGE, &usage.encode());
    if let Some(sink) = confirmed_by {
        meta_put(&mut batch, &meta::sink_position(sink), &n.to_be_bytes());
        meta_put(&mut batch, meta::LIFECYCLE_CURSOR, &n.to_be_bytes());
    }
    meta_put(&mut batch, meta::INDEX, &[ankusa::audit::INDEX_FORMAT]);
    db.write(batch).unwrap();
    for cf in Cf::ALL {
        db.flush_cf(db.cf_handle(cf.name()).unwrap()).unwrap();
    }
    usage
}
