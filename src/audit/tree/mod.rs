//! The trail's Merkle tree: every row, in seq order, is a leaf of an RFC 6962 tree, so that a
//! signed checkpoint (origin, size, root) commits to every row up to its size, and any change,
//! loss or reordering of a row shows.
//!
//! The leaves are stored in tiles of 16 (`l`+tile, see [`stored::Tile`]), and every subtree of
//! [`STORED_LEVEL`] levels or more (16 rows) under its stored-hash index (`t`+index), as Go's
//! `golang.org/x/mod/sumdb/tlog` numbers them (the `tlog_tiles` crate is its port). A smaller
//! subtree is hashed again from its tile's leaves when a proof or the frontier needs it. So a
//! batch of rows adds one key for the tile they end in (the tile's leaves so far, written
//! again by each batch until it is full) and about one for each 8th row (the subtrees of 16
//! leaves or more they complete), not more than one a row: the syncer's write, which every
//! commit waits behind, inserts that many fewer entries into the memtable. `verify` still
//! names the very row whose leaf differs. The writer puts a row's nodes in the row's own
//! batch, and a group's last tile before the group is written, so a batch never leaves a row
//! outside the tree or the tree ahead of the rows. The leaf input is the row's key followed by
//! its value: the bytes the store holds, as `audit tail` reads them.
//!
//! The writer keeps the frontier (the compact range: the roots of the complete subtrees that
//! make up the tree) in memory; it is all an append and a root read. Retention deletes a
//! row's nodes with the row, all but those the frontier at the oldest retained row still
//! needs: its stored roots, and the tile it sits in. Those, and every node of a later row,
//! give every root and every proof about the retained rows, never the pruned rows themselves.
//!
//! Stores written before tiles keep every node, or the leaves under keys of their own
//! (`m:tree`'s `layout`): the node brings them to tiles at start ([`boot`]), and `verify`
//! checks every layout.
//!
//! Parts: `stored.rs` is the nodes as stored; `checkpoint.rs` signs and reads checkpoints;
//! `boot.rs` brings the tree up to the trail at start; `proof.rs` reads inclusion and
//! consistency proofs; `export.rs` a window of rows with their proofs, page by page;
//! `verify.rs` checks a whole store offline.

pub(crate) mod boot;
pub mod checkpoint;
pub mod export;
pub mod proof;
mod stored;
pub mod verify;

use rocksdb::{ColumnFamily, WriteBatch};
use serde::{Deserialize, Serialize};
use tlog_tiles::{Error as TlogError, HashReader};

pub(crate) use stored::{prune, stored_size, Stored, Tile};
pub use stored::{Layout, STORED_LEVEL, TILE_WIDTH};
pub use tlog_tiles::Hash;

use tokio_util::sync::CancellationToken;

use crate::audit::writer::Request;
use crate::audit::Trail;
use crate::store::{keys, keys::meta, Store, StoreError};

/// The tree and its checkpoints (`[audit] tree`, `checkpoint_rows`, `checkpoint_interval`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeOptions {
    /// Whether rows join the tree and checkpoints are signed.
    pub enabled: bool,
    /// A checkpoint is signed once this many rows came since the last one...
    pub checkpoint_rows: u64,
    /// ...or this long after the last one, if any row came since.
    pub checkpoint_interval: std::time::Duration,
}

impl Default for TreeOptions {
    fn default() -> Self {
        TreeOptions {
            enabled: true,
            checkpoint_rows: 10_000,
            checkpoint_interval: std::time::Duration::from_secs(60),
        }
    }
}

/// `m:tree`: where the tree starts, and which nodes are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeMeta {
    /// The seq of leaf 0. A new store's tree starts at its first row (1); a store that had
    /// rows before it had a tree starts at its oldest retained row then.
    pub origin: u64,
    /// Absent in stores written before the thin layout, which hold every node.
    #[serde(default = "every")]
    pub layout: Layout,
}

fn every() -> Layout {
    Layout::Every
}

impl TreeMeta {
    /// Read `m:tree`; `None` when the store has no tree.
    pub fn read(store: &Store) -> Result<Option<TreeMeta>, StoreError> {
        store.meta_json(meta::TREE)
    }

    fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("tree meta always serializes")
    }

    /// Put `m:tree` for a tree from `origin` of `layout` into `batch`.
    pub(crate) fn put(audit: &ColumnFamily, batch: &mut WriteBatch, origin: u64, layout: Layout) {
        let meta = TreeMeta { origin, layout };
        batch.put_cf(audit, keys::meta_key(meta::TREE), meta.encode());
    }
}

