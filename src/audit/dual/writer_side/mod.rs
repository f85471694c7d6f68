//! The writer's side of a dual write: putting a pending row into a group, and moving it into
//! the trail with the outcome its caller gives (`finish`) or settlement finds (`settle`).
//!
//! Settlement hands the writer the subject's present state, read by the subject's reconciler;
//! it is hashed and compared here, because the hash key never leaves the writer.
//!
//! The writer keeps each pending row it begins, and its entity's bytes, until the row moves
//! into the trail ([`Begun`]): a finish or settlement then neither reads them back nor decodes
//! them. What is kept of a group that is not written is forgotten with it, so what is kept is
//! always the row as written; a row begun by an earlier run is read from the store.
//!
//! Only a delete's entity is written beside its pending row (`q`+id). Settlement after a crash
//! reads any other change's subject back, and a subject whose state hashes to the row's
//! after_hash has the very view the change's event carries; a deleted subject is gone, so its
//! entity (the subject as it was) must be kept.

use bytes::Bytes;
use serde_json::Value;

use super::handle::{Finish, Pending};
use super::pending_row::{decode_pending, PendingRow, PENDING_FORMAT};
use super::requests::{Answer, Begin, FinishReq, Refusal, SettleReq};
use super::settle::{Presence, Reading};
use crate::audit::context::Context;
use crate::audit::row::{encode_json, Change, Row, RowResult, Stamp, ROW_FORMAT};
use crate::audit::writer::stage::Staged;
use crate::audit::writer::{Group, NoRoom, Writer};
use crate::store::{keys, Cf, StoreError};

/// Put a pending row into the group: a bounded change (an operator's) may be refused by the
/// outbox backlog or the ceilings (room is made for the row its finish will write), a system
/// or relieving one never is.
pub(crate) fn begin(w: &mut Writer, g: &mut Group, at: u64, req: Begin) -> Answer {
    let Begin {
        ctx,
        change,
        abandoned,
        reply,
    } = req;
    let admission = ctx.admission();
    let deletes = change.after.is_none();
    let (row, entity) = pending_row_of(w, at, ctx, change);
    let value = serde_json::to_vec(&row).expect("a pending row always serializes");
    let entity = entity.filter(|_| w.lifecycle());
    // About the size of the row (and entity) it becomes.
    let size = keys::ROW_KEY_LEN + value.len() + entity.as_ref().map_or(0, Bytes::len);
    if let Err(no) = w.reserve(g, size as u64, admission) {
        let why = match no {
            NoRoom::Backlog => Refusal::Backlog,
            NoRoom::Unreadable => Refusal::Unavailable,
        };
        return Answer::Refused { why, reply };
    }
    let beside = deletes && entity.is_some();
    let id = put_pending(w, g, value, entity.as_ref().filter(|_| beside));
    let pending = Pending::new(id, row.resource.clone(), abandoned);
    w.keep_begun(
        g,
        id,
        Begun {
            row,
            entity,
            beside,
        },
    );
    Answer::Begun { pending, reply }
}

/// A pending row and its entity's bytes.
pub(crate) struct Begun {
    row: PendingRow,
    entity: Option<Bytes>,
    /// Whether the entity may be in the store beside the row (`q`+id).
    beside: bool,
}

impl Begun {
    /// The encoded redacted entity its event is to carry, where the writer has it: kept since
    /// its begin in this run, beside the row, or in the row itself when an earlier version
    /// wrote it there.
    fn entity(&mut self) -> Option<Bytes> {
        match self.row.entity.take() {
            Some(inside) => Some(encode_json(&inside)),
            None => self.entity.take(),
        }
    }
}

