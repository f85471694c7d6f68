//! Checking a whole store offline (`ankusa audit verify`): the tree recomputed from the rows,
//! node by node against the stored tree, every checkpoint row's signature and root, and
//! every checkpoint given from outside.
//!
//! What it can tell, and how exactly:
//! - a row changed, missing, swapped or moved, with the stored tree left as it was: the row's
//!   leaf or a node it completes differs from the stored one, at that row's seq;
//! - rows and tree rewritten together (by someone without the signing key): the first
//!   checkpoint after the change no longer matches, and the first seq it cannot vouch for is
//!   the one after the last checkpoint that did (a change after the newest checkpoint shows
//!   only against the next one, or one a witness holds);
//! - rows cut from the end: `m:audit_seq`, the tree or the newest checkpoint go further;
//! - rows deleted from the head beyond what the writer pruned: `m:audit_usage` says where
//!   the writer's pruning stopped.

use std::collections::BTreeMap;

use tlog_tiles::Hash;

use super::checkpoint::{self, incarnation_of, CheckpointKey, SignedCheckpoint};
use super::proof::b64;
use super::{Frontier, Layout, TreeMeta};
use crate::audit::bounds::usage::Usage;
use crate::audit::restore::incarnation::History;
use crate::audit::row::Row;
use crate::store::{keys, keys::meta, Cf, Store, StoreError};
use reading::{read_leaves, Leaf, Tiles};

mod reading;

/// The action of a checkpoint row (event type `io.ankusa.trail.checkpoint`).
pub const CHECKPOINT_ACTION: &str = "trail.checkpoint";
/// The resource of a checkpoint row.
pub const CHECKPOINT_RESOURCE: &str = "trail";

/// A checkpoint from outside the node (a sink's copy, a witness's), in signed-note text.
#[derive(Debug, Clone)]
pub struct External {
    /// Where it came from, for the report (a file name).
    pub name: String,
    /// The signed note.
    pub note: String,
}

/// What a verification found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verification {
    /// The trail and its tree agree, and every checkpoint with them.
    Verified(Summary),
    /// They part.
    Broken {
        /// The first seq that cannot be vouched for.
        seq: u64,
        /// How they part.
        reason: String,
    },
}

/// A trail that verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The retained rows: `first..=last` (`None` with no row).
    pub rows: Option<(u64, u64)>,
    /// The tree's size (leaves).
    pub size: u64,
    /// Its root, base64.
    pub root: String,
    /// Checkpoint rows verified.
    pub checkpoints: u64,
    /// What became of each external checkpoint.
    pub external: Vec<(String, ExternalResult)>,
}

/// What an external checkpoint was found to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExternalResult {
    /// Its root is the trail's at its size (leaves).
    Verified {
        /// Its size.
        size: u64,
    },
    /// It covers rows a restore rolled back.
    RolledBack {
        /// The last seq of its incarnation.
        ended: u64,
    },
    /// It predates the oldest retained row: nothing left to check it against.
    Predates {
        /// Its size.
        size: u64,
    },
}

/// Why verification could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// No `m:tree`.
    #[error("the store has no audit tree (audit.tree was never on)")]
    NoTree,
    /// No `m:checkpoint_key` and no key given.
    #[error("the store has no checkpoint key; give one with --key")]
    NoKey,
    /// An external checkpoint that is not one of this trail's, or not signed by the key.
    #[error("checkpoint {name}: {detail}")]
    External {
        /// Where it came from.
        name: String,
        /// What is wrong.
        detail: String,
    },
    /// The store could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Verify `store`. `key` is the verifier key to trust (signed-note text); `None` trusts the
