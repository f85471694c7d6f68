//! The trail's half of the refresh that follows a restore: what the trail says of every
//! subject kept outside the store, and the state-refresh rows that correct it.
//!
//! A restore rolls the trail back but not the route store (nor Redis sources): the changes the
//! lost store made after the backup are still there, and a consumer that forgot them on
//! `instance.restored` no longer knows them. So `m:refresh_pending` (left by `first_boot.rs` in
//! the incarnation's batch) asks for one pass over each remote kind: [`Trail::remote_states`]
//! scans the trail once and keeps, per subject, the hash of the state its newest row says;
//! the caller (`subjects::remote::refresh`, which knows the stores) reads every subject's
//! present state and hands it to [`Trail::refresh`]. The writer hashes it (the key never
//! leaves it) and writes a `<kind>.refresh` row (system, `refresh: true`, its entity the
//! redacted present state, or `null` for a subject that is gone) only where the two differ.
//!
//! A refresh row says the state it published (its `after_hash`), so a refresh cut short by a
//! crash and run again at the next boot writes rows only for what still differs.

use std::collections::HashMap;

use serde_json::{json, Value};
use tokio::sync::oneshot;

use crate::audit::dual::settle::Present;
use crate::audit::row::{decode_row, Change, Row, RowResult, Stamp, Versioning};
use crate::audit::writer::stage::Staged;
use crate::audit::writer::sync::row_as_written;
use crate::audit::writer::{Group, Writer};
use crate::store::{keys, Cf, Store, StoreError};

/// The verb of a state-refresh row's action: `<kind>.refresh`.
pub const REFRESH_VERB: &str = "refresh";

/// What the trail last said of a subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Known {
    /// The hash of its state (`None`: it did not exist), as the newest row that touched it
    /// says: a change that took effect, or a `<kind>.refresh` row.
    State(Option<String>),
    /// Its newest row settled `interrupted` (the change may or may not have been applied), or
    /// was a settlement's refresh (whose `after_hash` is the change's, not the state it
    /// published): any state.
    Unknown,
}

/// A subject: its kind, tenant and resource (`routes/<id>`).
pub type SubjectKey = (String, String, String);

/// What the trail says of every subject of some remote kinds.
#[derive(Debug, Default)]
pub struct TrailStates {
    /// Rows scanned.
    pub rows: u64,
    /// Rows that did not decode (a damaged store): whose they were is not known.
    pub damaged: u64,
    subjects: HashMap<SubjectKey, Known>,
}

impl TrailStates {
    /// What the trail says of one subject (taken out: the rest is what the store lacks). In
    /// a trail with damaged rows, any subject's newest row may be one of them: every subject
    /// the store holds is then [`Known::Unknown`], and refreshed.
    pub fn take(&mut self, kind: &str, tenant: &str, resource: &str) -> Option<Known> {
        let key = (kind.to_owned(), tenant.to_owned(), resource.to_owned());
        let known = self.subjects.remove(&key);
        if self.damaged > 0 {
            return Some(Known::Unknown);
        }
        known
    }

    /// Every subject of `kind` not taken yet, as `(tenant, resource, known)`.
    pub fn rest(&mut self, kind: &str) -> Vec<(String, String, Known)> {
        let keys: Vec<SubjectKey> = self
            .subjects
            .keys()
            .filter(|(k, _, _)| k == kind)
            .cloned()
            .collect();
        keys.into_iter()
            .filter_map(|key| {
                let known = self.subjects.remove(&key)?;
                Some((key.1, key.2, known))
            })
            .collect()
    }

    /// How many subjects it knows.
    pub fn len(&self) -> usize {
        self.subjects.len()
    }

    /// Whether it knows none.
    pub fn is_empty(&self) -> bool {
        self.subjects.is_empty()
    }

    /// Fold one row in: rows come in seq order, so the newest that says something wins.
    fn note(&mut self, row: Row, kinds: &[String]) {
        let Some(tenant) = row.tenant else { return };
        let Some((kind, verb)) = row.action.split_once('.') else {
            return;
        };
        if !kinds.iter().any(|k| k == kind) {
            return;
        }
        let known = if verb == REFRESH_VERB {
            Known::State(row.after_hash)
        } else if row.refresh {
            Known::Unknown
        } else {
            match row.result {
                RowResult::Ok => Known::State(row.after_hash),
                RowResult::Interrupted => Known::Unknown,
                // Not applied: the state is what the rows before it said.
                RowResult::Failed => return,
            }
        };
        self.subjects
            .insert((kind.to_owned(), tenant, row.resource), known);
    }
}

