//! The first boot after a restore: a new incarnation, before any change is taken.
//!
//! A store restored from a backup (`store::restore` leaves `m:incarnation_pending` in it)
//! will hand out again the seqs that the lost store used after the backup, and some of those
//! rows were already published: an event id keyed with the old incarnation would then name
//! two different events. So, before the writer serves, boot appends `{from: m:audit_seq + 1,
//! fresh id}` to `m:incarnation` and writes the `instance.restore` row (system context, seq
//! `m:audit_seq + 1`, flagged with its outbox entity `{"incarnation", "restored_seq"}` when
//! lifecycle events are on: `io.ankusa.instance.restored`), its counters, and the deletion of
//! the flag, in ONE synced batch. A crash before that write leaves the flag (the next boot does
//! it all again, with another fresh id that nothing has seen); after it, the finished
//! incarnation and no flag. Never half.
//!
//! The same batch leaves `m:refresh_pending`: routes (and Redis sources) live outside the
//! store and were not rolled back with it, so once their stores are open the node publishes a
//! state refresh for every one of them the restored trail no longer describes (see
//! `subjects::remote::refresh`), and only then deletes the marker.
//!
//! Rows of the restored trail keep the incarnation they were published under, so a sink
//! whose position came back from the backup receives them again with their original ids (and
//! dedupes them), then the `instance.restored` event, then the new incarnation's rows, whose
//! ids differ from every id published before although their seqs repeat.

use rocksdb::WriteBatch;
use serde_json::{json, Map};
use uuid::Uuid;

use crate::audit::bounds::usage::Usage;
use crate::audit::clock::Clock;
use crate::audit::restore::incarnation::{next_base, now_micros, History, Incarnation};
use crate::audit::row::{Row, RowResult, ROW_FORMAT};
use crate::audit::tree::{self, Frontier, Layout, TreeMeta};
use crate::audit::SYSTEM_ACTOR;
use crate::store::backup::last_seq;
use crate::store::restore::PendingRestore;
use crate::store::{keys, keys::meta, Cf, Store, StoreError};
use crate::telemetry;

/// The action of the row a restore leaves (event type `io.ankusa.instance.restored`).
pub const RESTORE_ACTION: &str = "instance.restore";
/// The resource of that row: the node itself.
pub const RESTORE_RESOURCE: &str = "instance";

/// If the store carries `m:incarnation_pending`, start the new incarnation (see the module
/// doc). Runs before the writer's boot reads the store's meta, so that boot (the trail's
/// history, last seq, usage, newest event) sees the finished incarnation like any other
/// state, and the writer takes its first change after it. Reads what it needs itself.
pub(crate) fn start_incarnation(
    store: &Store,
    lifecycle: bool,
    tree: bool,
    clock: &dyn Clock,
) -> Result<(), StoreError> {
    let Some(flag) = store.meta(meta::INCARNATION_PENDING)? else {
        return Ok(());
    };
    fail::fail_point!("audit::restore::before_batch");
    let restored = PendingRestore::decode(&flag);
    let restored_seq = last_seq(store)?;
    let seq = restored_seq + 1;
    let mut history = match store.meta(meta::INCARNATION)? {
        Some(bytes) => History::decode(&bytes)?,
        None => History::first(),
    };
    let incarnation = Incarnation {
        from: seq,
        id: Uuid::new_v4(),
        base: next_base(Some(&history.current()), seq, now_micros()),
    };
    history.0.push(incarnation);
    let last_at = store
        .last(Cf::Audit, &[keys::ROW])?
        .and_then(|(k, _)| keys::decode_row_key(&k))
        .map_or(0, |(_, at)| at);
    let at = clock.now_ms().max(last_at);
    let row = restore_row(seq, at, incarnation.id, restored_seq, restored, lifecycle);
    let entity = lifecycle.then(|| {
        let e = json!({"incarnation": incarnation.id, "restored_seq": restored_seq});
        serde_json::to_vec(&e).expect("an entity always serializes")
    });
    let mut batch = incarnation_batch(store, &history, &row, entity, restored_seq)?;
    if tree {
        join_tree(store, &mut batch, &row)?;
    }
    // sync = true: the incarnation, its row, the refresh marker and the flag's deletion are
    // durable together before the writer takes the first change of the new incarnation.
    store.write(batch, true)?;
    fail::fail_point!("audit::restore::after_batch");

    telemetry::audit::row_committed(&row);
    tracing::warn!(
        target: "ankusa::audit",
        incarnation = %incarnation.id,
        from = seq,
        restored_seq,
        backup_id = restored.map(|r| r.backup_id),
        "restored store: opened a new incarnation"
    );
    Ok(())
}