/// store's own. `progress` hears (rows done, rows in all) as it goes.
pub fn verify(
    store: &Store,
    key: Option<&str>,
    external: &[External],
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Verification, VerifyError> {
    let TreeMeta { origin, layout } = TreeMeta::read(store)?.ok_or(VerifyError::NoTree)?;
    let key = match key {
        Some(k) => k.to_owned(),
        None => CheckpointKey::load(store)?
            .ok_or(VerifyError::NoKey)?
            .verifier_key()
            .to_owned(),
    };
    let history = match store.meta(meta::INCARNATION)? {
        Some(bytes) => History::decode(&bytes)?,
        None => History::first(),
    };
    let mut walk = Walk {
        origin,
        layout,
        key,
        history,
        vouched: 0,
        checkpoints: 0,
        wanted: BTreeMap::new(),
        external: Vec::new(),
    };
    for e in external {
        walk.want(e)?;
    }
    if let Some(newest) = SignedCheckpoint::newest(store)? {
        walk.want(&External {
            name: "m:checkpoint".into(),
            note: newest.checkpoint,
        })?;
    }
    match walk.run(store, progress)? {
        Err((seq, reason)) => Ok(Verification::Broken { seq, reason }),
        Ok(summary) => Ok(Verification::Verified(summary)),
    }
}

type Found<T> = Result<T, (u64, String)>;

struct Walk {
    origin: u64,
    /// Which nodes the store holds: those are checked against the rows.
    layout: Layout,
    key: String,
    history: History,
    /// Leaves covered by the last checkpoint that matched.
    vouched: u64,
    checkpoints: u64,
    /// External checkpoints by size: (name, origin, root).
    wanted: BTreeMap<u64, Vec<(String, String, Hash)>>,
    external: Vec<(String, ExternalResult)>,
}

impl Walk {
    /// Take an external checkpoint: its signature now, its root when the walk reaches it.
    fn want(&mut self, e: &External) -> Result<(), VerifyError> {
        let v =
            checkpoint::verify_note(&e.note, &self.key).map_err(|err| VerifyError::External {
                name: e.name.clone(),
                detail: err.to_string(),
            })?;
        let Some(incarnation) = incarnation_of(&v.origin) else {
            return Err(VerifyError::External {
                name: e.name.clone(),
                detail: format!("origin {} is not one of this trail's", v.origin),
            });
        };
        let Some(position) = self.history.0.iter().position(|i| i.id == incarnation) else {
            return Err(VerifyError::External {
                name: e.name.clone(),
                detail: format!("origin {} names no incarnation of this trail", v.origin),
            });
        };
        if let Some(next) = self.history.0.get(position + 1) {
            // Seqs from `next.from` on were issued again after a restore.
            if self.origin + v.size > next.from {
                let result = ExternalResult::RolledBack {
                    ended: next.from - 1,
                };
                self.external.push((e.name.clone(), result));
                return Ok(());
            }
        }
        self.wanted
            .entry(v.size)
            .or_default()
            .push((e.name.clone(), v.origin, v.root));
        Ok(())
    }

    fn run(
        mut self,
        store: &Store,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Found<Summary>, StoreError> {
        let last_seq = store.meta_u64(meta::AUDIT_SEQ)?;
        let pruned_to = store
            .meta(meta::AUDIT_USAGE)?
            .and_then(|u| Usage::decode(&u))
            .map_or(0, |u| u.from);
        let mut rows = store.walk(Cf::Audit, &[keys::ROW]);
        rows.seek(&keys::row_seek(self.origin));
        let first = rows
            .entry()
            .and_then(|(k, _)| keys::decode_row_key(k))
            .map(|(s, _)| s);
        let start = first.unwrap_or(last_seq + 1).max(self.origin);
        let expected_start = pruned_to.max(self.origin);
        if start > expected_start && expected_start <= last_seq {
            return Ok(Err((
                expected_start,
                format!(
                    "rows from seq {expected_start} to {} are gone, but the trail had not \
                     pruned them (m:audit_usage)",
                    start - 1
                ),
            )));
        }
        let Ok(mut frontier) = Frontier::load(store, self.origin, start - self.origin) else {
            return Ok(Err((
                start,
                "the tree's nodes before the oldest retained row are missing".into(),
            )));
        };
        self.predated(start - self.origin);
        // Nothing before the retained rows can be checked: a mismatch is named from them on.
        self.vouched = start - self.origin;
        let total = (last_seq + 1).saturating_sub(start);
        let mut nodes = store.walk(Cf::Audit, &[keys::TREE]);
        nodes.seek(&keys::tree_key(tlog_tiles::stored_hash_index(
            0,
            frontier.size(),
        )));
        let mut tiles = Tiles::from_leaf(store, frontier.size());
        drop(rows);
        // One thread reads the rows and hashes their leaves, this one checks them against the
        // tree: the two halves of the work, on two cores.
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Leaf>>(4);
        let (found, read) = std::thread::scope(|scope| {
            let reader = scope.spawn(move || read_leaves(store, start, tx));
            let found = (|| {
                let mut last = None;
                for leaf in rx.iter().flatten() {
                    let seq = frontier.next_seq();
                    match leaf.seq {
                        Some(s) if s == seq => {}
                        Some(s) if s > seq => {
                            return Err((seq, format!("row {seq} is missing (the next is {s})")));
                        }
                        _ => return Err((seq, "a damaged row key stands in its place".into())),
                    }
                    self.at_size(&frontier)?;
                    if let Some(v) = &leaf.checkpoint {
                        self.checkpoint_row(seq, v, &frontier)?;
                    }
                    let mut parted = false;
                    let layout = self.layout;
                    let n = frontier.size();
                    frontier.append_hash(leaf.hash, |level, index, hash| {
                        if parted {
                            return;
                        }
                        // A leaf is in its tile, or under its own key in a store not yet tiled.
                        if level == 0 {
                            if let Some(same) = tiles.check(n, &hash) {
                                parted = !same;
                                return;
                            }
                        } else if !layout.keyed(level) {
                            return;
                        }
                        let stored = nodes.entry().filter(|(nk, _)| *nk == keys::tree_key(index));
                        parted |= stored.is_none_or(|(_, nv)| nv != hash.0);
                        if !parted {
                            nodes.next();
                        }
                    });
                    if parted {
                        return Err((
                            seq,
                            format!("row {seq} is not the row the tree holds at its place"),
                        ));
                    }
                    last = Some(seq);
                    let done = seq + 1 - start;
                    if done.is_multiple_of(65_536) {
                        progress(done, total);
                    }
                }
                Ok(last)
            })();
            // A walk that stopped early drops the channel: the reader stops at its next send.
            drop(rx);
            (found, reader.join())
        });
        read.map_err(|_| StoreError::Task {
            what: "the row reader",
            detail: "panicked".into(),
        })??;
        let last = match found {
            Ok(last) => last,
            Err(found) => return Ok(Err(found)),
        };
        nodes.finish()?;
        tiles.walk.finish()?;
        let next = frontier.next_seq();
        if next <= last_seq {
            return Ok(Err((
                next,
                format!("rows from seq {next} to {last_seq} (m:audit_seq) are missing"),
            )));
        }
        if nodes.entry().is_some() || tiles.walk.entry().is_some() {
            return Ok(Err((
                next,
                format!("the tree holds rows from seq {next} on that the trail does not"),
            )));
        }
        if let Err(found) = self.at_size(&frontier) {
            return Ok(Err(found));
        }
        if let Some((&size, _)) = self.wanted.iter().next() {
            return Ok(Err((
                next,
                format!(
                    "a checkpoint covers {size} rows, the trail has only {} from seq {}",
                    frontier.size(),
                    self.origin
                ),
            )));
        }
        progress(total, total);
        Ok(Ok(Summary {
            rows: first.zip(last),
            size: frontier.size(),
            root: b64(&frontier.root()),
            checkpoints: self.checkpoints,
            external: self.external,
        }))
    }

    /// Set aside the external checkpoints of trees smaller than the retained rows.
    fn predated(&mut self, size: u64) {
        let later = self.wanted.split_off(&size);
        for (size, names) in std::mem::replace(&mut self.wanted, later) {
            for (name, _, _) in names {
                self.external
                    .push((name, ExternalResult::Predates { size }));
            }
        }
    }

    /// Check the external checkpoints of the tree as it is now.
    fn at_size(&mut self, frontier: &Frontier) -> Found<()> {
        let size = frontier.size();
        let Some(wanted) = self.wanted.remove(&size) else {
            return Ok(());
        };
        let root = frontier.root();
        for (name, _, want) in wanted {
            if want != root {
                return Err(self.unvouched(size, &format!("checkpoint {name}")));
            }
            self.vouched = self.vouched.max(size);
            self.external
                .push((name, ExternalResult::Verified { size }));
        }
        Ok(())
    }

    /// Check checkpoint row `seq` (value `v`) against the tree before it.
    fn checkpoint_row(&mut self, seq: u64, v: &[u8], frontier: &Frontier) -> Found<()> {
        let row: Row = serde_json::from_slice(v)
            .map_err(|e| (seq, format!("checkpoint row {seq} is not a row: {e}")))?;
        let note = row
            .detail
            .get("checkpoint")
            .and_then(|n| n.as_str())
            .ok_or_else(|| (seq, format!("checkpoint row {seq} holds no checkpoint")))?;
        let signed = checkpoint::verify_note(note, &self.key)
            .map_err(|e| (seq, format!("checkpoint row {seq}: {e}")))?;
        let incarnation = self.history.of(seq).id;
        if signed.origin != checkpoint::origin(incarnation) {
            return Err((
                seq,
                format!(
                    "checkpoint row {seq} is signed for {}, not for its incarnation {incarnation}",
                    signed.origin
                ),
            ));
        }
        if signed.size != frontier.size() {
            return Err((
                seq,
                format!(
                    "checkpoint row {seq} covers {} rows, not the {} before it",
                    signed.size,
                    frontier.size()
                ),
            ));
        }
        if signed.root != frontier.root() {
            return Err(self.unvouched(signed.size, &format!("the checkpoint of row {seq}")));
        }
        self.vouched = signed.size;
        self.checkpoints += 1;
        Ok(())
    }

    /// The rows a checkpoint of `size` leaves does not vouch for, named from the first one
    /// the last matching checkpoint left out.
    fn unvouched(&self, size: u64, what: &str) -> (u64, String) {
        let from = self.origin + self.vouched;
        let to = self.origin + size - 1;
        (
            from,
            format!(
                "{what} does not match the rows: a row from seq {from} to {to} was changed, \
                 and the tree with it"
            ),
        )
    }
}
