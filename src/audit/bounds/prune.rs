//! Deleting rows from the head of the trail, for the ceilings and for retention.
//!
//! Both delete the oldest rows first, each with its outbox entity, inside the writer's group
//! batch, so that `m:audit_usage` moves in the same atomic write as the rows it counts: a
//! kill -9 leaves both or neither. Neither may delete a row at or above the lifecycle cursor
//! while sinks are configured (the unseen events of a sink that is down must survive it):
//! the writer passes that bound as `below`, and [`Head`] never yields a row at or above it.
//!
//! The writer keeps one [`Head`] for its whole life. It knows the seq below which every row
//! is gone (`m:audit_usage`'s `from`), so it seeks straight past the tombstones of earlier
//! deletions, and it reads the oldest rows ahead in small chunks (keys, value lengths, and
//! the few fields their index entries are made of), so a change that must make room for
//! itself costs a pop from a queue, not a scan. Only the writer deletes rows, so what was read ahead stays
//! true until the writer itself deletes it.

use std::collections::{BTreeMap, VecDeque};

use rocksdb::WriteBatch;

use super::limits::Limits;
use super::usage::Usage;
use crate::audit::index::Entries;
use crate::audit::tree;
use crate::store::{keys, Cf, Store, StoreError};

/// Rows read ahead at a time.
const CHUNK: usize = 256;

/// The lifecycle cursor: the lowest position of the configured sinks (`None`: no sink is
/// configured, and nothing holds rows back).
pub(crate) fn cursor(positions: &BTreeMap<String, u64>) -> Option<u64> {
    positions.values().min().copied()
}

/// The seq below which rows may be deleted: never a row at or above the cursor, and never one
/// the store does not hold yet (`last_seq` is the last written; a group's own rows are not).
pub(crate) fn below(cursor: Option<u64>, last_seq: u64) -> u64 {
    let written = last_seq.saturating_add(1);
    cursor.map_or(written, |c| c.min(written))
}

/// The outbox backlog: `m:audit_seq` (`last_seq`) minus the cursor, the rows not every sink
/// has passed (0 without sinks). A healthy sink's position passes over rows that publish
/// nothing as soon as the publisher reads past them, so only a sink that is behind (down,
/// retrying, disabled) makes it grow, with every change, event or not.
pub(crate) fn backlog(cursor: Option<u64>, last_seq: u64) -> u64 {
    cursor.map_or(0, |c| last_seq.saturating_sub(c))
}

/// A row at the head of the trail: what deleting it and counting it out needs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Candidate {
    seq: u64,
    at: u64,
    row_bytes: u64,
    /// The size of its outbox entity, if it has one.
    entity_bytes: Option<u64>,
    /// Its index entries.
    index: Entries,
}

impl Candidate {
    fn bytes(&self) -> u64 {
        self.row_bytes + self.entity_bytes.unwrap_or(0) + self.index.bytes()
    }
}

/// The oldest rows of the trail, read ahead, and what the groups not yet written delete of
/// them: those handed to the syncer, oldest first, then the group being built. Each deletes
/// the rows after the ones the groups before it delete, so a group that prunes need not wait
/// for the one before it to be written.
#[derive(Debug)]
pub(crate) struct Head {
    /// Every row below this seq is deleted, as of the last written batch.
    floor: u64,
    /// The oldest rows not deleted as of the last written batch, in seq order.
    ahead: VecDeque<Candidate>,
    /// Every row up to this seq is in `ahead` or deleted: the next read starts after it.
    scanned: u64,
    /// How many of `ahead` each group handed over and not yet written deletes, oldest first
    /// (groups that delete none are not in it).
    handed: VecDeque<usize>,
    /// How many of `ahead`, after those, the group being built deletes.
    building: usize,
}

impl Head {
    /// The head of a trail whose rows below `from` are all deleted.
    pub(crate) fn new(from: u64) -> Head {
        Head {
            floor: from,
            ahead: VecDeque::new(),
            scanned: from.saturating_sub(1),
            handed: VecDeque::new(),
            building: 0,
        }
    }

    /// Rows the group being built deletes (staged in its batch, not yet written).
    pub(crate) fn staged(&self) -> usize {
        self.building
    }

    /// The group being built was handed over to be written, after every group before it.
    pub(crate) fn handed_over(&mut self) {
        if self.building > 0 {
            self.handed.push_back(self.building);
            self.building = 0;
        }
    }

    /// The oldest group handed over that deletes rows was written: they are gone.
    pub(crate) fn written(&mut self) {
        let Some(rows) = self.handed.pop_front() else {
            return;
        };
        if let Some(last) = rows.checked_sub(1).and_then(|i| self.ahead.get(i)) {
            self.floor = last.seq + 1;
            self.ahead.drain(..rows);
        }
    }

