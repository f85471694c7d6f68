//! The node's RocksDB: column families, options, and typed access to meta entries.
//!
//! The store knows bytes and column families, never HTTP, subjects or rows. Writes to the
//! `audit` column family are the audit writer's alone (see `crate::audit::writer`); this
//! module only gives it the handle, the options and the meta codec.

pub mod backup;
pub mod keys;
pub mod owner_only;
pub mod restore;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, DBCompressionType,
    IteratorMode, Options, ReadOptions, WriteBatch, WriteOptions, DB,
};

/// A column family of the node's store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cf {
    /// The audit trail, pending rows, lifecycle outbox and meta (see [`keys`]).
    Audit,
    /// API-managed sources.
    Sources,
    /// Rate-limit overrides.
    Overrides,
    /// Quarantine entries.
    Quarantine,
    /// Replay jobs.
    ReplayJobs,
    /// Lifecycle events a sink refused for good, per sink.
    DeadLetters,
}

impl Cf {
    /// Every column family, in the order they are opened.
    pub const ALL: [Cf; 6] = [
        Cf::Audit,
        Cf::Sources,
        Cf::Overrides,
        Cf::Quarantine,
        Cf::ReplayJobs,
        Cf::DeadLetters,
    ];

    /// The column family's name on disk. Never renamed: stores outlive code.
    pub fn name(self) -> &'static str {
        match self {
            Cf::Audit => "audit",
            Cf::Sources => "sources",
            Cf::Overrides => "overrides",
            Cf::Quarantine => "quarantine",
            Cf::ReplayJobs => "replay_jobs",
            Cf::DeadLetters => "dead_letters",
        }
    }
}

/// Errors of the store layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// RocksDB refused an operation (I/O error, corruption, lock held by another process).
    #[error("rocksdb: {0}")]
    Rocks(#[from] rocksdb::Error),
    /// A value in the store could not be decoded.
    #[error("corrupt value at {what}: {detail}")]
    Corrupt {
        /// Which key or kind of value.
        what: String,
        /// What was wrong with it.
        detail: String,
    },
    /// The store (or the writer in front of it) is not taking requests: stopped or failed.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// An injected failure (failpoints, tests only).
    #[error("injected failure: {0}")]
    Injected(String),
}

/// A key and its value.
pub type Entry = (Vec<u8>, Vec<u8>);

/// A handle on the node's RocksDB. Cheap to clone; every clone shares one `DB`, which is
/// closed (and its lock released) when the last clone is dropped.
#[derive(Clone)]
pub struct Store {
    db: Arc<Open>,
    path: PathBuf,
}

/// The open database and the signal of its closing. Fields drop in order: the `DB` is
/// closed first, then `closed` is dropped, which wakes every [`Closing::wait`].
struct Open {
    db: DB,
    closed: tokio::sync::watch::Sender<()>,
}

impl Open {
    fn new(db: DB) -> Arc<Open> {
        Arc::new(Open {
            db,
            closed: tokio::sync::watch::Sender::new(()),
        })
    }
}

impl std::ops::Deref for Open {
    type Target = DB;

    fn deref(&self) -> &DB {
        &self.db
    }
}

/// Tells when a store has been closed: every clone of its [`Store`] dropped, RocksDB shut
/// down and its lock released. Holds no reference to the store itself.
pub struct Closing(tokio::sync::watch::Receiver<()>);

impl Closing {
    /// Resolve once the store is closed (at once if it already is).
    pub async fn wait(mut self) {
        // Nothing is ever sent: `changed` only returns, with an error, when the sender is
        // dropped with the database.
        let _ = self.0.changed().await;
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Open (creating if missing) the store at `path`, read-write. Only one process may hold
    /// it; a second gets RocksDB's lock error.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let mut opts = db_options();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        let db = DB::open_cf_descriptors(&opts, path, cf_descriptors())?;
        Ok(Store {
            db: Open::new(db),
            path: path.to_owned(),
        })
    }

