//! The node's RocksDB: column families, options, and typed access to meta entries.
//!
//! The store knows bytes and column families, never HTTP, subjects or rows. Writes to the
//! `audit` column family are the audit writer's alone (see `crate::audit::writer`); this
//! module only gives it the handle, the options and the meta codec.

pub mod backup;
pub mod blocking;
pub mod keys;
mod options;
pub mod owner_only;
pub mod restore;
mod walk;

pub use options::BLOCK_CACHE_BYTES;
use options::{cf_descriptors, db_options};
pub use walk::Walk;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocksdb::{ColumnFamily, IteratorMode, ReadOptions, WriteBatch, WriteOptions, DB};

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
    /// A batch was not written: the write failed (`detail`), or a batch it was prepared on
    /// top of did.
    #[error("store unavailable: batch not written: {0}")]
    Unwritten(String),
    /// The trail did not write a row the node makes itself (`what`): it stopped, or the
    /// backlog (`backlog`) or a refusal kept the row out.
    #[error("store unavailable: the trail did not write {what}{}", at_ceiling(.backlog))]
    NotRecorded {
        /// Which row.
        what: &'static str,
        /// Whether the outbox backlog ceiling kept it out.
        backlog: bool,
    },
    /// Work that runs one at a time (`what`) is already running.
    #[error("store unavailable: {0} is already running")]
    Busy(&'static str),
    /// Redis did not answer, failed, or refused (the error's kind and code, never its URL).
    #[error("store unavailable: redis: {0}")]
    Redis(String),
    /// A shared store's settings that cannot work: a URL or a sentinel that is not one, a
    /// node whose `fleet_secret` is not the fleet's.
    #[error("store unavailable: {0}")]
    Misconfigured(String),
    /// A value the node made does not encode (a map with keys that are not strings, say):
    /// a bug, not the store's doing.
    #[error("{what} does not encode: {detail}")]
    Unencodable {
        /// Which value.
        what: String,
        /// What serde said.
        detail: String,
    },
    /// A part the call needs has stopped: the audit writer, the node, the outbox reader.
    #[error("store unavailable: {0} stopped")]
    Stopped(&'static str),
    /// An injected failure (failpoints, tests only).
    #[error("injected failure: {0}")]
    Injected(String),
    /// Work on the blocking pool (see `blocking`) or a thread of its own did not finish: it
    /// panicked, could not start, or the runtime is shutting down.
    #[error("{what} did not finish: {detail}")]
    Task {
        /// The work.
        what: &'static str,
        /// tokio's word for why.
        detail: String,
    },
}

/// What [`StoreError::NotRecorded`] adds when the backlog ceiling kept the row out.
fn at_ceiling(backlog: &bool) -> &'static str {
    if *backlog {
        " (at its backlog ceiling)"
    } else {
        ""
    }
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

    /// Read a JSON meta entry `m:<name>`; absent reads as `None`, undecodable as damage.
    pub fn meta_json<T: serde::de::DeserializeOwned>(
        &self,
        name: &str,
    ) -> Result<Option<T>, StoreError> {
        self.meta(name)?
            .map(|v| {
                serde_json::from_slice(&v).map_err(|e| StoreError::Corrupt {
                    what: format!("m:{name}"),
                    detail: e.to_string(),
                })
            })
            .transpose()
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

    /// A walk over the entries of `cf` whose keys start with `prefix`, for data read once
    /// (the publisher's pages): the blocks it reads do not go into the block cache, so a long
    /// drain neither grows the process nor evicts what point lookups keep there. Several
    /// walks may go through the store side by side.
    pub fn walk(&self, cf: Cf, prefix: &[u8]) -> Walk<'_> {
        self.walk_filling(cf, prefix, false)
    }

    /// A walk whose reads go into the block cache: for the rows a query's index entries name,
    /// read a few at a time and often again (an auditor pages back and forth), where the
    /// blocks are worth keeping.
    pub fn seeks(&self, cf: Cf, prefix: &[u8]) -> Walk<'_> {
        self.walk_filling(cf, prefix, true)
    }

    fn walk_filling(&self, cf: Cf, prefix: &[u8], fill_cache: bool) -> Walk<'_> {
        let mut ro = ReadOptions::default();
        ro.fill_cache(fill_cache);
        if let Some(upper) = prefix_upper_bound(prefix) {
            ro.set_iterate_upper_bound(upper);
        }
        Walk {
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

#[cfg(test)]
mod tests;
