//! The rule's property (any order and duplication of events ends on the greatest version's
//! state) and the snapshot pruning cases.

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::replica::snapshot::{Finished, Started};

fn change(store: &str, key: &str, version: u64, entity: Option<Value>) -> Change {
    Change {
        kind: Kind::Route,
        store: store.into(),
        key: key.into(),
        version: Version(version),
        entity,
        snapshot: None,
    }
}

fn item(store: &str, key: &str, version: u64, snapshot: &str) -> Meaning {
    let entity = Some(json!({"id": key, "v": version}));
    Meaning::Change(Change {
        snapshot: Some(snapshot.into()),
        ..change(store, key, version, entity)
    })
}

fn started(id: &str, floors: &[(Kind, &str, u64)]) -> Meaning {
    let stores: Vec<Value> = floors
        .iter()
        .map(|(kind, store, floor)| {
            json!({"kind": kind.name(), "store": store, "floor": Version(*floor).to_string()})
        })
        .collect();
    Meaning::SnapshotStarted(Started::parse(json!({"id": id, "stores": stores})).unwrap())
}

fn finished(id: &str, count: u64) -> Meaning {
    Meaning::SnapshotFinished(Finished {
        id: id.into(),
        count,
    })
}

fn entry(replica: &Replica, store: &str, key: &str) -> Option<Entry> {
    replica.subjects.get(store)?.get(key).cloned()
}

/// One subject's history: creates, updates, refreshes, deletes and re-creates, versions
/// strictly increasing by `gap`s; `op` picks the next change given whether it exists.
fn history(store: &str, key: &str, steps: &[(u8, u64)]) -> Vec<Change> {
    let (mut version, mut exists) = (0, false);
    let mut out = Vec::new();
    for &(op, gap) in steps {
        version += gap;
        let entity = Some(json!({"id": key, "at": version}));
        let (entity, now) = match (exists, op) {
            (false, 2) => (None, false), // a refresh of a deleted subject
            (false, _) => (entity, true),
            (true, 1) => (None, false),
            (true, _) => (entity, true),
        };
        exists = now;
        out.push(change(store, key, version, entity));
    }
    out
}

fn steps() -> impl Strategy<Value = Vec<(u8, u64)>> {
    prop::collection::vec((0u8..3, 1u64..4), 1..16)
}

/// Subjects (some sharing a key in two stores), their histories mixed, duplicated, shuffled.
fn mixed() -> impl Strategy<Value = (Vec<Vec<Change>>, Vec<Change>)> {
    let subjects = [
        ("s1", "t/routes/a"),
        ("s2", "t/routes/a"),
        ("s1", "t/routes/b"),
    ];
    let histories = prop::collection::vec(steps(), 1..=3).prop_map(move |all| {
        all.iter()
            .zip(subjects)
            .map(|(steps, (store, key))| history(store, key, steps))
            .collect::<Vec<_>>()
    });
    let dups = prop::collection::vec(any::<prop::sample::Index>(), 0..12);
    (histories, dups).prop_flat_map(|(histories, dups)| {
        let mut events: Vec<Change> = histories.iter().flatten().cloned().collect();
        let copies: Vec<Change> = dups.iter().map(|i| i.get(&events).clone()).collect();
        events.extend(copies);
        (Just(histories), Just(events).prop_shuffle())
    })
}

proptest! {
    #[test]
    fn any_order_and_duplication_ends_on_the_last_state((histories, events) in mixed()) {
        let mut replica = Replica::default();
        for e in events {
            replica.apply(Meaning::Change(e));
        }
        for history in &histories {
            let last = history.last().unwrap();
            let expected = Entry { kind: Kind::Route, version: last.version, entity: last.entity.clone() };
            prop_assert_eq!(entry(&replica, &last.store, &last.key), Some(expected));
        }
        let kept: usize = replica.subjects.values().map(BTreeMap::len).sum();
        prop_assert_eq!(kept, histories.len());
    }

    #[test]
    fn each_version_applies_once(steps in steps()) {
        let events = history("s", "k", &steps);
        let mut replica = Replica::default();
        for e in events.iter().chain(&events) {
            replica.apply(Meaning::Change(e.clone()));
        }
        let mut again = replica.clone();
        for e in &events {
            let effect = again.apply(Meaning::Change(e.clone()));
            prop_assert_eq!(effect.disposition, Disposition::Stale);
        }
        prop_assert_eq!(again, replica);
    }
}

/// A replica holding a (v1), b (v2), c (v3) in store s, and a source x (v4) in s.
fn with_subjects() -> Replica {
    let mut r = Replica::default();
    for (key, v) in [("t/routes/a", 1), ("t/routes/b", 2), ("t/routes/c", 3)] {
        r.apply(Meaning::Change(change(
            "s",
            key,
            v,
            Some(json!({"id": key})),
        )));
    }
    let source = Change {
        kind: Kind::Source,
        ..change("s", "t/sources/x", 4, Some(json!({})))
    };
    r.apply(Meaning::Change(source));
    r
}

