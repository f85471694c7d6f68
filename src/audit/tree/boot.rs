//! The tree at start: read its frontier, or bring it up to the trail.
//!
//! A store written by this node with the tree on has every row in the tree already (each
//! batch holds both). The tree lags the rows only on a store written before the tree existed,
//! or while `audit.tree` was off: then the rows it lacks are appended now, in bounded batches,
//! before the writer serves. When the first row it lacks was pruned meanwhile, the tree starts
//! again at the oldest retained row. A tree that holds more rows than the trail means rows
//! were removed behind the writer's back: the node refuses to start, and `ankusa audit verify`
//! tells which. A store of an older layout is brought to tiles first: a store of every node
//! is thinned out, then the leaves kept under keys of their own are put into tiles.

use std::time::Instant;

use rocksdb::WriteBatch;

use super::{stored_size, Frontier, Layout, Tile, TreeMeta, TILE_WIDTH};
use crate::store::{keys, Cf, Store, StoreError};
use crate::telemetry::audit as telemetry;

/// Rows appended per batch when the tree catches up.
const CATCH_UP_BATCH: usize = 10_000;

/// The tree's frontier at the trail's last seq `last_seq`, caught up first if it lags.
pub(crate) fn frontier(store: &Store, last_seq: u64) -> Result<Frontier, StoreError> {
    let first_row = first_row(store)?;
    let (origin, size) = match TreeMeta::read(store)? {
        None => (start_afresh(store, first_row.unwrap_or(last_seq + 1))?, 0),
        Some(TreeMeta { origin, layout }) => {
            let size = stored_size(store)?;
            let rows = (last_seq + 1).checked_sub(origin).ok_or_else(|| {
                damaged(format!(
                    "the tree starts at seq {origin}, after the trail's last seq {last_seq}"
                ))
            })?;
            if size > rows {
                return Err(damaged(format!(
                    "the tree holds {size} rows from seq {origin} but the trail ends at seq \
                     {last_seq}: rows were removed; run `ankusa audit verify`"
                )));
            }
            match first_row {
                Some(first) if size < rows && origin + size < first => {
                    // Rows the tree lacks were pruned while it was off.
                    telemetry::tree_restarted(first);
                    (start_afresh(store, first)?, 0)
                }
                _ => {
                    if layout == Layout::Every {
                        thin_out(store, origin, first_row)?;
                    }
                    if layout != Layout::Tiles {
                        tile_leaves(store, origin)?;
                    }
                    (origin, size)
                }
            }
        }
    };
    let mut frontier = Frontier::load(store, origin, size)?;
    catch_up(store, &mut frontier, last_seq)?;
    Ok(frontier)
}

/// Delete every node and start the tree at seq `origin`.
fn start_afresh(store: &Store, origin: u64) -> Result<u64, StoreError> {
    let audit = store.cf(Cf::Audit);
    let mut batch = WriteBatch::default();
    batch.delete_range_cf(audit, [keys::TREE], [keys::TREE + 1]);
    batch.delete_range_cf(audit, [keys::TILE], [keys::TILE + 1]);
    TreeMeta::put(audit, &mut batch, origin, Layout::Tiles);
    store.write(batch, true)?;
    Ok(origin)
}

/// Rewrite the tree's nodes in bounded batches: `step` fills a batch from the node key it is
/// given and returns the key the next batch starts at, or `None` when it is done; the last
/// batch also marks the layout `layout`. Each batch is synced: a crash between two leaves
/// the rest to be done again at the next start.
fn in_batches(
    store: &Store,
    origin: u64,
    layout: Layout,
    mut step: impl FnMut(&[u8], &mut WriteBatch) -> Result<Option<Vec<u8>>, StoreError>,
) -> Result<(), StoreError> {
    let mut from = vec![keys::TREE];
    loop {
        let mut batch = WriteBatch::default();
        let next = step(&from, &mut batch)?;
        if next.is_none() {
            TreeMeta::put(store.cf(Cf::Audit), &mut batch, origin, layout);
        }
        store.write(batch, true)?;
        match next {
            Some(key) => from = key,
            None => return Ok(()),
        }
    }
}

/// Delete the nodes a store of every node holds that the thin layout does not, then mark the
/// layout thin. The roots of the frontier at the oldest retained row stay: the leaves below
/// them were pruned.
fn thin_out(store: &Store, origin: u64, first_row: Option<u64>) -> Result<(), StoreError> {
    let (audit, started) = (store.cf(Cf::Audit), Instant::now());
    let size = stored_size(store)?;
    let retained = first_row.map_or(size, |f| f.saturating_sub(origin).min(size));
    let keep: std::collections::HashSet<u64> = tlog_tiles::sub_tree_index(0, retained, Vec::new())
        .into_iter()
        .collect();
    let mut deleted = 0u64;
    in_batches(store, origin, Layout::Thin, |from, batch| {
        let (mut n, mut last) = (0, None);
        store.scan(Cf::Audit, &[keys::TREE], from, |k, _| {
            last = Some(k.to_vec());
            if let Some(index) = keys::decode_seq_key(keys::TREE, k) {
                let (level, _) = tlog_tiles::split_stored_hash_index(index);
                if !Layout::Thin.keyed(level) && !keep.contains(&index) {
                    batch.delete_cf(audit, k);
                    n += 1;
                }
            }
            n < CATCH_UP_BATCH
        })?;
        deleted += n as u64;
        // The next batch starts just after the last key this one saw.
        Ok(last.filter(|_| n == CATCH_UP_BATCH).map(|mut next| {
            next.push(0);
            next
        }))
    })?;
    telemetry::tree_thinned(deleted, started.elapsed());
    Ok(())
}