/// Scan the trail from seq `from` (every row below it is pruned) and fold in the rows of
/// subjects of `kinds`. One pass, one row decoded at a time; only the per-subject states are
/// kept. A row that does not decode is logged and counted (`damaged`), not a stop: a refresh
/// that could never finish would hold the kinds' changes for good.
pub(crate) fn states(
    store: &Store,
    from: u64,
    kinds: &[String],
) -> Result<TrailStates, StoreError> {
    let mut states = TrailStates::default();
    store.scan(Cf::Audit, &[keys::ROW], &keys::row_seek(from), |k, v| {
        match decode_row(k, v) {
            Ok(row) => {
                states.rows += 1;
                states.note(row, kinds);
            }
            Err(e) => {
                crate::telemetry::remote::refresh_row_undecodable(&e);
                states.damaged += 1;
            }
        }
        true
    })?;
    Ok(states)
}

/// One subject's present state, offered for a refresh row.
#[derive(Debug, Clone)]
pub struct Refresh {
    /// Its kind (`route`).
    pub kind: String,
    /// Its tenant.
    pub tenant: String,
    /// Its resource (`routes/<id>`).
    pub resource: String,
    /// Its present state and view (`None`: it does not exist).
    pub present: Option<Present>,
    /// Its present revision.
    pub revision: Option<u64>,
    /// The version its present state is at (see [`Reading`](crate::audit::Reading)).
    pub stamp: Option<Stamp>,
    /// The snapshot it is an item of: its row is written whatever the trail says.
    pub snapshot: Option<String>,
    /// Why it is refreshed, the row's `detail.reason` (`None`: `snapshot` for a snapshot's
    /// item, else `restore`).
    pub reason: Option<&'static str>,
    /// What the trail says of it (`None`: nothing, as for a subject it never recorded or
    /// whose rows were all pruned).
    pub known: Option<Known>,
}

/// The state-refresh row [`Trail::refresh`](crate::audit::Trail::refresh) wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refreshed {
    /// The row's seq.
    pub seq: u64,
}

/// The answer to a refresh: `None` when the trail already said the present state.
pub(crate) type RefreshReply = oneshot::Sender<Result<Option<Refreshed>, StoreError>>;

/// A refresh on its way to the writer.
pub(crate) struct RefreshReq {
    pub refresh: Refresh,
    pub reply: RefreshReply,
}

/// A refresh taken into the group, answered once the batch is written (or not).
pub(crate) struct RefreshAnswer {
    row: Result<Option<Box<Row>>, StoreError>,
    reply: RefreshReply,
}

impl RefreshAnswer {
    /// Answer the caller; `written` is the group batch's fate.
    pub(crate) fn complete(self, written: &Result<u64, StoreError>) {
        let answer =
            row_as_written(written, self.row).map(|row| row.map(|row| Refreshed { seq: row.seq }));
        let _ = self.reply.send(answer);
    }
}