/// The leaf input of a row: its key, then its value, as stored (what [`leaf_hash`] hashes in
/// parts; the tests give it whole to other implementations).
#[cfg(test)]
pub(crate) fn leaf_input(key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut input = Vec::with_capacity(key.len() + value.len());
    input.extend_from_slice(key);
    input.extend_from_slice(value);
    input
}

/// The leaf hash of the row with `key` and `value` (RFC 6962: SHA-256 of 0x00 and the input),
/// fed in parts to spare a copy of the row.
pub fn leaf_hash(key: &[u8], value: &[u8]) -> Hash {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update([0x00]);
    hasher.update(key);
    hasher.update(value);
    Hash(hasher.finalize().into())
}

/// The tree as the rows so far leave it: its size and its frontier.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Frontier {
    /// The seq of leaf 0.
    origin: u64,
    /// Leaves so far.
    size: u64,
    /// The roots of the complete subtrees making up the tree, largest (leftmost) first, with
    /// their stored-hash indexes.
    nodes: Vec<(u64, Hash)>,
    /// The leaves of the tile the next leaf joins, as far as [`Frontier::put_nodes`] added
    /// them, and whether the batch lacks them since (see [`Frontier::flush`]).
    tile: Tile,
    unwritten: bool,
}

impl HashReader for Frontier {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, TlogError> {
        indexes
            .iter()
            .map(|i| {
                self.nodes
                    .iter()
                    .find(|(j, _)| j == i)
                    .map(|(_, h)| *h)
                    .ok_or(TlogError::IndexesNotInTree)
            })
            .collect()
    }
}

impl Frontier {
    /// An empty tree whose leaf 0 will be row `origin`.
    #[cfg(test)]
    pub(crate) fn empty(origin: u64) -> Frontier {
        Frontier {
            origin,
            size: 0,
            nodes: Vec::new(),
            tile: Tile::default(),
            unwritten: false,
        }
    }

    /// The frontier of the stored tree of `size` leaves from `origin`, read from the store.
    pub(crate) fn load(store: &Store, origin: u64, size: u64) -> Result<Frontier, StoreError> {
        let indexes = tlog_tiles::sub_tree_index(0, size, Vec::new());
        let stored = Stored(store);
        let hashes = stored.read_hashes(&indexes).map_err(|e| tree_damaged(&e))?;
        let end = size % TILE_WIDTH;
        let tile = stored
            .tile(size / TILE_WIDTH, end)
            .map_err(|e| tree_damaged(&e))?;
        if u64::from(tile.first) + tile.leaves.len() as u64 != end {
            return Err(tree_damaged(&TlogError::IndexesNotInTree));
        }
        Ok(Frontier {
            origin,
            size,
            nodes: indexes.into_iter().zip(hashes).collect(),
            tile,
            unwritten: false,
        })
    }

    /// The seq of leaf 0.
    pub(crate) fn origin(&self) -> u64 {
        self.origin
    }

    /// Leaves so far.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// The seq the next leaf must be.
    pub(crate) fn next_seq(&self) -> u64 {
        self.origin + self.size
    }

    /// The root hash of the tree as it is.
    pub(crate) fn root(&self) -> Hash {
        tlog_tiles::tree_hash(self.size, self).expect("the frontier holds every root a tree has")
    }

    /// Add the row with `key` and `value` as the next leaf, handing each node it adds to
    /// `put` (see [`Frontier::append_hash`]).
    pub(crate) fn append(&mut self, key: &[u8], value: &[u8], put: impl FnMut(u8, u64, Hash)) {
        self.append_hash(leaf_hash(key, value), put);
    }

    /// Add a leaf of hash `leaf`, handing every node it adds to `put` with its level and
    /// stored-hash index: the leaf, then each subtree it completes, at consecutive indexes.
    pub(crate) fn append_hash(&mut self, leaf: Hash, mut put: impl FnMut(u8, u64, Hash)) {
        let n = self.size;
        let mut index = tlog_tiles::stored_hash_index(0, n);
        let mut hash = leaf;
        put(0, index, hash);
        // Each trailing 1 bit of n completes a subtree whose left half is the frontier's
        // last root (what tlog_tiles::stored_hashes_for_record_hash computes, without its
        // allocations: this runs once per row on the writer thread).
        for level in 1..=(n + 1).trailing_zeros() as u8 {
            let (_, left) = self
                .nodes
                .pop()
                .expect("the frontier holds a root for each subtree an append completes");
            hash = tlog_tiles::node_hash(left, hash);
            index += 1;
            put(level, index, hash);
        }
        self.nodes.push((index, hash));
        self.size += 1;
    }