    /// Open the store at `primary` as a secondary instance (its own info log and state in
    /// `scratch`), so that tools can read a store a running node holds. Call
    /// [`Store::catch_up`] to see the primary's latest writes.
    pub fn open_secondary(primary: &Path, scratch: &Path) -> Result<Store, StoreError> {
        let mut opts = db_options();
        // A secondary must keep every table file open: it cannot learn which ones the
        // primary deleted otherwise.
        opts.set_max_open_files(-1);
        let names: Vec<&str> = Cf::ALL.iter().map(|cf| cf.name()).collect();
        let db = DB::open_cf_as_secondary(&opts, primary, scratch, names)?;
        Ok(Store {
            db: Open::new(db),
            path: primary.to_owned(),
        })
    }

    /// Replay the primary's newest WAL and manifest into this secondary instance.
    pub fn catch_up(&self) -> Result<(), StoreError> {
        Ok(self.db.try_catch_up_with_primary()?)
    }

    /// A handle that resolves once this store is closed (the last clone dropped).
    pub fn closing(&self) -> Closing {
        Closing(self.db.closed.subscribe())
    }

    /// The directory the store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The handle of a column family. Every family is opened with the store, so this
    /// cannot fail on a store this module opened.
    pub(crate) fn cf(&self, cf: Cf) -> &ColumnFamily {
        self.db
            .cf_handle(cf.name())
            .expect("every column family is opened with the store")
    }

    /// Point read.
    pub fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.db.get_cf(self.cf(cf), key)?)
    }

    /// Read meta entry `m:<name>`.
    pub fn meta(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.get(Cf::Audit, &keys::meta_key(name))
    }

    /// Read a big-endian u64 meta entry; absent reads as 0.
    pub fn meta_u64(&self, name: &str) -> Result<u64, StoreError> {
        match self.meta(name)? {
            None => Ok(0),
            Some(v) => decode_u64(&v).ok_or_else(|| StoreError::Corrupt {
                what: format!("m:{name}"),
                detail: format!("expected 8 bytes, found {}", v.len()),
            }),
        }
    }

    /// Forward scan of `cf` from `from` (inclusive) while keys start with `prefix`, calling
    /// `visit` with each entry until it returns `false`.
    pub fn scan(
        &self,
        cf: Cf,
        prefix: &[u8],
        from: &[u8],
        mut visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        let mut ro = ReadOptions::default();
        // Bound the iterator so RocksDB stops at the end of the prefix instead of walking
        // tombstones beyond it.
        if let Some(upper) = prefix_upper_bound(prefix) {
            ro.set_iterate_upper_bound(upper);
        }
        // A raw iterator lends each key and value instead of copying them into new boxes:
        // scans of the whole trail (recount, retention) visit millions of entries.
        let mut iter = self.db.raw_iterator_cf_opt(self.cf(cf), ro);
        iter.seek(from);
        while let (Some(k), Some(v)) = (iter.key(), iter.value()) {
            if !k.starts_with(prefix) || !visit(k, v) {
                break;
            }
            iter.next();
        }
        Ok(iter.status()?)
    }

    /// A cursor over the entries of `cf` whose keys start with `prefix`, for data read once
    /// (the publisher's pages): the blocks it reads do not go into the block cache, so a long
    /// drain neither grows the process nor evicts what point lookups keep there. Several
    /// cursors may walk the store side by side.
    pub fn cursor(&self, cf: Cf, prefix: &[u8]) -> Cursor<'_> {
        let mut ro = ReadOptions::default();
        ro.fill_cache(false);
        if let Some(upper) = prefix_upper_bound(prefix) {
            ro.set_iterate_upper_bound(upper);
        }
        Cursor {
            iter: self.db.raw_iterator_cf_opt(self.cf(cf), ro),
            prefix: prefix.to_vec(),
            placed: false,
        }
    }

    /// The last entry of `cf` whose key starts with `prefix`.
    pub fn last(&self, cf: Cf, prefix: &[u8]) -> Result<Option<Entry>, StoreError> {
        let mut ro = ReadOptions::default();
        if let Some(upper) = prefix_upper_bound(prefix) {
            ro.set_iterate_upper_bound(upper);
        }
        ro.set_iterate_lower_bound(prefix.to_vec());
        let mut iter = self.db.iterator_cf_opt(self.cf(cf), ro, IteratorMode::End);
        match iter.next() {
            Some(item) => {
                let (k, v) = item?;
                Ok(Some((k.into_vec(), v.into_vec())))
            }
            None => Ok(None),
        }
    }

    /// Write `batch` atomically; `sync` makes the WAL durable (fsync) before returning.
    pub(crate) fn write(&self, batch: WriteBatch, sync: bool) -> Result<(), StoreError> {
        let mut wo = WriteOptions::default();
        wo.set_sync(sync);
        Ok(self.db.write_opt(batch, &wo)?)
    }

    /// Compact the keys of `cf` in `[from, to)`: after a large deletion, so that the
    /// tombstones are dropped instead of walked by every scan that starts below them. Blocks
    /// for as long as the compaction takes; it changes no value.
    pub fn compact_range(&self, cf: Cf, from: &[u8], to: &[u8]) {
        self.db.compact_range_cf(self.cf(cf), Some(from), Some(to));
    }

    /// Flush the memtables and wait until no compaction is pending or running: the store at
    /// rest, as after a quiet spell. Benchmarks call it between filling a store and reading it,
    /// so that what they time is the reader, not the compaction the fill left behind.
    pub fn quiesce(&self) -> Result<(), StoreError> {
        let mut opts = rocksdb::WaitForCompactOptions::default();
        opts.set_flush(true);
        Ok(self.db.wait_for_compact(&opts)?)
    }

    /// Flush memtables to table files (for a clean close and for tools).
    pub fn flush(&self) -> Result<(), StoreError> {
        for cf in Cf::ALL {
            self.db.flush_cf(self.cf(cf))?;
        }
        Ok(())
    }
}

