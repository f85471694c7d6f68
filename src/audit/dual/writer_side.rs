//! Pending rows: the writer's half of a dual write (`Trail::begin` and `finish`), and of the
//! settlement of a change that was begun and never finished.
//!
//! A change that lives outside this store (a route in Redis) cannot share a batch with its
//! row. So the writer first puts a pending row `p`+id, synced, saying what is about to happen,
//! with the hashes of the states before and after (the states themselves are never stored);
//! the caller applies the change; then ONE batch deletes `p`+id and writes the trail row with
//! the outcome. The trail row takes its seq only then, from the normal counter: a begun change
//! never holds a trail seq, because a reader that resumes after the last seq it saw must never
//! miss a row that lands later with a smaller key. Pending ids count apart, in
//! `m:pending_seq`.
//!
//! Settlement hands the writer the subject's present state, read by the subject's reconciler;
//! it is hashed and compared here, because the hash key never leaves the writer.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};

use crate::audit::context::Context;
use crate::audit::dual::settle::Presence;
use crate::audit::dual::{Finish, Pending};
use crate::audit::dual_events;
use crate::audit::row::{Change, Row, RowResult, ROW_FORMAT};
use crate::audit::writer::tx::Tx;
use crate::audit::writer::{Group, Writer};
use crate::store::{keys, keys::meta, Cf, Store, StoreError};
use crate::telemetry;

/// The format version written into every pending row.
pub const PENDING_FORMAT: u32 = 1;

/// A pending row: what a begun change is about to do. Never a secret or a spec, like a row,
/// nor an entity: the entity its event will carry, redacted, when lifecycle events are on, is
/// beside it at `q`+id (written in the same batch), and finishing moves it to `o`+seq. It
/// must be kept until then, because a delete's event carries the subject as it was, which a
/// settlement after a crash cannot read back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingRow {
    /// Format version ([`PENDING_FORMAT`]).
    pub v: u32,
    /// When it was begun (unix milliseconds).
    pub begun_at: u64,
    /// Who asked.
    pub actor: String,
    /// The client's address.
    pub remote_ip: Option<String>,
    /// The request's id.
    pub request_id: Option<String>,
    /// `<kind>.<verb>`, e.g. `route.update`.
    pub action: String,
    /// The subject's tenant.
    pub tenant: Option<String>,
    /// The subject, e.g. `routes/r1`.
    pub resource: String,
    /// What the caller put in the detail.
    pub detail: Map<String, Value>,
    /// HMAC of the subject before the change.
    pub before_hash: Option<String>,
    /// HMAC of the subject as the change is about to write it.
    pub after_hash: Option<String>,
    /// The subject's revision after the change.
    pub revision: Option<u64>,
    /// The subject's kind: which reconciler settles it (`None`: none can).
    pub kind: Option<String>,
    /// Where the reconciler finds the subject.
    pub locator: Option<Value>,
    /// Only in pending rows written before the entity moved to `q`+id: the redacted entity
    /// to publish if the change settles `ok`. Read, never written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entity: Option<Value>,
}

/// Decode a pending row's value.
pub fn decode_pending(key: &[u8], value: &[u8]) -> Result<PendingRow, StoreError> {
    serde_json::from_slice(value).map_err(|e| StoreError::Corrupt {
        what: format!("pending row {}", hex::encode(key)),
        detail: e.to_string(),
    })
}

/// Every pending row of the store, by id, in id order.
pub fn pending_rows(store: &Store) -> Result<Vec<(u64, PendingRow)>, StoreError> {
    let mut rows = Vec::new();
    let mut failure = None;
    store.scan(Cf::Audit, &[keys::PENDING], &[keys::PENDING], |k, v| {
        match (keys::decode_seq_key(keys::PENDING, k), decode_pending(k, v)) {
            (Some(id), Ok(row)) => rows.push((id, row)),
            (_, Err(e)) => failure = Some(e),
            (None, _) => {}
        }
        failure.is_none()
    })?;
    failure.map_or(Ok(rows), Err)
}