    /// Append the row with `key` and `value` and put the nodes it adds that are stored into
    /// `batch`: a subtree of [`STORED_LEVEL`] levels or more at once, the leaf with its tile
    /// when the tile is full, else by [`Frontier::flush`] once the batch has all its rows.
    pub(crate) fn put_nodes(
        &mut self,
        audit: &ColumnFamily,
        batch: &mut WriteBatch,
        key: &[u8],
        value: &[u8],
    ) {
        let mut leaf = None;
        self.append(key, value, |level, index, hash| {
            if level == 0 {
                leaf = Some(hash);
            } else if Layout::Tiles.keyed(level) {
                batch.put_cf(audit, keys::tree_key(index), hash.0);
            }
        });
        self.tile.leaves.extend(leaf);
        self.unwritten = true;
        if self.size.is_multiple_of(TILE_WIDTH) {
            self.flush(audit, batch);
            self.tile = Tile::default();
        }
    }

    /// Put the tile the last leaf joined into `batch`, if the batch lacks its last leaves:
    /// called once a batch holds all its rows.
    pub(crate) fn flush(&mut self, audit: &ColumnFamily, batch: &mut WriteBatch) {
        if std::mem::take(&mut self.unwritten) {
            self.tile.put(audit, batch, (self.size - 1) / TILE_WIDTH);
        }
    }
}

fn tree_damaged(e: &TlogError) -> StoreError {
    StoreError::Corrupt {
        what: "the audit tree".into(),
        detail: format!("a node of the frontier cannot be read: {e}"),
    }
}

impl Trail {
    /// Sign a checkpoint now if any row came since the last one: the row's seq, or `None`.
    pub async fn checkpoint_now(&self) -> Result<Option<u64>, StoreError> {
        if !self.tree.enabled {
            return Ok(None);
        }
        self.ask(Request::Checkpoint).await
    }

    /// The newest signed checkpoint (`m:checkpoint`).
    pub async fn newest_checkpoint(
        &self,
    ) -> Result<Option<checkpoint::SignedCheckpoint>, StoreError> {
        let store = self.store.clone();
        blocking(move || checkpoint::SignedCheckpoint::newest(&store)).await?
    }

    /// The proof that row `seq` is in the tree of `size` leaves (`None`: the newest
    /// checkpoint's size).
    pub async fn inclusion_proof(
        &self,
        seq: u64,
        size: Option<u64>,
    ) -> Result<proof::InclusionProof, proof::ProofError> {
        let (store, committed) = (self.store.clone(), *self.committed.borrow());
        blocking(move || {
            let tree_size = tree_size(&store, committed)?;
            let size = match size {
                Some(size) => size,
                None => checkpoint::SignedCheckpoint::newest(&store)?.map_or(tree_size, |c| c.size),
            };
            proof::inclusion(&store, seq, size, tree_size)
        })
        .await?
    }

    /// The proof that the tree of `from` leaves is a prefix of the tree of `to` leaves.
    pub async fn consistency_proof(
        &self,
        from: u64,
        to: u64,
    ) -> Result<proof::ConsistencyProof, proof::ProofError> {
        let (store, committed) = (self.store.clone(), *self.committed.borrow());
        blocking(move || {
            let tree_size = tree_size(&store, committed)?;
            proof::consistency(&store, from, to, tree_size)
        })
        .await?
    }

    /// Sign a checkpoint every `audit.checkpoint_interval` while rows come, until `stop`.
    pub fn spawn_checkpoints(&self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let (trail, every) = (self.clone(), self.tree.checkpoint_interval);
        tokio::spawn(async move {
            if !trail.tree.enabled {
                return;
            }
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                if let Err(e) = trail.checkpoint_now().await {
                    crate::telemetry::audit::checkpoint_failed(&e);
                }
            }
        })
    }
}

/// The tree's size once every row up to `committed` is in it.
fn tree_size(store: &Store, committed: u64) -> Result<u64, proof::ProofError> {
    let origin = TreeMeta::read(store)?
        .ok_or(proof::ProofError::NoTree)?
        .origin;
    Ok((committed + 1).saturating_sub(origin))
}

/// Run `f` on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, StoreError> {
    crate::store::blocking::run("a tree read", f).await
}

#[cfg(test)]
mod tests;