/// Put the leaves kept under keys of their own into tiles, a tile's leaves and the deletes
/// of their keys in one batch, then mark the layout tiles. A tile holds the run of leaves
/// that ends at its last one (before a gap, pruning left leaves no root needs). Until it is
/// done the tree reads leaves from either place.
fn tile_leaves(store: &Store, origin: u64) -> Result<(), StoreError> {
    let (audit, started) = (store.cf(Cf::Audit), Instant::now());
    let mut tiles = 0u64;
    in_batches(store, origin, Layout::Tiles, |from, batch| {
        let (mut leaves, mut next, mut bad) = (0, None, None);
        // The tile being gathered: its number and its run of leaves so far.
        let mut open: Option<(u64, Tile)> = None;
        let mut close = |batch: &mut WriteBatch, open: Option<(u64, Tile)>| {
            if let Some((m, tile)) = open {
                tile.put(audit, batch, m);
                tiles += 1;
            }
        };
        store.scan(Cf::Audit, &[keys::TREE], from, |k, v| {
            let Some(index) = keys::decode_seq_key(keys::TREE, k) else {
                return true;
            };
            let (0, leaf) = tlog_tiles::split_stored_hash_index(index) else {
                return true;
            };
            let Ok(hash) = <[u8; 32]>::try_from(v).map(tlog_tiles::Hash) else {
                bad = Some(leaf);
                return false;
            };
            let (n, at) = (leaf / TILE_WIDTH, (leaf % TILE_WIDTH) as u8);
            match &mut open {
                Some((m, tile)) if *m == n => {
                    if tile.first + tile.leaves.len() as u8 != at {
                        *tile = Tile {
                            first: at,
                            leaves: Vec::new(),
                        };
                    }
                    tile.leaves.push(hash);
                }
                _ => {
                    if leaves >= CATCH_UP_BATCH {
                        // A tile's leaves go in one batch: the next batch starts with this one.
                        next = Some(k.to_vec());
                        return false;
                    }
                    close(batch, open.take());
                    let leaves = vec![hash];
                    open = Some((n, Tile { first: at, leaves }));
                }
            }
            batch.delete_cf(audit, k);
            leaves += 1;
            true
        })?;
        if let Some(leaf) = bad {
            return Err(damaged(format!("leaf {leaf} is not a hash")));
        }
        close(batch, open.take());
        Ok(next)
    })?;
    telemetry::tree_tiled(tiles, started.elapsed());
    Ok(())
}

/// Append the rows after the tree's last leaf, up to `last_seq`.
fn catch_up(store: &Store, frontier: &mut Frontier, last_seq: u64) -> Result<(), StoreError> {
    if frontier.next_seq() > last_seq {
        return Ok(());
    }
    let (from, started) = (frontier.next_seq(), Instant::now());
    telemetry::tree_catching_up(from, last_seq);
    let audit = store.cf(Cf::Audit);
    loop {
        let mut batch = WriteBatch::default();
        let mut rows = 0;
        let mut gap = None;
        store.scan(
            Cf::Audit,
            &[keys::ROW],
            &keys::row_seek(frontier.next_seq()),
            |k, v| {
                match keys::decode_row_key(k) {
                    Some((seq, _)) if seq == frontier.next_seq() => {}
                    Some((seq, _)) if seq > last_seq => return false,
                    _ => {
                        gap = Some(frontier.next_seq());
                        return false;
                    }
                }
                frontier.put_nodes(audit, &mut batch, k, v);
                rows += 1;
                rows < CATCH_UP_BATCH
            },
        )?;
        frontier.flush(audit, &mut batch);
        // Each batch is whole: a crash between batches leaves a shorter tree, caught up again.
        store.write(batch, true)?;
        if let Some(seq) = gap {
            return Err(damaged(format!(
                "row {seq} is missing from the trail: the tree cannot go past it"
            )));
        }
        if frontier.next_seq() > last_seq {
            break;
        }
        if rows == 0 {
            return Err(damaged(format!(
                "the trail ends before its last seq {last_seq}"
            )));
        }
    }
    telemetry::tree_caught_up(frontier.next_seq() - from, started.elapsed());
    Ok(())
}

/// The seq of the oldest row.
fn first_row(store: &Store) -> Result<Option<u64>, StoreError> {
    let mut first = None;
    store.scan(Cf::Audit, &[keys::ROW], &[keys::ROW], |k, _| {
        first = keys::decode_row_key(k).map(|(s, _)| s);
        false
    })?;
    Ok(first)
}

fn damaged(detail: String) -> StoreError {
    StoreError::Corrupt {
        what: "the audit tree".into(),
        detail,
    }
}