/// The last pending id handed out: `m:pending_seq`, or the newest pending row if a damaged
/// store says less. Never hand out an id twice.
pub(crate) fn last_id(store: &Store) -> Result<u64, StoreError> {
    let newest = store
        .last(Cf::Audit, &[keys::PENDING])?
        .and_then(|(k, _)| keys::decode_seq_key(keys::PENDING, &k))
        .unwrap_or(0);
    let last = store.meta_u64(meta::PENDING_SEQ)?.max(newest);
    crate::audit::writer::reachable("m:pending_seq", last)
}

/// Why a begin was refused. Nothing of it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The ceilings or the outbox backlog.
    Backlog,
    /// The store could not be read or written.
    Unavailable,
}

/// What a finish or a settlement wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    /// The trail row's seq.
    pub seq: u64,
    /// What the row says the change did.
    pub result: RowResult,
    /// Flagged for a state-refresh event.
    pub refresh: bool,
}

/// The answer to a settlement: `None` when the pending row was already gone (finished or
/// settled by another path).
pub(crate) type SettleReply = oneshot::Sender<Result<Option<Settled>, StoreError>>;

/// Write a pending row.
pub(crate) struct Begin {
    pub ctx: Context,
    pub change: Change,
    /// Where the `Pending` sends its id if it is dropped unfinished.
    pub abandoned: mpsc::UnboundedSender<u64>,
    pub reply: oneshot::Sender<Result<Pending, Refusal>>,
}

/// Move pending row `id` into the trail with the caller's outcome.
pub(crate) struct FinishReq {
    pub id: u64,
    pub how: Finish,
    pub reply: SettleReply,
}

/// Move pending row `id` into the trail with what reconcile found.
pub(crate) struct SettleReq {
    pub id: u64,
    pub presence: Presence,
    pub reply: SettleReply,
}

/// A pending request taken into the group, answered once the batch is written (or not).
pub(crate) enum Answer {
    Begun {
        pending: Pending,
        reply: oneshot::Sender<Result<Pending, Refusal>>,
    },
    Refused {
        why: Refusal,
        reply: oneshot::Sender<Result<Pending, Refusal>>,
    },
    Settled {
        row: Result<Option<Box<Row>>, StoreError>,
        reply: SettleReply,
    },
}

impl Answer {
    /// Answer the caller; `written` is the group batch's fate.
    pub(crate) fn complete(self, written: &Result<u64, StoreError>) {
        match self {
            Answer::Begun { mut pending, reply } => {
                if written.is_err() {
                    // Nothing was written: there is nothing to settle.
                    pending.disarm();
                    let _ = reply.send(Err(Refusal::Unavailable));
                } else {
                    dual_events::begun();
                    if let Err(Ok(pending)) = reply.send(Ok(pending)) {
                        // The caller is gone: dropping the Pending hands it to settlement.
                        drop(pending);
                    }
                }
            }
            Answer::Refused { why, reply } => {
                let _ = reply.send(Err(why));
            }
            Answer::Settled { row, reply } => {
                let answer = match (written, row) {
                    (Err(e), _) => Err(StoreError::Unavailable(format!("batch not written: {e}"))),
                    (Ok(_), Err(e)) => Err(e),
                    (Ok(_), Ok(None)) => Ok(None),
                    (Ok(_), Ok(Some(row))) => {
                        telemetry::row_committed(&row);
                        Ok(Some(Settled {
                            seq: row.seq,
                            result: row.result,
                            refresh: row.refresh,
                        }))
                    }
                };
                let _ = reply.send(answer);
            }
        }
    }
}