    /// A batch was not written. Every group prepared after it is not written either (the
    /// writer abandons them), so nothing any group not yet written deletes is gone.
    pub(crate) fn unwritten(&mut self) {
        self.handed.clear();
        self.building = 0;
    }

    /// Rows of `ahead` that groups not yet written delete (only the few in flight).
    fn claimed(&self) -> usize {
        self.handed.iter().sum::<usize>() + self.building
    }

    /// The oldest row not yet deleted, if its seq is below `below`.
    fn next(&mut self, store: &Store, below: u64) -> Result<Option<Candidate>, StoreError> {
        if self.ahead.len() == self.claimed() && self.scanned.saturating_add(1) < below {
            self.fill(store, below)?;
        }
        Ok(self
            .ahead
            .get(self.claimed())
            .filter(|c| c.seq < below)
            .cloned())
    }

    /// Delete `c` (the row [`Head::next`] returned) in `batch` and count it out of `usage`.
    /// Its entity, if it has one, is only noted in `entities`: the caller deletes those after
    /// the rows (see [`delete_entities`]).
    fn delete(
        &mut self,
        c: Candidate,
        store: &Store,
        batch: &mut WriteBatch,
        usage: &mut Usage,
        deleted: &mut Deleted,
    ) {
        batch.delete_cf(store.cf(Cf::Audit), keys::row_key(c.seq, c.at));
        if c.entity_bytes.is_some() {
            deleted.entities.push(c.seq);
        }
        usage.rows = usage.rows.saturating_sub(1);
        usage.bytes = usage.bytes.saturating_sub(c.bytes());
        usage.from = c.seq + 1;
        self.building += 1;
        deleted.rows.push(c.seq);
        deleted.index.push(c.index);
    }

    /// Read up to [`CHUNK`] more rows below `below`, with the sizes of their entities.
    fn fill(&mut self, store: &Store, below: u64) -> Result<(), StoreError> {
        fail::fail_point!("audit::prune_read", |_| Err(StoreError::Injected(
            "audit::prune_read".into()
        )));
        let start = self.scanned.saturating_add(1).max(self.floor);
        let mut rows = read_rows(store, start, below)?;
        let (Some(first), Some(last)) = (rows.first().map(|c| c.seq), rows.last().map(|c| c.seq))
        else {
            // Nothing is left below the bound (rows committed later have greater seqs).
            self.scanned = below.saturating_sub(1);
            return Ok(());
        };
        note_entities(store, &mut rows, first, last)?;
        self.scanned = if rows.len() == CHUNK {
            last
        } else {
            below.saturating_sub(1)
        };
        self.ahead.extend(rows);
        Ok(())
    }
}

/// Up to [`CHUNK`] rows from seq `start` on, below `below`: keys, value lengths and index
/// entries.
fn read_rows(store: &Store, start: u64, below: u64) -> Result<Vec<Candidate>, StoreError> {
    let mut rows: Vec<Candidate> = Vec::with_capacity(CHUNK);
    store.scan(Cf::Audit, &[keys::ROW], &keys::row_seek(start), |k, v| {
        // A key of the row prefix that is not a row key is damage: leave it, read on.
        let Some((seq, at)) = keys::decode_row_key(k) else {
            return true;
        };
        if seq >= below {
            return false;
        }
        let row_bytes = (k.len() + v.len()) as u64;
        // A row that does not decode has no entries to delete (none were written for it).
        let index = Entries::of_stored(k, v).unwrap_or_default();
        rows.push(Candidate {
            seq,
            at,
            row_bytes,
            entity_bytes: None,
            index,
        });
        rows.len() < CHUNK
    })?;
    Ok(rows)
}

/// Note the size of the outbox entity of each of `rows` (seqs `first` to `last`) that has
/// one, in one scan of the outbox.
fn note_entities(
    store: &Store,
    rows: &mut [Candidate],
    first: u64,
    last: u64,
) -> Result<(), StoreError> {
    let mut i = 0;
    store.scan(
        Cf::Audit,
        &[keys::OUTBOX],
        &keys::outbox_key(first),
        |k, v| {
            let Some(seq) = keys::decode_seq_key(keys::OUTBOX, k) else {
                return true;
            };
            if seq > last {
                return false;
            }
            while i < rows.len() && rows[i].seq < seq {
                i += 1;
            }
            if let Some(row) = rows.get_mut(i).filter(|r| r.seq == seq) {
                row.entity_bytes = Some((k.len() + v.len()) as u64);
            }
            true
        },
    )?;
    Ok(())
}

/// Delete the outbox entities of the rows a batch deletes, after all of its row deletes.
///
/// Rows (`r`) and entities (`o`) sit far apart in the key space. RocksDB inserts a batch's
/// entries into the memtable's skip list in order, and an entry next to the one before it
/// costs a few comparisons where one far away walks the list from the top: deleting each
/// row's entity beside it made the deletes most of a sweep batch's time on the writer and the
/// syncer, and so most of what the sweep added to the latency of the commits beside it.
fn delete_entities(store: &Store, batch: &mut WriteBatch, entities: &[u64]) {
    let audit = store.cf(Cf::Audit);
    for seq in entities {
        batch.delete_cf(audit, keys::outbox_key(*seq));
    }
}

