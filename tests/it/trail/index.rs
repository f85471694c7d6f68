//! The rows' index entries: written in each row's batch (refused changes write none), deleted
//! with the rows by the ceilings and by retention, counted in `m:audit_usage`, and built at
//! the boot of a store written before them. Exactness after kill -9s is checked by the crash
//! tests (`crash::commit`, `crash::sweep`).

use std::sync::Arc;

use crate::support::trail::*;
use crate::trail::retention::{limits, open, DAY, T0};
use ankusa::audit::{Change, CommitError, Finish, ManualClock, TrailOptions, Usage};
use ankusa::store::{keys, keys::meta, Cf, Store};

/// `m:audit_usage` equals a count of what the store holds.
fn assert_usage_true(store: &Store) {
    let seq = store.meta_u64(meta::AUDIT_SEQ).unwrap();
    let stored = Usage::decode(&store.meta(meta::AUDIT_USAGE).unwrap().unwrap()).unwrap();
    assert_eq!(stored, Usage::recount(store, seq).unwrap(), "m:audit_usage");
}

/// A change by `actor` to `resource` of `tenant`.
async fn change(trail: &ankusa::audit::Trail, actor: &str, resource: &str, tenant: Option<&str>) {
    let (resource, tenant) = (resource.to_owned(), tenant.map(str::to_owned));
    trail
        .commit(ctx(actor), move |_tx| {
            let mut c = Change::new("override.set", resource.clone());
            if let Some(t) = tenant {
                c = c.tenant(t);
            }
            Ok::<_, CommitError<()>>((c, ()))
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn entries_go_with_their_rows_through_commits_refusals_ceilings_and_retention() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let mut limits = limits(1, 4);
    limits.max_rows = 12;
    let trail = open(dir.path(), &[], limits, &clock);
    let store = trail.store().clone();
    for i in 0..6 {
        let actor = ["alice", "bob"][i % 2];
        change(&trail, actor, &format!("overrides/k{i}"), Some("t1")).await;
    }
    change(&trail, "system", "instance", None).await;
    // A refused change writes no row, and no entry.
    let refused = trail
        .commit(ctx("alice"), |_tx| {
            Err::<(Change, ()), _>(CommitError::Refused(()))
        })
        .await;
    assert!(refused.is_err());
    // Dual writes that did not take effect: `failed` and `interrupted` rows.
    for how in [Finish::NotApplied, Finish::Unknown] {
        let pending = trail
            .begin::<()>(
                ctx("carol"),
                Change::new("route.update", "routes/r1").tenant("t2"),
            )
            .await
            .unwrap();
        trail.finish(pending, how).await.unwrap();
    }
    assert_eq!(all_rows(&store).len(), 9);
    assert_index_exact(&store);
    assert_eq!(
        expected_index(&store).len(),
        9 * 2 + 8 + 9 + 2,
        "actor and subject of each row, the tenants, the times, the two results"
    );
    assert_usage_true(&store);
    // The ceiling (12 rows) prunes the oldest to make room: their entries go with them.
    for i in 0..8 {
        change(&trail, "dave", &format!("overrides/m{i}"), Some("t3")).await;
    }
    assert_eq!(all_rows(&store).first().map(|r| r.seq), Some(6));
    assert_index_exact(&store);
    assert_usage_true(&store);
    // Retention, two days on: every row committed at T0 goes, with its entries (11 of the
    // 12: the late change's room was made by the ceiling).
    clock.set(T0 + 2 * DAY);
    change(&trail, "erin", "overrides/late", Some("t1")).await;
    let report = trail.sweep_now().await.unwrap();
    assert_eq!(report.pruned, 11);
    assert_eq!(all_rows(&store).len(), 1);
    assert_index_exact(&store);
    assert_usage_true(&store);
    trail.shutdown().await;
}

#[tokio::test]
async fn a_store_written_before_the_entries_has_them_built_once_at_boot() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail_with(dir.path(), TrailOptions::default());
    for i in 0..25 {
        change(
            &trail,
            ["alice", "bob", "carol"][i % 3],
            &format!("overrides/k{i}"),
            Some("t1"),
        )
        .await;
    }
    trail.shutdown().await;
    drop(trail);
    // As a store written before them: no entries, no `m:index`, its usage without them.
    {
        let db = open_stopped(dir.path());
        let audit = db.cf_handle(Cf::Audit.name()).unwrap();
        let entries: Vec<Box<[u8]>> = db
            .prefix_iterator_cf(audit, [keys::INDEX])
            .map(|kv| kv.unwrap().0)
            .take_while(|k| k.first() == Some(&keys::INDEX))
            .collect();
        assert_eq!(entries.len(), 25 * 4);
        let usage_key = keys::meta_key(meta::AUDIT_USAGE);
        let mut usage = Usage::decode(&db.get_cf(audit, &usage_key).unwrap().unwrap()).unwrap();
        usage.bytes -= entries.iter().map(|k| k.len() as u64).sum::<u64>();
        let mut batch = rocksdb::WriteBatch::default();
        for key in &entries {
            batch.delete_cf(audit, key);
        }
        batch.delete_cf(audit, keys::meta_key(meta::INDEX));
        batch.put_cf(audit, &usage_key, usage.encode());
        db.write(batch).unwrap();
    }
    let trail = open_trail_with(dir.path(), TrailOptions::default());
    let store = trail.store().clone();
    assert_eq!(stored_index(&store).len(), 25 * 4);
    assert_index_exact(&store);
    assert_usage_true(&store);
    assert_eq!(
        store.meta(meta::INDEX).unwrap().as_deref(),
        Some(&[1u8][..])
    );
    // Once: the next boot builds nothing (an entry deleted by hand stays missing).
    let some = stored_index(&store).into_iter().next().unwrap();
    trail.shutdown().await;
    drop((trail, store));
    {
        let db = open_stopped(dir.path());
        db.delete_cf(db.cf_handle(Cf::Audit.name()).unwrap(), &some)
            .unwrap();
    }
    let trail = open_trail_with(dir.path(), TrailOptions::default());
    assert!(!stored_index(trail.store()).contains(&some));
    trail.shutdown().await;
}