/// A forward cursor over one key prefix of a column family (see [`Store::cursor`]). Keys
/// and values are lent, not copied: they are valid until the cursor moves.
pub struct Cursor<'a> {
    iter: rocksdb::DBRawIterator<'a>,
    prefix: Vec<u8>,
    /// Whether the cursor was ever placed (by a seek).
    placed: bool,
}

impl Cursor<'_> {
    /// How many entries [`advance_to`](Cursor::advance_to) steps over before a seek is
    /// cheaper.
    const MAX_STEPS: usize = 8;

    /// Place the cursor on the first entry at or after `key`.
    pub fn seek(&mut self, key: &[u8]) {
        self.iter.seek(key);
        self.placed = true;
    }

    /// Move forward to the first entry at or after `key`. When it is a few entries ahead
    /// (dense lookups in key order, the common case) the cursor steps to it, which costs a
    /// fraction of a seek; farther away, or before the cursor was placed, it seeks. Never
    /// moves back: a `key` behind the cursor leaves it where it is.
    pub fn advance_to(&mut self, key: &[u8]) {
        if !self.placed {
            return self.seek(key);
        }
        for _ in 0..Self::MAX_STEPS {
            match self.iter.key() {
                Some(k) if k < key => self.iter.next(),
                Some(_) => return,
                // Past the last entry, or failed: a seek tells which (see `finish`).
                None => break,
            }
        }
        if self.iter.key().is_none_or(|k| k < key) {
            self.iter.seek(key);
        }
    }

    /// Step to the next entry.
    pub fn next(&mut self) {
        self.iter.next();
    }

    /// The entry under the cursor; `None` past the last entry of the prefix (or on an error,
    /// which [`finish`](Cursor::finish) reports).
    pub fn entry(&self) -> Option<(&[u8], &[u8])> {
        match (self.iter.key(), self.iter.value()) {
            (Some(k), Some(v)) if k.starts_with(&self.prefix) => Some((k, v)),
            _ => None,
        }
    }

    /// The error that stopped the cursor, if one did.
    pub fn finish(&self) -> Result<(), StoreError> {
        Ok(self.iter.status()?)
    }
}

/// Decode a big-endian u64 value.
pub fn decode_u64(v: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(v.try_into().ok()?))
}