/// Put a pending row into the group: an operator's change may be refused by the outbox
/// backlog or the ceilings (room is made for the row its finish will write), a system one
/// never is.
pub(crate) fn begin(w: &mut Writer, g: &mut Group, at: u64, req: Begin) -> Answer {
    let Begin {
        ctx,
        change,
        abandoned,
        reply,
    } = req;
    let exempt = ctx.is_system();
    if !exempt && g.backlog_full(&w.limits) {
        return refuse(g, "backlog", reply);
    }
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
        before_hash: w.hasher.hash(change.before.as_ref()),
        after_hash: w.hasher.hash(change.after.as_ref()),
        revision: change.revision,
        kind,
        locator,
        entity: None,
    };
    let value = serde_json::to_vec(&row).expect("a pending row always serializes");
    let entity = change
        .entity
        .filter(|_| w.lifecycle)
        .map(|e| serde_json::to_vec(&e).expect("an entity always serializes"));
    // About the size of the row (and entity) it becomes.
    let size = keys::ROW_KEY_LEN + value.len() + entity.as_ref().map_or(0, Vec::len);
    match w.make_room(g, size as u64) {
        Ok(fits) => {
            if !fits && !exempt {
                return refuse(g, "ceiling", reply);
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "reading the oldest rows failed; change not begun");
            return Answer::Refused {
                why: Refusal::Unavailable,
                reply,
            };
        }
    }
    w.pending += 1;
    let id = w.pending;
    let key = keys::pending_key(id);
    let audit = w.store.cf(Cf::Audit);
    g.batch.put_cf(audit, key, &value);
    g.overlay.insert((Cf::Audit, key.to_vec()), Some(value));
    if let Some(entity) = entity {
        let key = keys::pending_entity_key(id);
        g.batch.put_cf(audit, key, &entity);
        g.overlay.insert((Cf::Audit, key.to_vec()), Some(entity));
    }
    g.batch
        .put_cf(audit, keys::meta_key(meta::PENDING_SEQ), id.to_be_bytes());
    Answer::Begun {
        pending: Pending::new(id, row.resource, abandoned),
        reply,
    }
}

