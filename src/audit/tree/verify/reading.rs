//! What the walk reads: the rows, hashed into leaves on a thread of their own, and the tiles
//! it checks the leaves against.

use tlog_tiles::Hash;

use crate::audit::tree::{leaf_hash, Tile, TILE_WIDTH};
use crate::store::{keys, Cf, Store, StoreError, Walk};

/// How a checkpoint row's value names its action: rows are written by one serializer, field
/// by field, so the bytes are always these.
const CHECKPOINT_MARK: &[u8] = br#""action":"trail.checkpoint""#;

/// A row as the reader hands it to the walk: its seq (`None`: a damaged key), its leaf hash,
/// and its value when it is a checkpoint row.
pub(super) struct Leaf {
    pub seq: Option<u64>,
    pub hash: Hash,
    pub checkpoint: Option<Vec<u8>>,
}

/// Read the rows from seq `start` on, hash their leaves, and send them in chunks.
pub(super) fn read_leaves(
    store: &Store,
    start: u64,
    tx: std::sync::mpsc::SyncSender<Vec<Leaf>>,
) -> Result<(), StoreError> {
    const CHUNK: usize = 4096;
    let mut rows = store.walk(Cf::Audit, &[keys::ROW]);
    rows.seek(&keys::row_seek(start));
    let mut chunk = Vec::with_capacity(CHUNK);
    while let Some((k, v)) = rows.entry() {
        chunk.push(Leaf {
            seq: keys::decode_row_key(k).map(|(s, _)| s),
            hash: leaf_hash(k, v),
            checkpoint: memchr::memmem::find(v, CHECKPOINT_MARK).map(|_| v.to_vec()),
        });
        if chunk.len() == CHUNK
            && tx
                .send(std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK)))
                .is_err()
        {
            return Ok(());
        }
        rows.next();
    }
    rows.finish()?;
    let _ = tx.send(chunk);
    Ok(())
}

/// The tiles of leaves as the walk goes through them: the walk stands at the tile of the
/// next leaf to check, and moves past a tile once its last stored leaf is checked.
pub(super) struct Tiles<'a> {
    pub walk: Walk<'a>,
}

impl<'a> Tiles<'a> {
    /// The tiles of `store`, from the one leaf `n` sits in.
    pub fn from_leaf(store: &'a Store, n: u64) -> Tiles<'a> {
        let mut walk = store.walk(Cf::Audit, &[keys::TILE]);
        walk.seek(&keys::tile_key(n / TILE_WIDTH));
        Tiles { walk }
    }

    /// Whether leaf `n` is stored in its tile as `hash`; `None` when it has no tile.
    pub fn check(&mut self, n: u64, hash: &Hash) -> Option<bool> {
        let (k, v) = self.walk.entry()?;
        if keys::decode_seq_key(keys::TILE, k) != Some(n / TILE_WIDTH) {
            return None;
        }
        let Some((first, hashes)) = Tile::parts(v) else {
            return Some(false);
        };
        let Some(at) = (n % TILE_WIDTH).checked_sub(first) else {
            return Some(false);
        };
        let (at, count) = (at as usize, hashes.len() / 32);
        let same = at < count && hashes[32 * at..32 * (at + 1)] == hash.0;
        if same && at + 1 == count {
            self.walk.next();
        }
        Some(same)
    }
}
