//! The nodes as the store holds them: which are stored ([`Layout`]), how they are read back
//! ([`Stored`]), how many rows they cover ([`stored_size`]) and what pruning a row deletes of
//! them ([`prune`]).

use rocksdb::{ColumnFamily, WriteBatch};
use serde::{Deserialize, Serialize};
use tlog_tiles::{Error as TlogError, Hash, HashReader};

use crate::store::{keys, Cf, Store, StoreError};

/// Subtrees of this many levels and more are stored with the leaves; smaller ones are hashed
/// again from their leaves when read. 4: a row stores 1.125 nodes on average, and a proof
/// reads at most 30 leaves more.
pub const STORED_LEVEL: u8 = 4;

/// Which nodes a store holds (`m:tree`'s `layout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// Every node: stores written before [`Layout::Thin`]; thinned out at start.
    Every,
    /// The leaves, and the subtrees of [`STORED_LEVEL`] levels or more.
    Thin,
}

impl Layout {
    /// Whether a node at `level` is stored.
    pub fn stores(self, level: u8) -> bool {
        match self {
            Layout::Every => true,
            Layout::Thin => level == 0 || level >= STORED_LEVEL,
        }
    }
}

/// Delete from `batch` the nodes that only pruned rows need: `seqs` are the rows a batch
/// deletes, oldest first, each the oldest row left before it (retention and the ceilings
/// delete from the head). For leaf `k`, that is every inner node leaf `k` completed but the
/// largest (the frontier at `k + 1` keeps it) and the frontier roots that largest consumed;
/// and, once `k` ends a run of 2^[`STORED_LEVEL`] leaves, their leaves, which the frontier's
/// smaller roots were hashed from until then.
pub(crate) fn prune(audit: &ColumnFamily, batch: &mut WriteBatch, origin: u64, seqs: &[u64]) {
    for &seq in seqs.iter().filter(|&&s| s >= origin) {
        let k = seq - origin;
        let completed = (k + 1).trailing_zeros() as u8;
        for level in (1..completed).filter(|&l| Layout::Thin.stores(l)) {
            // The frontier root it consumed at this level, then its own node there.
            batch.delete_cf(
                audit,
                keys::tree_key(tlog_tiles::stored_hash_index(level, (k >> level) - 1)),
            );
            batch.delete_cf(
                audit,
                keys::tree_key(tlog_tiles::stored_hash_index(level, k >> level)),
            );
        }
        if completed >= STORED_LEVEL {
            let first = k + 1 - (1 << STORED_LEVEL);
            for leaf in first..=k {
                batch.delete_cf(
                    audit,
                    keys::tree_key(tlog_tiles::stored_hash_index(0, leaf)),
                );
            }
        }
    }
}

/// The size of the stored tree: the leaves whose nodes the last stored node completes.
pub(crate) fn stored_size(store: &Store) -> Result<u64, StoreError> {
    let Some((key, _)) = store.last(Cf::Audit, &[keys::TREE])? else {
        return Ok(0);
    };
    let index = keys::decode_seq_key(keys::TREE, &key).ok_or_else(|| StoreError::Corrupt {
        what: "the audit tree".into(),
        detail: "a tree key of the wrong length".into(),
    })?;
    let (level, n) = tlog_tiles::split_stored_hash_index(index);
    // The last node an append stores is the largest subtree it completes: record
    // ((n + 1) << level) - 1.
    Ok((n + 1) << level)
}

/// Reads nodes from the store (written batches only): stored ones as they are, the subtrees
/// below [`STORED_LEVEL`] hashed from their leaves.
pub(crate) struct Stored<'a>(pub &'a Store);

impl Stored<'_> {
    fn node(&self, index: u64) -> Result<Hash, TlogError> {
        if let Some(hash) = self.get(index)? {
            return Ok(hash);
        }
        let (level, n) = tlog_tiles::split_stored_hash_index(index);
        if level == 0 || level >= STORED_LEVEL {
            return Err(TlogError::IndexesNotInTree);
        }
        self.subtree(level, n)
    }

    fn get(&self, index: u64) -> Result<Option<Hash>, TlogError> {
        match self.0.get(Cf::Audit, &keys::tree_key(index)) {
            Ok(Some(v)) => <[u8; 32]>::try_from(v.as_slice())
                .map(|h| Some(Hash(h)))
                .map_err(|_| TlogError::MalformedHash),
            Ok(None) => Ok(None),
            Err(e) => Err(TlogError::InvalidInput(e.to_string())),
        }
    }

    /// The subtree at `level` over leaves `n << level` on, from its leaves, read in one scan.
    fn subtree(&self, level: u8, n: u64) -> Result<Hash, TlogError> {
        let (first, width) = (n << level, 1u64 << level);
        let mut leaves = Vec::with_capacity(width as usize);
        let mut bad = None;
        let start = keys::tree_key(tlog_tiles::stored_hash_index(0, first));
        let scanned = self.0.scan(Cf::Audit, &[keys::TREE], &start, |k, v| {
            let Some(index) = keys::decode_seq_key(keys::TREE, k) else {
                return true;
            };
            // Inner nodes between the leaves are skipped (a store of every node has them).
            if let (0, leaf) = tlog_tiles::split_stored_hash_index(index) {
                if leaf != first + leaves.len() as u64 {
                    return false;
                }
                match <[u8; 32]>::try_from(v) {
                    Ok(h) => leaves.push(Hash(h)),
                    Err(_) => {
                        bad = Some(TlogError::MalformedHash);
                        return false;
                    }
                }
            }
            (leaves.len() as u64) < width
        });
        scanned.map_err(|e| TlogError::InvalidInput(e.to_string()))?;
        if let Some(e) = bad {
            return Err(e);
        }
        if leaves.len() as u64 != width {
            // Some leaves were pruned: the roots kept in their place give the halves (a store
            // thinned out from one of every node keeps those at any level).
            let half = |i| self.node(tlog_tiles::stored_hash_index(level - 1, i));
            return Ok(tlog_tiles::node_hash(half(2 * n)?, half(2 * n + 1)?));
        }
        // Pairs of pairs, up to the subtree's root.
        while leaves.len() > 1 {
            leaves = leaves
                .chunks_exact(2)
                .map(|p| tlog_tiles::node_hash(p[0], p[1]))
                .collect();
        }
        Ok(leaves[0])
    }
}

impl HashReader for Stored<'_> {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, TlogError> {
        indexes.iter().map(|&i| self.node(i)).collect()
    }
}