/// Move pending row `id` into the trail as the caller says it went. Never refused.
pub(crate) fn finish(w: &mut Writer, g: &mut Group, at: u64, req: FinishReq) -> Answer {
    if req.how == Finish::Refused {
        // A change the other store refused changed nothing: like a refused commit, it
        // leaves no row. Only the pending row (and its entity) goes.
        remove(w, g, req.id);
        return Answer::Settled {
            row: Ok(None),
            reply: req.reply,
        };
    }
    let how = req.how;
    let row = move_into_trail(w, g, at, req.id, |w, g, p| {
        Ok(match how {
            Finish::Applied => (RowResult::Ok, false, entity_of(w, g, req.id, p)?),
            Finish::NotApplied => (RowResult::Failed, false, None),
            Finish::Unknown | Finish::Refused => (RowResult::Interrupted, false, None),
        })
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
    let row = move_into_trail(w, g, at, id, |w, g, p| {
        Ok(match presence {
            Presence::Read(present) => {
                let hash = w.hasher.hash(present.as_ref().map(|p| &p.state));
                if hash == p.after_hash {
                    (RowResult::Ok, false, entity_of(w, g, id, p)?)
                } else if hash == p.before_hash {
                    (RowResult::Failed, false, None)
                } else {
                    let view = present.map_or(Value::Null, |p| p.view);
                    (RowResult::Interrupted, true, Some(view))
                }
            }
            Presence::Unreadable | Presence::Unreconciled => (RowResult::Interrupted, false, None),
        })
    });
    Answer::Settled { row, reply }
}

/// How a pending row went: its result, whether it is flagged for a state refresh, and the
/// entity its event carries (`None`: no event).
type Outcome = (RowResult, bool, Option<Value>);

/// Pending row `id`, if it is still there, moved into the trail as `decide` says it went.
fn move_into_trail(
    w: &mut Writer,
    g: &mut Group,
    at: u64,
    id: u64,
    decide: impl FnOnce(&Writer, &Group, &mut PendingRow) -> Result<Outcome, StoreError>,
) -> Result<Option<Box<Row>>, StoreError> {
    let Some(mut p) = load(w, g, id)? else {
        return Ok(None);
    };
    let (result, refresh, entity) = decide(w, g, &mut p)?;
    Ok(Some(into_trail(w, g, at, id, p, result, refresh, entity)))
}

/// The redacted entity of pending row `id`: at `q`+id as the group sees it, or in the row
/// itself when an earlier version wrote it there.
fn entity_of(
    w: &Writer,
    g: &Group,
    id: u64,
    p: &mut PendingRow,
) -> Result<Option<Value>, StoreError> {
    if let Some(entity) = p.entity.take() {
        return Ok(Some(entity));
    }
    let key = keys::pending_entity_key(id);
    let Some(bytes) = Tx::new(&w.store, &g.overlay, &w.unsynced).get(Cf::Audit, &key)? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| StoreError::Corrupt {
            what: format!("pending entity {}", hex::encode(key)),
            detail: e.to_string(),
        })
}

/// Delete pending row `id` and its entity in the group's batch.
fn remove(w: &Writer, g: &mut Group, id: u64) {
    let audit = w.store.cf(Cf::Audit);
    for key in [keys::pending_key(id), keys::pending_entity_key(id)] {
        g.batch.delete_cf(audit, key);
        g.overlay.insert((Cf::Audit, key.to_vec()), None);
    }
}

/// Pending row `id` as the group sees it (a begin or a settlement earlier in the group
/// included).
fn load(w: &Writer, g: &Group, id: u64) -> Result<Option<PendingRow>, StoreError> {
    let key = keys::pending_key(id);
    match Tx::new(&w.store, &g.overlay, &w.unsynced).get(Cf::Audit, &key)? {
        None => Ok(None),
        Some(value) => decode_pending(&key, &value).map(Some),
    }
}

/// Delete pending row `id` and put its trail row (and outbox entity, when published) into the
/// group's batch under the next seq. Never refused: a change already begun is always
/// recorded, over a ceiling if it must be.
#[allow(clippy::too_many_arguments)]
fn into_trail(
    w: &mut Writer,
    g: &mut Group,
    at: u64,
    id: u64,
    p: PendingRow,
    result: RowResult,
    refresh: bool,
    entity: Option<Value>,
) -> Box<Row> {
    let publish = w.lifecycle && entity.is_some();
    let row = Row {
        v: ROW_FORMAT,
        seq: g.seq + 1,
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
    };
    let value = serde_json::to_vec(&row).expect("a row always serializes");
    let entity = entity
        .filter(|_| publish)
        .map(|e| serde_json::to_vec(&e).expect("an entity always serializes"));
    let bytes = (keys::ROW_KEY_LEN
        + value.len()
        + entity.as_ref().map_or(0, |e| keys::SEQ_KEY_LEN + e.len())) as u64;
    // Always recorded, over the ceiling if it must be.
    if let Err(e) = w.make_room(g, bytes) {
        tracing::warn!(error = %e, "reading the oldest rows failed; recording over the ceiling");
    }
    g.seq += 1;
    let audit = w.store.cf(Cf::Audit);
    g.batch.put_cf(audit, keys::row_key(g.seq, at), &value);
    if let Some(entity) = &entity {
        g.batch.put_cf(audit, keys::outbox_key(g.seq), entity);
    }
    g.usage.rows += 1;
    g.usage.bytes += bytes;
    remove(w, g, id);
    Box::new(row)
}

/// Refuse a begin with `AuditBacklog` (`reason`: which limit), as the writer refuses a commit.
fn refuse(
    g: &mut Group,
    reason: &'static str,
    reply: oneshot::Sender<Result<Pending, Refusal>>,
) -> Answer {
    g.refused += 1;
    telemetry::change_refused(reason);
    Answer::Refused {
        why: Refusal::Backlog,
        reply,
    }
}

#[cfg(test)]
mod tests {
    use crate::audit::*;
    use rocksdb::WriteBatch;

    fn row(action: &str) -> PendingRow {
        PendingRow {
            v: PENDING_FORMAT,
            begun_at: 1,
            actor: "alice".into(),
            remote_ip: None,
            request_id: None,
            action: action.into(),
            tenant: Some("t1".into()),
            resource: "routes/r1".into(),
            detail: Map::new(),
            before_hash: None,
            after_hash: Some("ab".into()),
            revision: Some(1),
            kind: Some("route".into()),
            locator: Some(serde_json::json!({"tenant": "t1", "id": "r1"})),
            entity: None,
        }
    }

    #[test]
    fn the_last_id_is_never_below_a_stored_pending_row() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(last_id(&store).unwrap(), 0);
        let mut batch = WriteBatch::default();
        let audit = store.cf(Cf::Audit);
        batch.put_cf(audit, keys::meta_key(meta::PENDING_SEQ), 5u64.to_be_bytes());
        for (id, action) in [(3, "route.create"), (7, "route.update")] {
            let value = serde_json::to_vec(&row(action)).unwrap();
            batch.put_cf(audit, keys::pending_key(id), value);
        }
        store.write(batch, true).unwrap();
        // A damaged m:pending_seq below a stored row: the row wins.
        assert_eq!(last_id(&store).unwrap(), 7);
        let rows = pending_rows(&store).unwrap();
        assert_eq!(rows.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [3, 7]);
        assert_eq!(rows[1].1, row("route.update"));
        let mut batch = WriteBatch::default();
        batch.put_cf(audit, keys::pending_key(9), b"not json");
        store.write(batch, true).unwrap();
        assert!(matches!(
            pending_rows(&store),
            Err(StoreError::Corrupt { .. })
        ));
    }

    /// A subject that is always absent.
    struct Absent;

    #[async_trait::async_trait]
    impl crate::audit::dual::settle::Reconcile for Absent {
        async fn hold(&self, _: &Value) -> Option<crate::audit::dual::settle::Hold> {
            None
        }
        async fn present(
            &self,
            _: &Value,
        ) -> Result<Option<crate::audit::dual::settle::Present>, String> {
            Ok(None)
        }
    }

    /// A pending row an earlier version wrote with its entity inside still settles, and
    /// publishes that entity.
    #[tokio::test]
    async fn a_pending_row_with_its_entity_inside_settles_and_publishes_it() {
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let entity = serde_json::json!({"id": "r1", "tenant": "t1", "revision": 1});
        // A delete (no state after it): a subject found absent settles it `ok`.
        let old = PendingRow {
            before_hash: Some("ab".into()),
            after_hash: None,
            entity: Some(entity.clone()),
            ..row("route.delete")
        };
        let mut batch = WriteBatch::default();
        let audit = store.cf(Cf::Audit);
        batch.put_cf(
            audit,
            keys::pending_key(1),
            serde_json::to_vec(&old).unwrap(),
        );
        batch.put_cf(audit, keys::meta_key(meta::PENDING_SEQ), 1u64.to_be_bytes());
        store.write(batch, true).unwrap();
        let options = crate::audit::TrailOptions {
            lifecycle: true,
            ..Default::default()
        };
        let trail =
            crate::audit::Trail::start(store.clone(), options, Arc::new(crate::audit::SystemClock))
                .unwrap();
        let mut reconcilers = crate::audit::dual::settle::Reconcilers::new();
        reconcilers.insert("route".into(), Arc::new(Absent) as Arc<_>);
        let stop = tokio_util::sync::CancellationToken::new();
        let settling = trail
            .start_settlement(reconcilers, Default::default(), stop.clone())
            .unwrap();
        trail.boot_settled().await;
        assert!(pending_rows(&store).unwrap().is_empty());
        let rows = crate::audit::row::page(&store, 0, 10, &Default::default()).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].result, rows[0].publish), (RowResult::Ok, true));
        let published = store.get(Cf::Audit, &keys::outbox_key(1)).unwrap().unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&published).unwrap(), entity);
        stop.cancel();
        settling.await.unwrap();
        trail.shutdown().await;
    }
}
