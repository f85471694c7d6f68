//! A change's row, built and encoded before it goes into the group's batch.
//!
//! The writer needs the row's encoded size before it accepts the change: the ceilings are in
//! bytes, and room is made (or the change refused) before the row takes its seq. So the row
//! is encoded once, here, measured with its outbox entity (which the caller encoded, off this
//! thread), and put into the batch only if the change is accepted.

use bytes::Bytes;
use rocksdb::ColumnFamily;

use super::group::Group;
use crate::audit::context::Context;
use crate::audit::hash::SubjectHasher;
use crate::audit::index::Entries;
use crate::audit::row::{Change, Row, RowResult, Versioning, ROW_FORMAT};
use crate::store::keys;

/// What the writer stamps every row with: the subject states' hasher, whether lifecycle events
/// are on, and the incarnation's version base.
#[derive(Clone, Copy)]
pub(crate) struct Stamper<'a> {
    pub hasher: &'a SubjectHasher,
    pub lifecycle: bool,
    pub version_base: u64,
}

/// A row (and its entity) encoded but not yet in a batch.
pub(crate) struct Staged {
    row: Row,
    value: Vec<u8>,
    entity: Option<Bytes>,
    index: Entries,
}

impl Staged {
    /// The row of `change` as row `seq` at `at`: its subject states hashed (never stored),
    /// flagged and with its entity when lifecycle events are on and it carries one.
    pub(crate) fn new(
        stamper: Stamper<'_>,
        seq: u64,
        at: u64,
        ctx: &Context,
        change: Change,
    ) -> Staged {
        let before_hash = stamper.hasher.hash_state(change.before.as_ref());
        Staged::build(stamper, (seq, at), ctx, change, before_hash, false)
    }

    /// A state-refresh row (`refresh: true`, a system change) of `change`, whose `after` is
    /// the subject's present state; `before_hash` is what the trail said of it before.
    pub(crate) fn refresh(
        stamper: Stamper<'_>,
        (seq, at): (u64, u64),
        change: Change,
        before_hash: Option<String>,
    ) -> Staged {
        let ctx = Context::system();
        Staged::build(stamper, (seq, at), &ctx, change, before_hash, true)
    }

    fn build(
        stamper: Stamper<'_>,
        (seq, at): (u64, u64),
        ctx: &Context,
        change: Change,
        before_hash: Option<String>,
        refresh: bool,
    ) -> Staged {
        let publish = stamper.lifecycle && change.entity.is_some();
        let (version, store) = match change.versioning {
            Versioning::None => (None, None),
            Versioning::Stamped(stamp) => (Some(stamp.version), stamp.store),
            Versioning::Local => (Some(stamper.version_base.saturating_add(seq)), None),
        };
        let row = Row {
            v: ROW_FORMAT,
            seq,
            at,
            actor: ctx.actor.clone(),
            remote_ip: ctx.remote_ip.clone(),
            request_id: ctx.request_id.clone(),
            action: change.action,
            tenant: change.tenant,
            resource: change.resource,
            detail: change.detail,
            before_hash,
            after_hash: stamper.hasher.hash_state(change.after.as_ref()),
            revision: change.revision,
            result: RowResult::Ok,
            publish,
            refresh,
            version,
            store,
            snapshot: change.snapshot,
            traceparent: ctx.trace.as_ref().map(|t| t.traceparent.clone()),
            tracestate: ctx.trace.as_ref().and_then(|t| t.tracestate.clone()),
        };
        Staged::of_row(row, change.entity)
    }

    /// `row`, already whole (its seq the group's next), with the entity its event carries
    /// when it is flagged.
    pub(crate) fn of_row(row: Row, entity: Option<Bytes>) -> Staged {
        let value = serde_json::to_vec(&row).expect("a row always serializes");
        let entity = entity.filter(|_| row.publish);
        let index = Entries::of_row(&row);
        Staged {
            row,
            value,
            entity,
            index,
        }
    }

    /// The same without its index entries: for `TrailOptions::bench_without_index` only.
    pub(crate) fn without_index(mut self) -> Staged {
        self.index = Entries::default();
        self
    }

    /// Its seq.
    pub(crate) fn seq(&self) -> u64 {
        self.row.seq
    }

    /// The bytes it adds to the trail, keys and values, its index entries included, as
    /// `m:audit_usage` counts them.
    pub(crate) fn bytes(&self) -> u64 {
        let entity = self
            .entity
            .as_ref()
            .map_or(0, |e| keys::SEQ_KEY_LEN + e.len());
        (keys::ROW_KEY_LEN + self.value.len() + entity) as u64 + self.index.bytes()
    }

    /// Put it (its tree nodes and index entries too) into the group's batch and count it into
    /// its usage. The
    /// one place a row enters a batch: every row comes here through [`Writer::admit`].
    ///
    /// [`Writer::admit`]: super::Writer::admit
    pub(super) fn put(self, audit: &ColumnFamily, g: &mut Group) -> Row {
        g.seq = self.row.seq;
        g.usage.rows += 1;
        g.usage.bytes += self.bytes();
        let (seq, at) = (self.row.seq, self.row.at);
        let key = keys::row_key(seq, at);
        g.batch.put_cf(audit, key, &self.value);
        if let Some(tree) = g.tree.as_mut() {
            debug_assert_eq!(seq, tree.next_seq(), "rows join the tree in seq order");
            tree.put_nodes(audit, &mut g.batch, &key, &self.value);
        }
        if let Some(entity) = &self.entity {
            g.batch.put_cf(audit, keys::outbox_key(seq), entity);
        }
        self.index.put(audit, &mut g.batch);
        self.row
    }
}