/// On the writer: hash the present state; if the trail already says it, write nothing,
/// else put the refresh row into the group. A system change, never refused by the ceilings.
pub(crate) fn take(w: &mut Writer, g: &mut Group, at: u64, req: RefreshReq) -> RefreshAnswer {
    let RefreshReq { refresh: r, reply } = req;
    let (state, view) = match r.present {
        Some(p) => (Some(p.state), p.view),
        None => (None, Value::Null),
    };
    let hash = w.hasher().hash(state.as_ref());
    let skip = r.snapshot.is_none();
    let before_hash = match r.known {
        Some(Known::State(known)) if skip && known == hash => {
            return RefreshAnswer {
                row: Ok(None),
                reply,
            }
        }
        None if skip && hash.is_none() => {
            return RefreshAnswer {
                row: Ok(None),
                reply,
            }
        }
        Some(Known::State(known)) => known,
        Some(Known::Unknown) | None => None,
    };
    let reason = match (r.reason, &r.snapshot) {
        (Some(reason), _) => reason,
        (None, Some(_)) => "snapshot",
        (None, None) => "restore",
    };
    let mut change = Change::new(format!("{}.{REFRESH_VERB}", r.kind), r.resource)
        .tenant(r.tenant)
        .states(None, state)
        .entity(view)
        .detail("reason", json!(reason))
        .versioning(r.stamp.map_or(Versioning::None, Versioning::Stamped));
    change.revision = r.revision;
    change.snapshot = r.snapshot;
    let staged = Staged::refresh(w.stamper(), (g.next_seq(), at), change, before_hash);
    let row = w.append(g, staged);
    RefreshAnswer {
        row: Ok(Some(row)),
        reply,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::ROW_FORMAT;

    fn row(action: &str, result: RowResult, refresh: bool, after: Option<&str>) -> Row {
        Row {
            v: ROW_FORMAT,
            seq: 1,
            at: 1,
            actor: "a".into(),
            remote_ip: None,
            request_id: None,
            action: action.into(),
            tenant: Some("t1".into()),
            resource: "routes/r1".into(),
            detail: Default::default(),
            before_hash: None,
            after_hash: after.map(str::to_owned),
            revision: None,
            result,
            publish: true,
            refresh,
            version: None,
            store: None,
            snapshot: None,
            traceparent: None,
            tracestate: None,
        }
    }

    fn known(rows: Vec<Row>) -> Option<Known> {
        let mut states = TrailStates::default();
        for r in rows {
            states.note(r, &["route".to_owned()]);
        }
        states.take("route", "t1", "routes/r1")
    }

    /// A damaged row does not stop the scan; since it may be any subject's newest, every
    /// subject the store holds is refreshed.
    #[test]
    fn a_row_that_does_not_decode_refreshes_every_subject() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut batch = rocksdb::WriteBatch::default();
        let good = row("route.create", RowResult::Ok, false, Some("h1"));
        let audit = store.cf(Cf::Audit);
        batch.put_cf(
            audit,
            keys::row_key(1, 1),
            serde_json::to_vec(&good).unwrap(),
        );
        batch.put_cf(audit, keys::row_key(2, 1), b"not json");
        store.write(batch, true).unwrap();

        let mut states = states(&store, 0, &["route".to_owned()]).unwrap();
        assert_eq!((states.rows, states.damaged), (1, 1));
        assert_eq!(
            states.take("route", "t1", "routes/r1"),
            Some(Known::Unknown)
        );
        assert_eq!(
            states.take("route", "t1", "routes/r9"),
            Some(Known::Unknown)
        );
    }

    #[test]
    fn the_newest_row_that_says_a_state_wins() {
        use RowResult::*;
        let ok = |a: &str, h| row(a, Ok, false, h);
        assert_eq!(
            known(vec![ok("route.create", Some("h1"))]),
            Some(Known::State(Some("h1".into())))
        );
        assert_eq!(
            known(vec![
                ok("route.create", Some("h1")),
                ok("route.delete", None)
            ]),
            Some(Known::State(None))
        );
        // A failed change changed nothing.
        assert_eq!(
            known(vec![
                ok("route.create", Some("h1")),
                row("route.update", Failed, false, Some("h2"))
            ]),
            Some(Known::State(Some("h1".into())))
        );
        // Interrupted, or a settlement's refresh: any state.
        assert_eq!(
            known(vec![
                ok("route.create", Some("h1")),
                row("route.update", Interrupted, false, Some("h2"))
            ]),
            Some(Known::Unknown)
        );
        assert_eq!(
            known(vec![row("route.update", Interrupted, true, Some("h2"))]),
            Some(Known::Unknown)
        );
        // A refresh row says the state it published.
        assert_eq!(
            known(vec![
                row("route.update", Interrupted, true, Some("h2")),
                ok("route.refresh", Some("h3"))
            ]),
            Some(Known::State(Some("h3".into())))
        );
        // Other kinds, and rows without a tenant, are not remote subjects.
        assert_eq!(known(vec![ok("source.create", Some("h1"))]), None);
    }
}
