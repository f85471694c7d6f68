//! The first boot after a restore: a new incarnation, before any change is taken.
//!
//! A store restored from a backup (`store::restore` leaves `m:incarnation_pending` in it)
//! will hand out again the seqs that the lost store used after the backup, and some of those
//! rows were already published: an event id keyed with the old incarnation would then name
//! two different events. So, once boot has read the store and before the writer serves, the
//! writer's first group appends `{from: m:audit_seq + 1, fresh id}` to `m:incarnation` and
//! takes the `instance.restore` row (system context, seq `m:audit_seq + 1`, flagged with its
//! outbox entity `{"incarnation", "restored_seq"}` when lifecycle events are on:
//! `io.ankusa.instance.restored`) like any row, with the deletion of the flag, in ONE synced
//! batch. A crash before that write leaves the flag (the next boot does it all again, with
//! another fresh id that nothing has seen); after it, the finished incarnation and no flag.
//! Never half.
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

use bytes::Bytes;
use serde_json::{json, Map};
use uuid::Uuid;

use crate::audit::restore::incarnation::{next_base, now_micros, History, Incarnation};
use crate::audit::row::{encode_json, Change};
use crate::audit::writer::Group;
use crate::store::restore::PendingRestore;
use crate::store::{keys, keys::meta, Cf, Store, StoreError};

/// The action of the row a restore leaves (event type `io.ankusa.instance.restored`).
pub const RESTORE_ACTION: &str = "instance.restore";
/// The resource of that row: the node itself.
pub const RESTORE_RESOURCE: &str = "instance";

/// A restored store's new incarnation, which the writer's first group opens.
pub(crate) struct Opening {
    incarnation: Incarnation,
    /// The restored trail's last seq.
    restored_seq: u64,
    restored: Option<PendingRestore>,
    /// `m:incarnation` with the new incarnation last.
    history: History,
}

/// If the store carries `m:incarnation_pending`, the new incarnation after the trail's last
/// seq `last_seq`, appended to `history` (the node keys its events and versions with it from
/// now on; it is on disk once the writer's first group is).
pub(crate) fn opening(
    store: &Store,
    history: &mut History,
    last_seq: u64,
) -> Result<Option<Opening>, StoreError> {
    let Some(flag) = store.meta(meta::INCARNATION_PENDING)? else {
        return Ok(None);
    };
    fail::fail_point!("audit::restore::before_batch");
    let from = last_seq + 1;
    let incarnation = Incarnation {
        from,
        id: Uuid::new_v4(),
        base: next_base(Some(&history.current()), from, now_micros()),
    };
    history.0.push(incarnation);
    Ok(Some(Opening {
        incarnation,
        restored_seq: last_seq,
        restored: PendingRestore::decode(&flag),
        history: history.clone(),
    }))
}

impl Opening {
    /// The seq of its row, from which `m:refresh_pending` counts.
    pub(crate) fn from(&self) -> u64 {
        self.incarnation.from
    }

    /// The `instance.restore` row's change: who is the node itself, what is the new
    /// incarnation; its entity is the event's data.
    pub(crate) fn change(&self) -> Change {
        let (id, restored_seq) = (self.incarnation.id, self.restored_seq);
        let mut detail = Map::new();
        detail.insert("incarnation".into(), json!(id));
        detail.insert("restored_seq".into(), json!(restored_seq));
        if let Some(r) = self.restored {
            detail.insert("backup_id".into(), json!(r.backup_id));
            detail.insert("restored_at".into(), json!(r.restored_at));
        }
        let entity: Bytes = encode_json(&json!({"incarnation": id, "restored_seq": restored_seq}));
        Change {
            action: RESTORE_ACTION.to_owned(),
            resource: RESTORE_RESOURCE.to_owned(),
            detail,
            entity: Some(entity),
            ..Change::default()
        }
    }

    /// Stage, beside its row, the new history, the flag's deletion and `m:refresh_pending`
    /// (the remote subjects were not restored with the trail: they are refreshed after boot,
    /// `subjects::remote::refresh`, and the marker stays until that is done).
    pub(crate) fn stage_meta(&self, store: &Store, g: &mut Group) {
        let mut put = |name: &str, value: Option<Vec<u8>>| {
            g.stage(store, Cf::Audit, keys::meta_key(name), value);
        };
        put(meta::INCARNATION, Some(self.history.encode()));
        fail::fail_point!("audit::restore::in_batch");
        put(meta::INCARNATION_PENDING, None);
        put(
            meta::REFRESH_PENDING,
            Some(self.from().to_be_bytes().to_vec()),
        );
    }

    /// Say the incarnation is open (its row is written).
    pub(crate) fn opened(&self) {
        let i = self.incarnation;
        let backup_id = self.restored.map(|r| r.backup_id);
        crate::telemetry::audit::incarnation_opened(i.id, i.from, self.restored_seq, backup_id);
    }
}