/// The pending row of `change`, begun at `at` (its states hashed, never stored), and the
/// entity its event is to carry.
fn pending_row_of(
    w: &Writer,
    at: u64,
    ctx: Context,
    change: Change,
) -> (PendingRow, Option<Bytes>) {
    let (kind, locator) = change
        .locator
        .map(|(k, l)| (Some(k), Some(l)))
        .unwrap_or_default();
    let row = PendingRow {
        v: PENDING_FORMAT,
        begun_at: at,
        actor: ctx.actor,
        remote_ip: ctx.remote_ip,
        request_id: ctx.request_id,
        action: change.action,
        tenant: change.tenant,
        resource: change.resource,
        detail: change.detail,
        before_hash: w.hasher().hash_state(change.before.as_ref()),
        after_hash: w.hasher().hash_state(change.after.as_ref()),
        revision: change.revision,
        kind,
        locator,
        entity: None,
        traceparent: ctx.trace.as_ref().map(|t| t.traceparent.clone()),
        tracestate: ctx.trace.and_then(|t| t.tracestate),
    };
    (row, change.entity)
}

/// Hand out the next pending id and put its row (`value`) and entity into the group (the
/// group's close puts `m:pending_seq`).
fn put_pending(w: &mut Writer, g: &mut Group, value: Vec<u8>, entity: Option<&Bytes>) -> u64 {
    let id = w.next_pending_id();
    g.stage(
        w.store(),
        Cf::Audit,
        keys::pending_key(id).to_vec(),
        Some(value),
    );
    if let Some(entity) = entity {
        let key = keys::pending_entity_key(id).to_vec();
        g.stage(w.store(), Cf::Audit, key, Some(entity.to_vec()));
    }
    id
}

/// Move pending row `id` into the trail as the caller says it went. Never refused.
pub(crate) fn finish(w: &mut Writer, g: &mut Group, at: u64, req: FinishReq) -> Answer {
    if req.how == Finish::Refused {
        // A change the other store refused changed nothing: like a refused commit, it
        // leaves no row. Only the pending row (and its entity) goes.
        let beside = w.take_begun(req.id).is_none_or(|p| p.beside);
        remove(w, g, req.id, beside);
        return Answer::Settled {
            row: Ok(None),
            reply: req.reply,
        };
    }
    let how = req.how;
    let row = move_into_trail(w, g, at, req.id, |_, p| match how {
        Finish::Applied(stamp) => Verdict {
            result: RowResult::Ok,
            refresh: false,
            entity: p.entity(),
            stamp: Some(stamp),
        },
        Finish::NotApplied => Verdict::unpublished(RowResult::Failed),
        Finish::Unknown | Finish::Refused => Verdict::unpublished(RowResult::Interrupted),
    });
    Answer::Settled {
        row,
        reply: req.reply,
    }
}

/// Move pending row `id` into the trail by what settlement found: the present state's hash
/// is the row's after_hash (`ok`, published) or before_hash (`failed`); anything else was
/// changed by someone else meanwhile (`interrupted`, flagged for a state-refresh event that
/// carries the present state). A store that could not be read, or a subject no reconciler
/// knows, settles `interrupted` without a refresh.
pub(crate) fn settle(w: &mut Writer, g: &mut Group, at: u64, req: SettleReq) -> Answer {
    let SettleReq {
        id,
        presence,
        reply,
    } = req;
    let row = move_into_trail(w, g, at, id, |w, p| match presence {
        Presence::Read(Reading { present, stamp }) => {
            let hash = w.hasher().hash(present.as_ref().map(|p| &p.state));
            if hash == p.row.after_hash {
                // The subject is as the change wrote it: its view is the change's entity.
                let entity = p
                    .entity()
                    .or_else(|| present.map(|present| encode_json(&present.view)));
                Verdict {
                    result: RowResult::Ok,
                    refresh: false,
                    entity,
                    stamp,
                }
            } else if hash == p.row.before_hash {
                Verdict::unpublished(RowResult::Failed)
            } else {
                Verdict {
                    result: RowResult::Interrupted,
                    refresh: true,
                    entity: Some(encode_json(&present.map_or(Value::Null, |p| p.view))),
                    stamp,
                }
            }
        }
        Presence::Unreadable | Presence::Unreconciled => {
            Verdict::unpublished(RowResult::Interrupted)
        }
    });
    Answer::Settled { row, reply }
}