/// What one sweep batch deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepBatch {
    /// Rows deleted (each with its entity, if it had one).
    pub pruned: u64,
    /// Bytes those rows and entities took.
    pub bytes: u64,
    /// The batch stopped at its size: more expired rows may be deletable.
    pub more: bool,
    /// The lifecycle cursor the batch stopped below (`None`: no sinks, nothing kept back).
    pub cursor: Option<u64>,
}

/// The rows one pruning deletes, those of them with an outbox entity, and their index
/// entries.
#[derive(Default)]
struct Deleted {
    rows: Vec<u64>,
    entities: Vec<u64>,
    index: Vec<Entries>,
}

impl Deleted {
    fn with_capacity(n: usize) -> Deleted {
        Deleted {
            rows: Vec::with_capacity(n),
            entities: Vec::with_capacity(n),
            index: Vec::with_capacity(n),
        }
    }
}

/// The rows a group deletes from the head, and the bound it may not reach.
pub(crate) struct Pruning<'a> {
    pub head: &'a mut Head,
    pub store: &'a Store,
    pub batch: &'a mut WriteBatch,
    pub usage: &'a mut Usage,
    /// Only rows with a smaller seq may be deleted (the cursor, or past the last row).
    pub below: u64,
    /// The seq of the Merkle tree's leaf 0 (`None`: no tree): a row's nodes go with it.
    pub tree: Option<u64>,
}

impl Pruning<'_> {
    /// Delete the oldest rows until a new row of `need` bytes fits under the ceilings of
    /// `limits`. Returns the rows deleted and whether it fits. A row that could never fit is
    /// refused without deleting anything.
    pub(crate) fn make_room(
        &mut self,
        need: u64,
        limits: &Limits,
    ) -> Result<(u64, bool), StoreError> {
        if limits.max_rows == 0 || need > limits.max_bytes {
            return Ok((0, false));
        }
        let mut pruned = 0;
        let mut deleted = Deleted::default();
        // Whether it fits; an error still leaves the rows taken so far in the batch.
        let fits = loop {
            if self.usage.rows < limits.max_rows
                && self.usage.bytes.saturating_add(need) <= limits.max_bytes
            {
                break Ok(true);
            }
            match self.head.next(self.store, self.below) {
                Ok(Some(c)) => {
                    self.delete(c, &mut deleted);
                    pruned += 1;
                }
                Ok(None) => break Ok(false),
                Err(e) => break Err(e),
            }
        };
        self.delete_after(&deleted);
        Ok((pruned, fits?))
    }

    /// Delete up to `max` rows committed before `older_than` (unix ms), oldest first,
    /// stopping at the first row that is not.
    pub(crate) fn sweep(&mut self, older_than: u64, max: usize) -> Result<SweepBatch, StoreError> {
        let mut out = SweepBatch::default();
        let mut deleted = Deleted::with_capacity(max.min(CHUNK));
        // Whether more may be left; an error still leaves the rows taken so far in the batch.
        let more = loop {
            if out.pruned >= max as u64 {
                break Ok(true);
            }
            match self.head.next(self.store, self.below) {
                Ok(Some(c)) if c.at < older_than => {
                    out.bytes += c.bytes();
                    self.delete(c, &mut deleted);
                    out.pruned += 1;
                }
                Ok(_) => break Ok(false),
                Err(e) => break Err(e),
            }
        };
        self.delete_after(&deleted);
        out.more = more?;
        Ok(out)
    }

    /// [`Head::delete`], in this group's batch and counters.
    fn delete(&mut self, c: Candidate, deleted: &mut Deleted) {
        self.head
            .delete(c, self.store, self.batch, self.usage, deleted);
    }

    /// After the rows' deletes, their entities', index entries' and tree nodes' (see
    /// [`delete_entities`] for why apart).
    fn delete_after(&mut self, deleted: &Deleted) {
        delete_entities(self.store, self.batch, &deleted.entities);
        // In key order, for the same reason: a row's entries are far apart (by actor, by
        // subject, by time), and the rows' entries of one kind are near each other.
        let mut entries: Vec<&[u8]> = deleted.index.iter().flat_map(Entries::keys).collect();
        entries.sort_unstable();
        let audit = self.store.cf(Cf::Audit);
        for key in entries {
            self.batch.delete_cf(audit, key);
        }
        if let Some(origin) = self.tree {
            tree::prune(self.store.cf(Cf::Audit), self.batch, origin, &deleted.rows);
        }
    }
}

#[cfg(test)]
mod tests;