fn deleted_at(version: u64) -> Option<Entry> {
    Some(Entry {
        kind: Kind::Route,
        version: Version(version),
        entity: None,
    })
}

#[test]
fn a_complete_snapshot_prunes_what_it_did_not_refresh_in_any_order() {
    let parts = [
        started("snap", &[(Kind::Route, "s", 5)]),
        item("s", "t/routes/a", 1, "snap"),
        item("s", "t/routes/c", 3, "snap"),
        finished("snap", 2),
    ];
    for order in permutations(parts.len()) {
        let mut r = with_subjects();
        let pruned: usize = order
            .iter()
            .map(|&i| r.apply(parts[i].clone()).pruned)
            .sum();
        assert_eq!(pruned, 1, "{order:?}");
        assert_eq!(entry(&r, "s", "t/routes/b"), deleted_at(5), "{order:?}");
        assert!(entry(&r, "s", "t/routes/a").unwrap().entity.is_some());
        assert!(entry(&r, "s", "t/routes/c").unwrap().entity.is_some());
        assert!(
            entry(&r, "s", "t/sources/x").unwrap().entity.is_some(),
            "other kind kept"
        );
        assert!(r.snapshots.is_empty() && r.completed.contains("snap"));
    }
}

#[test]
fn duplicate_items_count_once() {
    let mut r = with_subjects();
    r.apply(started("snap", &[(Kind::Route, "s", 5)]));
    r.apply(item("s", "t/routes/a", 1, "snap"));
    r.apply(item("s", "t/routes/a", 1, "snap"));
    assert_eq!(r.apply(finished("snap", 2)).pruned, 0);
    assert!(
        entry(&r, "s", "t/routes/b").unwrap().entity.is_some(),
        "one item to come"
    );
    assert_eq!(r.apply(item("s", "t/routes/c", 3, "snap")).pruned, 1);
    assert_eq!(entry(&r, "s", "t/routes/b"), deleted_at(5));
}

#[test]
fn a_subject_changed_during_the_snapshot_is_kept() {
    let mut r = with_subjects();
    r.apply(started("snap", &[(Kind::Route, "s", 5)]));
    let during = change("s", "t/routes/d", 7, Some(json!({"id": "d"})));
    r.apply(Meaning::Change(during));
    r.apply(item("s", "t/routes/a", 1, "snap"));
    assert_eq!(r.apply(finished("snap", 1)).pruned, 2);
    assert_eq!(entry(&r, "s", "t/routes/d").unwrap().version, Version(7));
    assert!(entry(&r, "s", "t/routes/d").unwrap().entity.is_some());
    assert_eq!(entry(&r, "s", "t/routes/c"), deleted_at(5));
    // An event of a pruned subject at or below the floor is stale now.
    let late = change("s", "t/routes/c", 4, Some(json!({})));
    assert_eq!(
        r.apply(Meaning::Change(late)).disposition,
        Disposition::Stale
    );
}

#[test]
fn an_incomplete_snapshot_prunes_nothing() {
    let cases: [&[Meaning]; 3] = [
        &[
            started("snap", &[(Kind::Route, "s", 5)]),
            item("s", "t/routes/a", 1, "snap"),
        ],
        &[item("s", "t/routes/a", 1, "snap"), finished("snap", 1)],
        &[
            started("snap", &[(Kind::Route, "s", 5)]),
            item("s", "t/routes/a", 1, "snap"),
            finished("snap", 2),
        ],
    ];
    for parts in cases {
        let mut r = with_subjects();
        for part in parts {
            assert_eq!(r.apply(part.clone()).pruned, 0);
        }
        assert_eq!(r.counts(), (4, 0));
        assert!(r.snapshots.contains_key("snap") && r.completed.is_empty());
    }
}

#[test]
fn late_parts_of_a_completed_snapshot_start_nothing() {
    let mut r = with_subjects();
    for part in [
        started("snap", &[(Kind::Route, "s", 5)]),
        finished("snap", 0),
    ] {
        r.apply(part);
    }
    assert_eq!(
        r.counts(),
        (1, 3),
        "an empty snapshot prunes every route at or below 5"
    );
    r.apply(started("snap", &[(Kind::Route, "s", 5)]));
    assert!(r.snapshots.is_empty());
}

/// Every permutation of 0..n.
fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![vec![]];
    }
    let mut out = Vec::new();
    for rest in permutations(n - 1) {
        for at in 0..=rest.len() {
            let mut p = rest.clone();
            p.insert(at, n - 1);
            out.push(p);
        }
    }
    out
}
