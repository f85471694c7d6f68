//! The nodes as the store holds them: which are stored ([`Layout`]), the tiles the leaves are
//! kept in ([`Tile`]), how nodes are read back ([`Stored`]), how many rows they cover
//! ([`stored_size`]) and what pruning a row deletes of them ([`prune`]).

use rocksdb::{ColumnFamily, WriteBatch};
use serde::{Deserialize, Serialize};
use tlog_tiles::{Error as TlogError, Hash, HashReader};

use crate::store::{keys, Cf, Store, StoreError};

/// Subtrees of this many levels and more are stored under keys of their own; smaller ones
/// are hashed again from their leaves when read. 4: a row adds about 1/8 of a node under its
/// own key beside its leaf in its tile, and a proof hashes at most 15 leaves more.
pub const STORED_LEVEL: u8 = 4;

/// Leaves a tile holds: those of one subtree of [`STORED_LEVEL`] levels.
pub const TILE_WIDTH: u64 = 1 << STORED_LEVEL;

/// Which nodes a store holds, and where (`m:tree`'s `layout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// Every node under its own key: stores written before [`Layout::Thin`].
    Every,
    /// The leaves, and the subtrees of [`STORED_LEVEL`] levels or more, under their own keys:
    /// stores written before [`Layout::Tiles`].
    Thin,
    /// The leaves in tiles (`l`+tile), and the subtrees of [`STORED_LEVEL`] levels or more
    /// under their own keys. Older layouts are brought to this one at start.
    Tiles,
}

impl Layout {
    /// Whether a node at `level` (a leaf at 0) has a key of its own.
    pub fn keyed(self, level: u8) -> bool {
        match self {
            Layout::Every => true,
            Layout::Thin => level == 0 || level >= STORED_LEVEL,
            Layout::Tiles => level >= STORED_LEVEL,
        }
    }
}

/// The leaves of one tile as stored: tile `n` holds leaves `n * 16 + first` to the tile's
/// end, or to the tree's last leaf while the tile is the last one. `first` is 0 but in a
/// store tiled from one of every node whose oldest retained rows sat mid-tile (the roots of
/// the pruned leaves are kept under their own keys). The value is `first` (one byte), then
/// the hashes.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Tile {
    pub first: u8,
    pub leaves: Vec<Hash>,
}

impl Tile {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(1 + 32 * self.leaves.len());
        v.push(self.first);
        for leaf in &self.leaves {
            v.extend_from_slice(&leaf.0);
        }
        v
    }

    /// The offset of the first leaf, and the hashes, of a stored tile (`None`: malformed).
    pub fn parts(value: &[u8]) -> Option<(u64, &[u8])> {
        let (&first, hashes) = value.split_first()?;
        let fits = u64::from(first) + (hashes.len() / 32) as u64 <= TILE_WIDTH;
        (fits && hashes.len().is_multiple_of(32)).then_some((u64::from(first), hashes))
    }

    fn decode(value: &[u8]) -> Result<Tile, TlogError> {
        let (first, hashes) = Tile::parts(value).ok_or(TlogError::MalformedHash)?;
        let leaves = hashes
            .chunks_exact(32)
            .map(|h| Hash(h.try_into().expect("chunks of 32")))
            .collect();
        Ok(Tile {
            first: first as u8,
            leaves,
        })
    }

    /// Put tile `n` into `batch`.
    pub fn put(&self, audit: &ColumnFamily, batch: &mut WriteBatch, n: u64) {
        batch.put_cf(audit, keys::tile_key(n), self.encode());
    }
}

/// Delete from `batch` the nodes that only pruned rows need: `seqs` are the rows a batch
/// deletes, oldest first, each the oldest row left before it (retention and the ceilings
/// delete from the head). For leaf `k`, that is every stored node leaf `k` completed but the
/// largest (the frontier at `k + 1` keeps it) and the frontier roots that largest consumed;
/// and, once `k` ends a tile, the tile, whose leaves the frontier's smaller roots were hashed
/// from until then.
pub(crate) fn prune(audit: &ColumnFamily, batch: &mut WriteBatch, origin: u64, seqs: &[u64]) {
    for &seq in seqs.iter().filter(|&&s| s >= origin) {
        let k = seq - origin;
        let completed = (k + 1).trailing_zeros() as u8;
        for level in (1..completed).filter(|&l| Layout::Tiles.keyed(l)) {
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
            batch.delete_cf(audit, keys::tile_key(k / TILE_WIDTH));
        }
    }
}

