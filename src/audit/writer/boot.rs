//! Boot: the writer's counters, read once from the store's meta before it takes a request.
//!
//! The audit key, the incarnation history, the last seq and row time, `m:audit_usage`
//! (recounted when it does not match the trail) and the sinks' positions are read here; what
//! a new store lacks (the key, the first incarnation, the rows' index entries: `m:index`)
//! and what is stale (the usage, `m:lifecycle_cursor`) is written back in one synced batch.

use std::collections::BTreeMap;

use rand::RngCore;
use rocksdb::WriteBatch;

use super::sync::Counters;
use crate::audit::bounds::prune;
use crate::audit::bounds::usage::Usage;
use crate::audit::clock::ClockGuard;
use crate::audit::hash::{SubjectHasher, KEY_LEN};
use crate::audit::restore::incarnation::History;
use crate::audit::tree::checkpoint::{CheckpointKey, SignedCheckpoint};
use crate::store::{keys, keys::meta, Cf, Store, StoreError};

/// What the writer found (or made) when it booted.
pub(crate) struct Boot {
    /// Keyed with `m:audit_key`.
    pub hasher: SubjectHasher,
    /// The trail's counters as the store holds them.
    pub counters: Counters,
    /// `m:incarnation`.
    pub history: History,
    /// `m:refresh_pending`: the first seq of the restored incarnation whose remote subjects
    /// are still to be refreshed.
    pub refresh_pending: Option<u64>,
    /// `m:checkpoint_key` (with the tree on).
    pub checkpoint_key: Option<CheckpointKey>,
}

/// The most a store's last seq (or pending id) may be at boot. No trail reaches 2^63 changes
/// (292,000 years at a million a second), so a larger value is damage, and counting on from it
/// could wrap around to seqs the trail already holds.
const MAX_BOOT_SEQ: u64 = 1 << 63;

/// `seq`, read as `what`, if a trail could have reached it.
pub(crate) fn reachable(what: &str, seq: u64) -> Result<u64, StoreError> {
    if seq < MAX_BOOT_SEQ {
        return Ok(seq);
    }
    Err(StoreError::Corrupt {
        what: what.into(),
        detail: format!("{seq} is past any trail; the store is damaged"),
    })
}

/// Read the store's meta, making what a new store lacks (`m:audit_key`, the first
/// incarnation) and recounting `m:audit_usage` when it does not match the trail, in one
/// synced batch.
/// `wall` is the wall clock at boot, for the clock guard (`m:clock_ahead`).
pub(crate) fn boot(
    store: &Store,
    sinks: &[String],
    tree: bool,
    wall: u64,
) -> Result<Boot, StoreError> {
    let mut batch = WriteBatch::default();
    let audit = store.cf(Cf::Audit);
    let key = audit_key(store, &mut batch)?;
    let history = history(store, &mut batch)?;
    let (last_seq, last_at) = last_row(store)?;
    let (frontier, checkpoint_key, checkpointed) = if tree {
        let frontier = crate::audit::tree::boot::frontier(store, last_seq)?;
        let first = history
            .0
            .first()
            .map_or_else(|| history.current().id, |i| i.id);
        let key = CheckpointKey::load_or_make(store, &mut batch, first)?;
        (Some(frontier), Some(key), checkpointed(store, last_seq)?)
    } else {
        (None, None, 0)
    };
    // A store written before the index entries gets them now, counted by a recount.
    let indexed = crate::audit::index::build_missing(store)?;
    // Recounted (and logged) when it does not match the trail: missing, damaged, stale.
    let (usage, rewrite) = match indexed {
        true => (Usage::recount(store, last_seq)?, true),
        false => Usage::at_boot(store, last_seq)?,
    };
    if rewrite {
        batch.put_cf(audit, keys::meta_key(meta::AUDIT_USAGE), usage.encode());
    }
    if indexed {
        batch.put_cf(
            audit,
            keys::meta_key(meta::INDEX),
            [crate::audit::index::FORMAT],
        );
    }
    let refresh_pending = store
        .meta(meta::REFRESH_PENDING)?
        .map(|v| crate::store::decode_u64(&v).unwrap_or(0));
    let positions = sink_positions(store, sinks, &mut batch)?;
    let ahead = store
        .meta(meta::CLOCK_AHEAD)?
        .map_or(0, |v| crate::store::decode_u64(&v).unwrap_or(0));
    let clock = ClockGuard::resume(ahead, last_at, wall);
    if clock.ahead != ahead {
        // The wall clock was set right while the node was stopped.
        batch.put_cf(
            audit,
            keys::meta_key(meta::CLOCK_AHEAD),
            clock.ahead.to_be_bytes(),
        );
    }
    if !batch.is_empty() {
        // Synced: the audit key must never change once a hash was made with it.
        store.write(batch, true)?;
    }
    Ok(Boot {
        hasher: SubjectHasher::new(&key),
        counters: Counters {
            last_seq,
            last_at,
            usage,
            positions,
            tree: frontier,
            checkpointed,
            clock,
        },
        history,
        refresh_pending,
        checkpoint_key,
    })
}