/// The one batch of the new incarnation (row `row` with its `entity`, after the restored
/// trail's last seq `restored_seq`): `history`, the row and its counters, the flag's
/// deletion and `m:refresh_pending`.
fn incarnation_batch(
    store: &Store,
    history: &History,
    row: &Row,
    entity: Option<Vec<u8>>,
    restored_seq: u64,
) -> Result<WriteBatch, StoreError> {
    let (seq, at) = (row.seq, row.at);
    let value = serde_json::to_vec(row).expect("a row always serializes");
    let audit = store.cf(Cf::Audit);
    let mut batch = WriteBatch::default();
    batch.put_cf(audit, keys::meta_key(meta::INCARNATION), history.encode());
    batch.put_cf(audit, keys::row_key(seq, at), &value);
    fail::fail_point!("audit::restore::in_batch");
    let mut bytes = keys::ROW_KEY_LEN + value.len();
    if let Some(entity) = &entity {
        batch.put_cf(audit, keys::outbox_key(seq), entity);
        bytes += keys::SEQ_KEY_LEN + entity.len();
    }
    batch.put_cf(audit, keys::meta_key(meta::AUDIT_SEQ), seq.to_be_bytes());
    // The counters move with the row when they were right; otherwise they stay stale (for
    // another seq) and boot recounts them, this row included.
    let stored = store.meta(meta::AUDIT_USAGE)?;
    if let Some(mut usage) = stored.and_then(|u| Usage::decode(&u)) {
        if usage.seq == restored_seq {
            usage.rows += 1;
            usage.bytes += bytes as u64;
            usage.seq = seq;
            batch.put_cf(audit, keys::meta_key(meta::AUDIT_USAGE), usage.encode());
        }
    }
    batch.delete_cf(audit, keys::meta_key(meta::INCARNATION_PENDING));
    // The remote subjects were not restored with the trail: they are refreshed after boot
    // (`subjects::remote::refresh`), and this marker stays until that is done.
    batch.put_cf(
        audit,
        keys::meta_key(meta::REFRESH_PENDING),
        seq.to_be_bytes(),
    );
    Ok(batch)
}

/// Add the `instance.restore` row to the restored tree, in its batch, when the tree holds
/// every row before it. A tree that lags (a backup from before the tree, or taken while it
/// was off) is caught up with this row at the writer's boot, just after.
fn join_tree(store: &Store, batch: &mut WriteBatch, row: &Row) -> Result<(), StoreError> {
    // A store of an older layout is brought to tiles at boot first: until then its tree lags
    // this row.
    let Some(TreeMeta {
        origin,
        layout: Layout::Tiles,
    }) = TreeMeta::read(store)?
    else {
        return Ok(());
    };
    let size = tree::stored_size(store)?;
    if origin + size != row.seq {
        return Ok(());
    }
    let value = serde_json::to_vec(row).expect("a row always serializes");
    let (mut tree, audit) = (Frontier::load(store, origin, size)?, store.cf(Cf::Audit));
    tree.put_nodes(audit, batch, &keys::row_key(row.seq, row.at), &value);
    tree.flush(audit, batch);
    Ok(())
}

/// The `instance.restore` row: who is the node itself, what is the new incarnation.
fn restore_row(
    seq: u64,
    at: u64,
    incarnation: Uuid,
    restored_seq: u64,
    restored: Option<PendingRestore>,
    publish: bool,
) -> Row {
    let mut detail = Map::new();
    detail.insert("incarnation".into(), json!(incarnation));
    detail.insert("restored_seq".into(), json!(restored_seq));
    if let Some(r) = restored {
        detail.insert("backup_id".into(), json!(r.backup_id));
        detail.insert("restored_at".into(), json!(r.restored_at));
    }
    Row {
        v: ROW_FORMAT,
        seq,
        at,
        actor: SYSTEM_ACTOR.to_owned(),
        remote_ip: None,
        request_id: None,
        action: RESTORE_ACTION.to_owned(),
        tenant: None,
        resource: RESTORE_RESOURCE.to_owned(),
        detail,
        before_hash: None,
        after_hash: None,
        revision: None,
        result: RowResult::Ok,
        publish,
        refresh: false,
        version: None,
        store: None,
        snapshot: None,
        traceparent: None,
        tracestate: None,
    }
}