/// The smallest key greater than every key starting with `prefix` (`None`: unbounded).
fn prefix_upper_bound(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut upper = prefix.to_vec();
    while let Some(last) = upper.pop() {
        if last < u8::MAX {
            upper.push(last + 1);
            return Some(upper);
        }
    }
    None
}

fn db_options() -> Options {
    let mut opts = Options::default();
    // Two cores on the machines this runs on: one flush and one compaction thread.
    opts.increase_parallelism(2);
    opts.set_max_background_jobs(2);
    // The WAL is the durability of every synced batch; keep it on (the default) and let
    // RocksDB recover a torn tail record after a kill -9 rather than refuse to open.
    opts.set_wal_recovery_mode(rocksdb::DBRecoveryMode::PointInTime);
    // Smooth out fsync cost of flushes and compactions instead of one large sync at the end.
    opts.set_bytes_per_sync(1 << 20);
    opts.set_keep_log_file_num(10);
    opts
}

/// Bytes of the block cache shared by every column family. Reads past it fall back to the
/// OS page cache; the publisher reads the outbox sequentially, so a small cache costs little.
pub const BLOCK_CACHE_BYTES: usize = 16 << 20;

fn block_cache() -> &'static Cache {
    static CACHE: std::sync::OnceLock<Cache> = std::sync::OnceLock::new();
    CACHE.get_or_init(|| Cache::new_lru_cache(BLOCK_CACHE_BYTES))
}

fn cf_descriptors() -> Vec<ColumnFamilyDescriptor> {
    Cf::ALL
        .iter()
        .map(|cf| ColumnFamilyDescriptor::new(cf.name(), cf_options(*cf)))
        .collect()
}

