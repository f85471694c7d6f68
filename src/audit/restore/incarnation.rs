//! Incarnations: which id a row's lifecycle event id is keyed with.
//!
//! A store restored from a backup re-issues seqs that the lost store had already published.
//! Each restore starts a new incarnation `{from, id}`; an event's id is derived from the id of
//! the incarnation its seq falls in, so a re-used seq never re-uses an event id.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::store::StoreError;

/// One entry of `m:incarnation`: from seq `from` on, event ids are keyed with `id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Incarnation {
    /// The first seq of this incarnation.
    pub from: u64,
    /// The incarnation's id (a random UUID).
    pub id: Uuid,
    /// What the versions of this node's own subjects start from in it: the version of row
    /// `seq` is `base + seq` ([`Incarnation::version`]). A new incarnation's base is above
    /// every version an earlier life can have issued (see [`next_base`]). 0 in histories
    /// written before versions existed.
    #[serde(default)]
    pub base: u64,
}

impl Incarnation {
    /// The version of a local subject's row `seq` in this incarnation.
    pub fn version(&self, seq: u64) -> u64 {
        self.base.saturating_add(seq)
    }
}

/// The base of an incarnation that starts at seq `from` after `previous`, at wall-clock time
/// `now_micros`. Above every version of the restored trail (`previous.base` plus a seq below
/// `from`), and at least the time in microseconds: the life a restore replaced issued its
/// versions from an earlier base, one per row, and rows are not written a million a second
/// for long. So a restore never issues a version again while the clock does not run back.
pub fn next_base(previous: Option<&Incarnation>, from: u64, now_micros: u64) -> u64 {
    let restored = previous.map_or(0, |p| p.base.saturating_add(from));
    restored.max(now_micros)
}

/// The wall clock in microseconds since the epoch (0 before it).
pub fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The incarnation history, oldest first (`from` ascending).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct History(pub Vec<Incarnation>);

impl History {
    /// The history of a new store: one incarnation from seq 1.
    pub fn first() -> History {
        History(vec![Incarnation {
            from: 1,
            id: Uuid::new_v4(),
            base: next_base(None, 1, now_micros()),
        }])
    }

    /// Decode `m:incarnation`.
    pub fn decode(bytes: &[u8]) -> Result<History, StoreError> {
        let h: History = serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt {
            what: "m:incarnation".into(),
            detail: e.to_string(),
        })?;
        if h.0.is_empty() {
            return Err(StoreError::Corrupt {
                what: "m:incarnation".into(),
                detail: "empty history".into(),
            });
        }
        Ok(h)
    }

    /// Encode for `m:incarnation`.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a history always serializes")
    }

    /// The incarnation whose id keys the event of row `seq`: the entry with the largest
    /// `from` not above `seq` (the first entry for seqs before it).
    pub fn of(&self, seq: u64) -> Incarnation {
        let idx = self.0.partition_point(|i| i.from <= seq);
        self.0[idx.saturating_sub(1)]
    }

    /// The current (newest) incarnation.
    pub fn current(&self) -> Incarnation {
        *self.0.last().expect("a history is never empty")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn of_picks_the_entry_with_the_largest_from_not_above_seq() {
        let ids: Vec<Uuid> = (0..3).map(|_| Uuid::new_v4()).collect();
        let h = History(vec![
            Incarnation {
                from: 1,
                id: ids[0],
                base: 0,
            },
            Incarnation {
                from: 10,
                id: ids[1],
                base: 0,
            },
            Incarnation {
                from: 10,
                id: ids[2],
                base: 0,
            },
        ]);
        assert_eq!(h.of(1).id, ids[0]);
        assert_eq!(h.of(9).id, ids[0]);
        // Two restores from one backup: the later entry wins for the repeated range.
        assert_eq!(h.of(10).id, ids[2]);
        assert_eq!(h.of(u64::MAX).id, ids[2]);
        assert_eq!(History::decode(&h.encode()).unwrap(), h);
    }

    #[test]
    fn a_new_base_is_above_the_restored_trail_and_the_clock() {
        let old = Incarnation {
            from: 1,
            id: Uuid::new_v4(),
            base: 5_000,
        };
        // The restored trail's rows are below seq 100: their versions below 5_100.
        assert_eq!(next_base(Some(&old), 100, 10), 5_100);
        assert_eq!(next_base(Some(&old), 100, 9_000_000), 9_000_000);
        assert_eq!(next_base(None, 1, 42), 42);
        assert_eq!(old.version(7), 5_007);
        // A history written before versions existed reads with base 0.
        let legacy: History =
            serde_json::from_str(&format!(r#"[{{"from":1,"id":"{}"}}]"#, old.id)).unwrap();
        assert_eq!(legacy.current().base, 0);
    }
}
