//! The replica and the contract's rule: per (`subjectstore`, `partitionkey`) keep the
//! greatest `subjectversion` applied and the entity, or "deleted" keeping the version; apply
//! an event only if its version is greater. Duplicates, redeliveries, cross-node arrival
//! order and retries are then harmless: whatever order the events come in, the replica ends
//! on the state of the greatest version.
//!
//! Snapshots prune what the rule alone cannot see go: once one is complete (see
//! [`Snapshot::complete`]), every subject of a covered (kind, store) at or below the floor
//! that the snapshot did not refresh is marked deleted with version = floor.
//!
//! Pure: no I/O, no clock. The replica file and the consumers are around it.

use std::collections::{BTreeMap, BTreeSet};

use cloudevents::Event;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::event::{self, Change, EventError, Kind, Meaning};
use super::snapshot::Snapshot;
use super::version::Version;

/// What a replica keeps of one subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The kind of subject.
    pub kind: Kind,
    /// The greatest version applied (a delete's too).
    pub version: Version,
    /// The subject (its redacted view, as events carry it); `None`: deleted.
    pub entity: Option<Value>,
}

/// The replica: every subject seen, by store and key, and the snapshots under way.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replica {
    /// `subjectstore` -> `partitionkey` -> entry.
    pub subjects: BTreeMap<String, BTreeMap<String, Entry>>,
    /// Snapshots with some part seen and not yet complete, by id.
    #[serde(default)]
    pub snapshots: BTreeMap<String, Snapshot>,
    /// Ids of the snapshots completed (and pruned): a late duplicate of one of their events
    /// is stale, not the start of a new bookkeeping.
    #[serde(default)]
    pub completed: BTreeSet<String>,
}

/// What applying one event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// The event's version was greater: the replica took it.
    Applied,
    /// A duplicate or an older version: nothing changed (a snapshot still saw it).
    Stale,
    /// A snapshot marker, recorded.
    Marker,
    /// A type the replica does not keep (`io.ankusa.instance.restored`, ...).
    Ignored,
}

/// What applying one event did, and how many subjects a snapshot it completed pruned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Effect {
    /// What became of the event.
    pub disposition: Disposition,
    /// Whether the event completed a snapshot (which then pruned).
    pub completed: bool,
    /// Subjects marked deleted by the snapshot this event completed (0 if none).
    pub pruned: usize,
}

impl Effect {
    /// `disposition`, completing no snapshot.
    fn of(disposition: Disposition) -> Effect {
        Effect {
            disposition,
            completed: false,
            pruned: 0,
        }
    }
}

impl Replica {
    /// Apply `event` by the rule; an error (and nothing applied) for an event that breaks
    /// the contract.
    pub fn apply_event(&mut self, event: &Event) -> Result<Effect, EventError> {
        Ok(self.apply(event::read(event)?))
    }

    /// Apply what one event means.
    pub fn apply(&mut self, meaning: Meaning) -> Effect {
        let (disposition, snapshot) = match meaning {
            Meaning::Change(change) => {
                let snapshot = change.snapshot.clone();
                let seen = (change.store.clone(), change.key.clone());
                let disposition = self.apply_change(change);
                (disposition, snapshot.map(|id| (id, seen)))
            }
            Meaning::SnapshotStarted(started) => {
                let id = started.id.clone();
                if let Some(s) = self.snapshot(&id) {
                    s.started = Some(started);
                }
                return self.complete(&id, Disposition::Marker);
            }
            Meaning::SnapshotFinished(finished) => {
                if let Some(s) = self.snapshot(&finished.id) {
                    s.count = Some(finished.count);
                }
                return self.complete(&finished.id, Disposition::Marker);
            }
            Meaning::Ignored => (Disposition::Ignored, None),
        };
        let Some((id, seen)) = snapshot else {
            return Effect::of(disposition);
        };
        if let Some(s) = self.snapshot(&id) {
            s.items.insert(seen);
        }
        self.complete(&id, disposition)
    }

    /// The rule for one subject.
    fn apply_change(&mut self, change: Change) -> Disposition {
        let keys = self.subjects.entry(change.store).or_default();
        match keys.get(&change.key) {
            Some(kept) if kept.version >= change.version => Disposition::Stale,
            _ => {
                let entry = Entry {
                    kind: change.kind,
                    version: change.version,
                    entity: change.entity,
                };
                keys.insert(change.key, entry);
                Disposition::Applied
            }
        }
    }

    /// The bookkeeping of snapshot `id`; `None` once it is completed.
    fn snapshot(&mut self, id: &str) -> Option<&mut Snapshot> {
        if self.completed.contains(id) {
            return None;
        }
        Some(self.snapshots.entry(id.to_owned()).or_default())
    }

    /// Prune by snapshot `id` if it is complete now.
    fn complete(&mut self, id: &str, disposition: Disposition) -> Effect {
        let done = self.snapshots.get(id).is_some_and(Snapshot::complete);
        let Some(snapshot) = done.then(|| self.snapshots.remove(id)).flatten() else {
            return Effect::of(disposition);
        };
        self.completed.insert(id.to_owned());
        let pruned = self.prune(&snapshot);
        Effect {
            disposition,
            completed: true,
            pruned,
        }
    }

    /// Mark deleted (version = floor) every subject of each covered (kind, store) at or below
    /// its floor that `snapshot` did not refresh; returns how many existed until now.
    fn prune(&mut self, snapshot: &Snapshot) -> usize {
        let Some(started) = &snapshot.started else {
            return 0;
        };
        let mut pruned = 0;
        for floor in &started.stores {
            let Some(keys) = self.subjects.get_mut(&floor.store) else {
                continue;
            };
            for (key, entry) in keys.iter_mut() {
                let refreshed = snapshot.items.contains(&(floor.store.clone(), key.clone()));
                if entry.kind != floor.kind || entry.version > floor.floor || refreshed {
                    continue;
                }
                pruned += usize::from(entry.entity.is_some());
                entry.entity = None;
                entry.version = floor.floor;
            }
        }
        pruned
    }

    /// The subjects that exist, by (store, key).
    pub fn present(&self) -> impl Iterator<Item = (&str, &str, &Entry)> {
        self.subjects.iter().flat_map(|(store, keys)| {
            keys.iter()
                .filter(|(_, e)| e.entity.is_some())
                .map(move |(key, e)| (store.as_str(), key.as_str(), e))
        })
    }

    /// How many subjects exist and how many are kept as deleted.
    pub fn counts(&self) -> (usize, usize) {
        let all: usize = self.subjects.values().map(BTreeMap::len).sum();
        let present = self.present().count();
        (present, all - present)
    }
}

#[cfg(test)]
mod tests;