/// The seq of the newest checkpoint row (`m:checkpoint` covers the rows before it), if the
/// trail still reaches it.
fn checkpointed(store: &Store, last_seq: u64) -> Result<u64, StoreError> {
    Ok(SignedCheckpoint::newest(store)?
        .map(|c| c.size + 1)
        .filter(|&seq| seq <= last_seq)
        .unwrap_or(0))
}

/// `m:audit_key`, made (into `batch`) for a new store.
fn audit_key(store: &Store, batch: &mut WriteBatch) -> Result<[u8; KEY_LEN], StoreError> {
    Ok(match store.meta(meta::AUDIT_KEY)? {
        Some(k) => <[u8; KEY_LEN]>::try_from(k.as_slice()).map_err(|_| StoreError::Corrupt {
            what: "m:audit_key".into(),
            detail: format!("expected {KEY_LEN} bytes, found {}", k.len()),
        })?,
        None => {
            let mut k = [0u8; KEY_LEN];
            rand::rng().fill_bytes(&mut k);
            batch.put_cf(store.cf(Cf::Audit), keys::meta_key(meta::AUDIT_KEY), k);
            k
        }
    })
}

/// `m:incarnation`, its first incarnation made (into `batch`) for a new store.
fn history(store: &Store, batch: &mut WriteBatch) -> Result<History, StoreError> {
    Ok(match store.meta(meta::INCARNATION)? {
        Some(bytes) => History::decode(&bytes)?,
        None => {
            let h = History::first();
            batch.put_cf(
                store.cf(Cf::Audit),
                keys::meta_key(meta::INCARNATION),
                h.encode(),
            );
            h
        }
    })
}

/// The last seq handed out and the commit time of the last row.
fn last_row(store: &Store) -> Result<(u64, u64), StoreError> {
    let last_row = store.last(Cf::Audit, &[keys::ROW])?;
    let (row_seq, last_at) = last_row
        .and_then(|(k, _)| keys::decode_row_key(&k))
        .unwrap_or((0, 0));
    // Rows and m:audit_seq are written in one batch, so they agree; trust the larger if a
    // damaged store says otherwise, never hand out a seq twice.
    let last_seq = reachable("m:audit_seq", store.meta_u64(meta::AUDIT_SEQ)?.max(row_seq))?;
    Ok((last_seq, last_at))
}

/// The position of every sink configured now, putting `m:lifecycle_cursor` into `batch`
/// when it is not their minimum.
fn sink_positions(
    store: &Store,
    sinks: &[String],
    batch: &mut WriteBatch,
) -> Result<BTreeMap<String, u64>, StoreError> {
    let mut positions = BTreeMap::new();
    for sink in sinks {
        positions.insert(sink.clone(), store.meta_u64(&meta::sink_position(sink))?);
    }
    // m:lifecycle_cursor is the minimum over the sinks configured now: a sink added (at 0)
    // or removed since the last advance moves it, and with none configured there is none.
    let cursor = prune::cursor(&positions).map(|c| c.to_be_bytes().to_vec());
    if store.meta(meta::LIFECYCLE_CURSOR)? != cursor {
        let key = keys::meta_key(meta::LIFECYCLE_CURSOR);
        match cursor {
            Some(cursor) => batch.put_cf(store.cf(Cf::Audit), key, cursor),
            None => batch.delete_cf(store.cf(Cf::Audit), key),
        }
    }
    Ok(positions)
}