/// The size of the stored tree: the leaves up to the last one stored, or those the last
/// stored node completes, whichever is more (a store not yet tiled keeps its leaves as
/// nodes).
pub(crate) fn stored_size(store: &Store) -> Result<u64, StoreError> {
    let damaged = |detail: &str| StoreError::Corrupt {
        what: "the audit tree".into(),
        detail: detail.into(),
    };
    let by_node = match store.last(Cf::Audit, &[keys::TREE])? {
        None => 0,
        Some((key, _)) => {
            let index = keys::decode_seq_key(keys::TREE, &key)
                .ok_or_else(|| damaged("a tree key of the wrong length"))?;
            let (level, n) = tlog_tiles::split_stored_hash_index(index);
            // The last node an append stores is the largest subtree it completes: record
            // ((n + 1) << level) - 1.
            (n + 1) << level
        }
    };
    let by_tile = match store.last(Cf::Audit, &[keys::TILE])? {
        None => 0,
        Some((key, value)) => {
            let n = keys::decode_seq_key(keys::TILE, &key)
                .ok_or_else(|| damaged("a tile key of the wrong length"))?;
            let (first, hashes) = Tile::parts(&value).ok_or_else(|| damaged("a malformed tile"))?;
            n * TILE_WIDTH + first + (hashes.len() / 32) as u64
        }
    };
    Ok(by_node.max(by_tile))
}

/// Reads nodes from the store (written batches only): those under their own keys as they
/// are, leaves from their tile (or their own key, in a store not yet tiled), and the
/// subtrees below [`STORED_LEVEL`] hashed from their leaves.
pub(crate) struct Stored<'a>(pub &'a Store);

impl Stored<'_> {
    fn node(&self, index: u64) -> Result<Hash, TlogError> {
        if let Some(hash) = self.get(index)? {
            return Ok(hash);
        }
        let (level, n) = tlog_tiles::split_stored_hash_index(index);
        if level >= STORED_LEVEL {
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

    /// The leaves of tile `n` up to leaf `n * 16 + end` (excluded): the run of them that is
    /// stored, ending there (empty when none is).
    pub(crate) fn tile(&self, n: u64, end: u64) -> Result<Tile, TlogError> {
        if end == 0 {
            return Ok(Tile::default());
        }
        let stored = self
            .0
            .get(Cf::Audit, &keys::tile_key(n))
            .map_err(|e| TlogError::InvalidInput(e.to_string()))?;
        let mut tile = match stored {
            Some(v) => Tile::decode(&v)?,
            None => self.untiled(n, end)?,
        };
        let end = end.saturating_sub(u64::from(tile.first));
        tile.leaves.truncate(end as usize);
        Ok(tile)
    }

    /// The leaves of tile `n` before `n * 16 + end` kept under their own keys (a store not
    /// yet tiled): the run of them that ends there, read in one scan.
    fn untiled(&self, n: u64, end: u64) -> Result<Tile, TlogError> {
        let mut run: Vec<(u64, Hash)> = Vec::new();
        let mut bad = None;
        let start = keys::tree_key(tlog_tiles::stored_hash_index(0, n * TILE_WIDTH));
        let stop = tlog_tiles::stored_hash_index(0, n * TILE_WIDTH + end);
        let scanned = self.0.scan(Cf::Audit, &[keys::TREE], &start, |k, v| {
            let Some(index) = keys::decode_seq_key(keys::TREE, k) else {
                return true;
            };
            if index >= stop {
                return false;
            }
            // Inner nodes between the leaves are skipped (a store of every node has them).
            let (0, leaf) = tlog_tiles::split_stored_hash_index(index) else {
                return true;
            };
            let Ok(h) = <[u8; 32]>::try_from(v) else {
                bad = Some(TlogError::MalformedHash);
                return false;
            };
            if run.last().is_some_and(|&(l, _)| l + 1 != leaf) {
                run.clear();
            }
            run.push((leaf, Hash(h)));
            true
        });
        scanned.map_err(|e| TlogError::InvalidInput(e.to_string()))?;
        if let Some(e) = bad {
            return Err(e);
        }
        if run
            .last()
            .is_some_and(|&(l, _)| l + 1 != n * TILE_WIDTH + end)
        {
            run.clear();
        }
        Ok(Tile {
            first: run.first().map_or(end, |&(l, _)| l % TILE_WIDTH) as u8,
            leaves: run.into_iter().map(|(_, h)| h).collect(),
        })
    }

    /// The subtree at `level` (below [`STORED_LEVEL`]) over leaves `n << level` on, from its
    /// leaves.
    fn subtree(&self, level: u8, n: u64) -> Result<Hash, TlogError> {
        let (first, width) = (n << level, 1u64 << level);
        let tile = self.tile(first / TILE_WIDTH, first % TILE_WIDTH + width)?;
        let from = (first % TILE_WIDTH).checked_sub(u64::from(tile.first));
        let Some(from) = from.filter(|_| !tile.leaves.is_empty()) else {
            if level == 0 {
                return Err(TlogError::IndexesNotInTree);
            }
            // Some leaves were pruned: the roots kept in their place give the halves (a store
            // tiled from one of every node keeps those at any level).
            let half = |i| self.node(tlog_tiles::stored_hash_index(level - 1, i));
            return Ok(tlog_tiles::node_hash(half(2 * n)?, half(2 * n + 1)?));
        };
        let mut leaves = match tile.leaves.get(from as usize..) {
            Some(leaves) if leaves.len() as u64 == width => leaves.to_vec(),
            _ => return Err(TlogError::IndexesNotInTree),
        };
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
