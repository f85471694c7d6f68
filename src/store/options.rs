//! RocksDB's options for the node's store: background threads, the WAL (its recovery mode
//! and its bound), one shared block cache, and per-family table settings (larger blocks for
//! the trail).

use rocksdb::{BlockBasedOptions, Cache, ColumnFamilyDescriptor, DBCompressionType, Options};

use super::Cf;

pub(super) fn db_options() -> Options {
    let mut opts = Options::default();
    // Two cores on the machines this runs on: one flush and one compaction thread.
    opts.increase_parallelism(2);
    opts.set_max_background_jobs(2);
    // The WAL is the durability of every synced batch; keep it on (the default) and let
    // RocksDB recover a torn tail record after a kill -9 rather than refuse to open.
    opts.set_wal_recovery_mode(rocksdb::DBRecoveryMode::PointInTime);
    // Smooth out fsync cost of flushes and compactions instead of one large sync at the end.
    opts.set_bytes_per_sync(1 << 20);
    // RocksDB's own log (`LOG`) rolls only at open unless it has a size: a node that runs
    // for months would grow one file without end. Rolled, at most ten are kept.
    opts.set_max_log_file_size(INFO_LOG_BYTES);
    opts.set_keep_log_file_num(INFO_LOGS_KEPT);
    // Without a bound, a family written rarely (overrides, sources) keeps every WAL since
    // its last flush, up to 4 times all memtables (2.75 GB): a crash would replay all of
    // it at boot. Past this, such a family is flushed and its WALs deleted.
    opts.set_max_total_wal_size(MAX_TOTAL_WAL_BYTES);
    // No WAL recycling, though its syncs are cheaper: a secondary's catch-up (the CLI
    // reading a running node's store) spins forever on a recycled WAL (RocksDB 11.8).
    opts
}

/// The most WAL the store keeps: four of the trail's memtables.
pub(super) const MAX_TOTAL_WAL_BYTES: u64 = 128 << 20;

/// The size at which RocksDB's own log rolls over, and how many of them are kept.
pub(super) const INFO_LOG_BYTES: usize = 16 << 20;
pub(super) const INFO_LOGS_KEPT: usize = 10;

/// Bytes of the block cache shared by every column family. Reads past it fall back to the
/// OS page cache; the publisher reads the outbox sequentially, so a small cache costs little.
pub const BLOCK_CACHE_BYTES: usize = 16 << 20;

fn block_cache() -> &'static Cache {
    static CACHE: std::sync::OnceLock<Cache> = std::sync::OnceLock::new();
    CACHE.get_or_init(|| Cache::new_lru_cache(BLOCK_CACHE_BYTES))
}

/// The trail's family with an insert hint per key family. A group's batch interleaves rows,
/// outbox entities, pending rows and meta keys, each family in key order; with one hint
/// per first byte, each insert starts where its family's last one ended instead of at the
/// memtable's top level. (The option has no setter of its own in the crate.)
fn audit_memtable() -> Options {
    Options::default()
        .get_options_from_string(AUDIT_MEMTABLE)
        .expect("the audit family's memtable options are valid")
}

/// The options string of [`audit_memtable`]: a hint per key family (see [`super::keys`]).
pub(super) const AUDIT_MEMTABLE: &str =
    "memtable_insert_with_hint_prefix_extractor=rocksdb.FixedPrefix.1";

pub(super) fn cf_descriptors() -> Vec<ColumnFamilyDescriptor> {
    Cf::ALL
        .iter()
        .map(|cf| ColumnFamilyDescriptor::new(cf.name(), cf_options(*cf)))
        .collect()
}

fn cf_options(cf: Cf) -> Options {
    let mut opts = match cf {
        Cf::Audit => audit_memtable(),
        _ => Options::default(),
    };
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