fn cf_options(cf: Cf) -> Options {
    let mut opts = Options::default();
    // LZ4: cheap on CPU, and JSON rows compress well.
    opts.set_compression_type(DBCompressionType::Lz4);
    let mut table = BlockBasedOptions::default();
    // One block cache for every column family (RocksDB would give each its own): the
    // node's memory stays bounded however many families are read.
    table.set_block_cache(block_cache());
    // Point reads of subjects and meta keys: a bloom filter saves a disk read on a miss.
    table.set_bloom_filter(10.0, false);
    // Index and filter blocks live in the shared cache too, so its size bounds them.
    table.set_cache_index_and_filter_blocks(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    // A memtable allocates its arena in blocks of this size: small blocks keep a family
    // that sees few writes (meta, positions, subjects) from holding megabytes.
    opts.set_arena_block_size(1 << 20);
    if cf == Cf::Audit {
        // The trail is append-mostly and scanned in order; larger memtables mean fewer,
        // larger flushes under group commit.
        opts.set_write_buffer_size(32 << 20);
        // Larger blocks for the same reason: a scan (the publisher's pages, retention,
        // recounts) reads, checks and decompresses a quarter as many, and LZ4 finds more to
        // share in them. Point reads of a row or meta key are rare or cached.
        table.set_block_size(16 << 10);
    }
    opts.set_block_based_table_factory(&table);
    opts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_upper_bound_is_tight() {
        assert_eq!(prefix_upper_bound(b"a"), Some(b"b".to_vec()));
        assert_eq!(prefix_upper_bound(b"m:"), Some(b"m;".to_vec()));
        assert_eq!(prefix_upper_bound(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_upper_bound(&[0xff]), None);
    }

    #[tokio::test]
    async fn closing_resolves_once_the_last_clone_is_dropped_and_the_lock_is_free() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let reader = store.clone();
        let closing = store.closing();
        let mut waiting = tokio::spawn(closing.wait());
        drop(store);
        let early = tokio::time::timeout(std::time::Duration::from_millis(50), &mut waiting).await;
        assert!(early.is_err(), "resolved while a clone was still open");
        assert!(
            Store::open(dir.path()).is_err(),
            "the lock was free too soon"
        );
        std::thread::spawn(move || drop(reader)).join().unwrap();
        waiting.await.unwrap();
        Store::open(dir.path()).expect("the lock is free once closing resolved");
        // A store already closed resolves at once.
        let store = Store::open(dir.path()).unwrap();
        let closing = store.closing();
        drop(store);
        closing.wait().await;
    }

    #[test]
    fn quiesce_leaves_no_memtable_and_no_compaction_behind() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let audit = store.cf(Cf::Audit);
        let int = |name: &str| {
            store
                .db
                .property_int_value_cf(audit, name)
                .unwrap()
                .unwrap()
        };
        // Eight table files in level 0 (twice the compaction trigger), then a write that
        // is only in the memtable.
        for file in 0u32..8 {
            let mut b = WriteBatch::default();
            for n in 0u32..100 {
                b.put_cf(audit, [file.to_be_bytes(), n.to_be_bytes()].concat(), b"v");
            }
            store.write(b, false).unwrap();
            store.db.flush_cf(audit).unwrap();
        }
        store.db.put_cf(audit, b"last", b"v").unwrap();
        assert_eq!(int("rocksdb.num-entries-active-mem-table"), 1);
        store.quiesce().unwrap();
        assert_eq!(int("rocksdb.num-entries-active-mem-table"), 0);
        assert_eq!(int("rocksdb.compaction-pending"), 0);
        assert_eq!(int("rocksdb.num-running-compactions"), 0);
        assert!(int("rocksdb.num-files-at-level0") < 4);
        assert_eq!(
            store.get(Cf::Audit, b"last").unwrap().as_deref(),
            Some(&b"v"[..])
        );
    }

    #[test]
    fn scan_stays_inside_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut b = WriteBatch::default();
        for k in [&b"a1"[..], b"a2", b"b1", b"m:x"] {
            b.put_cf(store.cf(Cf::Audit), k, b"v");
        }
        store.write(b, true).unwrap();
        let mut seen = vec![];
        store
            .scan(Cf::Audit, b"a", b"a", |k, _| {
                seen.push(k.to_vec());
                true
            })
            .unwrap();
        assert_eq!(seen, vec![b"a1".to_vec(), b"a2".to_vec()]);
    }

    #[test]
    fn cursor_advances_to_the_first_entry_at_or_after_each_target_near_or_far() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let key = |n: u32| [&b"a"[..], &n.to_be_bytes()].concat();
        let mut b = WriteBatch::default();
        // Every even number below 200, then 1000; and an entry past the prefix.
        for n in (0..200).step_by(2).chain([1000]) {
            b.put_cf(store.cf(Cf::Audit), key(n), n.to_be_bytes());
        }
        b.put_cf(store.cf(Cf::Audit), b"b", b"x");
        store.write(b, true).unwrap();
        // Near targets (stepped to), a missing one (lands on the next), far ones (sought),
        // one behind the cursor (stays), one past every entry of the prefix (ends the walk).
        let targets = [0u32, 2, 4, 5, 10, 100, 101, 198, 500, 400, 1000, 1001, 1002];
        let mut cursor = store.cursor(Cf::Audit, b"a");
        let mut seen = vec![];
        for target in targets {
            cursor.advance_to(&key(target));
            let found = cursor.entry().map(|(k, v)| {
                assert_eq!(&k[1..], v);
                u32::from_be_bytes(v.try_into().unwrap())
            });
            seen.push((target, found));
        }
        cursor.finish().unwrap();
        let expected = [
            (0, Some(0)),
            (2, Some(2)),
            (4, Some(4)),
            (5, Some(6)),
            (10, Some(10)),
            (100, Some(100)),
            (101, Some(102)),
            (198, Some(198)),
            (500, Some(1000)),
            (400, Some(1000)),
            (1000, Some(1000)),
            (1001, None),
            (1002, None),
        ];
        assert_eq!(seen, expected);
        // A fresh cursor's first move is a seek; `next` walks on inside the prefix only.
        let mut cursor = store.cursor(Cf::Audit, b"a");
        cursor.seek(&key(196));
        let mut walked = vec![];
        while let Some((_, v)) = cursor.entry() {
            walked.push(u32::from_be_bytes(v.try_into().unwrap()));
            cursor.next();
        }
        assert_eq!(walked, vec![196, 198, 1000]);
    }
}
