//! The bookkeeping of one snapshot: its two markers and the distinct subjects it refreshed.
//!
//! Markers and items reach a consumer in any order (they travel in different partitions), so
//! each part is recorded as it comes and the snapshot is complete once it has the started
//! marker, the finished marker and as many distinct items as the finished marker counts.
//! Only then may the replica prune: before that, a subject not (yet) refreshed may simply be
//! an item still on its way.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::event::Kind;
use super::version::Version;

/// The data entity of `io.ankusa.snapshot.started`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Started {
    /// The snapshot id.
    pub id: String,
    /// The stores the snapshot covers, each with its floor.
    pub stores: Vec<Floor>,
}

/// One store a snapshot covers: every subject of `kind` in `store` at or below `floor` that
/// the snapshot does not refresh no longer exists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Floor {
    /// The kind of subject the store holds.
    pub kind: Kind,
    /// The store (`subjectstore`).
    pub store: String,
    /// The store's version when the snapshot began.
    pub floor: Version,
}

/// The data entity of `io.ankusa.snapshot.finished`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finished {
    /// The snapshot id.
    pub id: String,
    /// How many items (refreshed events, all kinds) the snapshot has.
    pub count: u64,
}

impl Started {
    /// The started marker's entity, or why it is not one.
    pub fn parse(entity: Value) -> Result<Started, String> {
        serde_json::from_value(entity).map_err(|e| format!("snapshot.started entity: {e}"))
    }
}

impl Finished {
    /// The finished marker's entity, or why it is not one.
    pub fn parse(entity: Value) -> Result<Finished, String> {
        serde_json::from_value(entity).map_err(|e| format!("snapshot.finished entity: {e}"))
    }
}

/// What a replica has seen of one snapshot so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The started marker, once seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<Started>,
    /// The finished marker's count, once seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// The distinct subjects refreshed as items: (`subjectstore`, `partitionkey`).
    #[serde(default)]
    pub items: BTreeSet<(String, String)>,
}

impl Snapshot {
    /// Whether every part has arrived: both markers and exactly `count` distinct items.
    pub fn complete(&self) -> bool {
        self.started.is_some() && self.count == Some(self.items.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn markers_parse_from_the_contract_shape() {
        let started = Started::parse(json!({"id": "s1", "stores": [
            {"kind": "route", "store": "redis:a", "floor": "00000000000000000009"}
        ]}))
        .unwrap();
        assert_eq!(started.stores[0].kind, Kind::Route);
        assert_eq!(started.stores[0].floor, Version(9));
        let e = Started::parse(json!({"id": "s1", "stores": [{"kind": "override"}]})).unwrap_err();
        assert!(e.starts_with("snapshot.started entity: "), "{e}");
        let finished = Finished::parse(json!({"id": "s1", "count": 2})).unwrap();
        assert_eq!(finished.count, 2);
        assert!(Finished::parse(json!({"id": "s1"})).is_err());
    }

    #[test]
    fn complete_needs_both_markers_and_the_count() {
        let mut s = Snapshot::default();
        s.items.insert(("a".into(), "k".into()));
        s.count = Some(1);
        assert!(!s.complete(), "no started marker yet");
        s.started = Some(Started {
            id: "s".into(),
            stores: vec![],
        });
        assert!(s.complete());
        s.count = Some(2);
        assert!(!s.complete(), "an item is still on its way");
    }
}
