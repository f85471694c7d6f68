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
            },
            Incarnation {
                from: 10,
                id: ids[1],
            },
            Incarnation {
                from: 10,
                id: ids[2],
            },
        ]);
        assert_eq!(h.of(1).id, ids[0]);
        assert_eq!(h.of(9).id, ids[0]);
        // Two restores from one backup: the later entry wins for the repeated range.
        assert_eq!(h.of(10).id, ids[2]);
        assert_eq!(h.of(u64::MAX).id, ids[2]);
        assert_eq!(History::decode(&h.encode()).unwrap(), h);
    }
}