/// How a pending row went.
struct Verdict {
    result: RowResult,
    /// Flagged for a state refresh: the entity is the present state, not the change's.
    refresh: bool,
    /// The encoded entity its event carries (`None`: no event).
    entity: Option<Bytes>,
    /// The subject's version the event carries.
    stamp: Option<Stamp>,
}

impl Verdict {
    /// A row that publishes nothing.
    fn unpublished(result: RowResult) -> Verdict {
        Verdict {
            result,
            refresh: false,
            entity: None,
            stamp: None,
        }
    }
}

/// Pending row `id`, if it is still there, moved into the trail as `decide` says it went.
fn move_into_trail(
    w: &mut Writer,
    g: &mut Group,
    at: u64,
    id: u64,
    decide: impl FnOnce(&Writer, &mut Begun) -> Verdict,
) -> Result<Option<Box<Row>>, StoreError> {
    let Some(mut p) = load(w, g, id)? else {
        return Ok(None);
    };
    let verdict = decide(w, &mut p);
    let row = into_trail(w, g, at, p.row, verdict);
    remove(w, g, id, p.beside);
    Ok(Some(row))
}

/// Delete pending row `id` in the group's batch, and its entity when it may be `beside` it.
fn remove(w: &Writer, g: &mut Group, id: u64, beside: bool) {
    let entity = beside.then(|| keys::pending_entity_key(id));
    for key in std::iter::once(keys::pending_key(id)).chain(entity) {
        g.stage(w.store(), Cf::Audit, key.to_vec(), None);
    }
}

/// Pending row `id` and its entity: as the writer kept them since its begin in this run, else
/// as the group sees them (a settlement earlier in the group included).
fn load(w: &mut Writer, g: &Group, id: u64) -> Result<Option<Begun>, StoreError> {
    if let Some(begun) = w.take_begun(id) {
        return Ok(Some(begun));
    }
    let tx = w.tx(g);
    let key = keys::pending_key(id);
    let Some(value) = tx.get(Cf::Audit, &key)? else {
        return Ok(None);
    };
    let row = decode_pending(&key, &value)?;
    let key = keys::pending_entity_key(id);
    let entity = tx.get(Cf::Audit, &key)?;
    if let Some(bytes) = &entity {
        // Published as stored; it must at least be JSON.
        serde_json::from_slice::<serde::de::IgnoredAny>(bytes).map_err(|e| {
            StoreError::Corrupt {
                what: format!("pending entity {}", hex::encode(key)),
                detail: e.to_string(),
            }
        })?;
    }
    Ok(Some(Begun {
        row,
        entity: entity.map(Bytes::from),
        beside: true,
    }))
}

/// Put pending row `p`'s trail row (and outbox entity, when published) into the group under
/// the next seq. Never refused: a change already begun is always recorded, over a ceiling if
/// it must be.
fn into_trail(w: &mut Writer, g: &mut Group, at: u64, p: PendingRow, verdict: Verdict) -> Box<Row> {
    let Verdict {
        result,
        refresh,
        entity,
        stamp,
    } = verdict;
    let publish = w.lifecycle() && entity.is_some();
    let mut row = trail_row(p, (g.next_seq(), at), result, publish, refresh);
    if let Some(stamp) = stamp {
        (row.version, row.store) = (Some(stamp.version), stamp.store);
    }
    w.append(g, Staged::of_row(row, entity))
}

/// The trail row pending row `p` becomes as row `seq` at `at`.
fn trail_row(
    p: PendingRow,
    (seq, at): (u64, u64),
    result: RowResult,
    publish: bool,
    refresh: bool,
) -> Row {
    Row {
        v: ROW_FORMAT,
        seq,
        at,
        actor: p.actor,
        remote_ip: p.remote_ip,
        request_id: p.request_id,
        action: p.action,
        tenant: p.tenant,
        resource: p.resource,
        detail: p.detail,
        before_hash: p.before_hash,
        after_hash: p.after_hash,
        revision: p.revision,
        result,
        publish,
        refresh,
        version: None,
        store: None,
        snapshot: None,
        traceparent: p.traceparent,
        tracestate: p.tracestate,
    }
}

#[cfg(test)]
mod tests;
