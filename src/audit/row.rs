//! The trail's row, the change a caller describes, and reading rows back in seq order.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::hash::State;
use crate::store::{keys, Cf, Store, StoreError};

/// The format version written into every row value.
pub const ROW_FORMAT: u32 = 1;

/// What a change did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RowResult {
    /// The change took effect.
    Ok,
    /// The change was attempted and did not take effect.
    Failed,
    /// The change may or may not have been applied (a dual write cut short).
    Interrupted,
}

impl RowResult {
    /// The lowercase name, as stored and as used in metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            RowResult::Ok => "ok",
            RowResult::Failed => "failed",
            RowResult::Interrupted => "interrupted",
        }
    }
}

/// One row of the audit trail. Never holds a secret or a spec: only who, what, and hashes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    /// Format version ([`ROW_FORMAT`]).
    pub v: u32,
    /// Position in the trail; also in the key, which is authoritative.
    pub seq: u64,
    /// Commit time, unix milliseconds; also in the key.
    pub at: u64,
    /// Who: the token's name, or `system`.
    pub actor: String,
    /// The client's address.
    pub remote_ip: Option<String>,
    /// The request's id.
    pub request_id: Option<String>,
    /// What: `<kind>.<verb>`, e.g. `source.update`.
    pub action: String,
    /// The tenant the subject belongs to.
    pub tenant: Option<String>,
    /// The subject, e.g. `sources/s1`.
    pub resource: String,
    /// Only what the caller put there: counts, filters, a rate.
    pub detail: Map<String, Value>,
    /// HMAC of the subject before the change (`None`: it did not exist).
    pub before_hash: Option<String>,
    /// HMAC of the subject after the change (`None`: it no longer exists).
    pub after_hash: Option<String>,
    /// The subject's own change counter after the change, where it has one.
    pub revision: Option<u64>,
    /// What the change did.
    pub result: RowResult,
    /// Whether a lifecycle event is to be published for this row (its entity is at `o`+seq).
    pub publish: bool,
    /// Settlement could not tell what happened: publish the subject's present state.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refresh: bool,
    /// The subject's version after the change (routes and sources): from its store's one
    /// counter, so it increases over every change of the subject, whoever made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    /// The store whose counter issued `version`, when it is shared (`redis:<id>`); `None`:
    /// one of this node's own stores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
    /// The snapshot this row belongs to: a marker, or an item it refreshed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// The W3C `traceparent` of the span that made the change (the request's, or the node's
    /// own); its event carries it. Absent in rows written before traces were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The W3C `tracestate` the change's caller sent with its `traceparent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

/// A subject's version and the store whose counter issued it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    /// The version.
    pub version: u64,
    /// The store, when it is shared by a fleet (`redis:<id>`); `None`: this node's own.
    pub store: Option<String>,
}

/// Where a change's subject version comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Versioning {
    /// It has none (subjects that publish no event).
    #[default]
    None,
    /// Its store issued it.
    Stamped(Stamp),
    /// A subject of this node's own store: the writer derives it from the row's seq and the
    /// incarnation (`Incarnation::version`), so a restore never issues one again.
    Local,
}

/// A change as its caller describes it. The writer turns it into a [`Row`]: it hashes
/// `before` and `after` (which are never stored) and, with lifecycle events on, writes
/// `entity` to the outbox beside the row.
#[derive(Debug, Clone, Default)]
pub struct Change {
    /// `<kind>.<verb>`, e.g. `source.update`.
    pub action: String,
    /// The tenant the subject belongs to.
    pub tenant: Option<String>,
    /// The subject, e.g. `sources/s1`.
    pub resource: String,
    /// Counts, filters, a rate: never a secret or a spec.
    pub detail: Map<String, Value>,
    /// The subject before the change, complete (secrets included: only its hash is kept).
    pub before: Option<State>,
    /// The subject after the change, complete.
    pub after: Option<State>,
    /// The subject's change counter after the change.
    pub revision: Option<u64>,
    /// The redacted entity a lifecycle event carries (routes and sources only), as JSON:
    /// encoded once by the caller, whose API answer is the same bytes.
    pub entity: Option<Bytes>,
    /// For a dual write: the subject's kind (`route`) and where its store finds it, so that
    /// settlement can read its present state (see [`crate::audit::Reconcile`]).
    pub locator: Option<(String, Value)>,
    /// Its subject's version after the change.
    pub versioning: Versioning,
    /// The snapshot it belongs to.
    pub snapshot: Option<String>,
}

impl Change {
    /// A change of `action` to `resource`.
    pub fn new(action: impl Into<String>, resource: impl Into<String>) -> Change {
        Change {
            action: action.into(),
            resource: resource.into(),
            ..Change::default()
        }
    }

    /// Set the tenant.
    pub fn tenant(mut self, tenant: impl Into<String>) -> Change {
        self.tenant = Some(tenant.into());
        self
    }

    /// Add one detail entry.
    pub fn detail(mut self, key: impl Into<String>, value: impl Into<Value>) -> Change {
        self.detail.insert(key.into(), value.into());
        self
    }

    /// Set the subject's states before and after (either absent), each given as its JSON.
    pub fn states(self, before: Option<Value>, after: Option<Value>) -> Change {
        let (before, after) = (
            before.as_ref().map(State::of),
            after.as_ref().map(State::of),
        );
        self.encoded_states(before, after)
    }

    /// Set the subject's states before and after (either absent), already encoded.
    pub fn encoded_states(mut self, before: Option<State>, after: Option<State>) -> Change {
        self.before = before;
        self.after = after;
        self
    }

    /// Set the subject's revision after the change.
    pub fn revision(mut self, revision: u64) -> Change {
        self.revision = Some(revision);
        self
    }

    /// Set the redacted lifecycle entity.
    pub fn entity(self, entity: Value) -> Change {
        self.entity_json(encode_json(&entity))
    }

    /// Set the redacted lifecycle entity, already encoded as JSON.
    pub fn entity_json(mut self, json: Bytes) -> Change {
        self.entity = Some(json);
        self
    }

    /// Set where its subject's version comes from.
    pub fn versioning(mut self, versioning: Versioning) -> Change {
        self.versioning = versioning;
        self
    }

    /// Say where settlement finds the subject of a dual write: its `kind` names the
    /// reconciler, `locator` is what that reconciler is given.
    pub fn locate(mut self, kind: impl Into<String>, locator: Value) -> Change {
        self.locator = Some((kind.into(), locator));
        self
    }
}

/// `value` encoded as JSON: how every entity is encoded, once, for the outbox.
pub(crate) fn encode_json(value: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(value).expect("a JSON value always serializes"))
}

/// Which rows a [`page`] returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only rows with this publish flag.
    pub publish: Option<bool>,
    /// Only rows of this tenant.
    pub tenant: Option<String>,
    /// Only rows of this action.
    pub action: Option<String>,
    /// Only rows whose resource starts with this.
    pub resource_prefix: Option<String>,
    /// Only rows made by this actor.
    pub actor: Option<String>,
    /// Only rows of this subject: its resource, exactly.
    pub subject: Option<String>,
    /// Only rows with this result.
    pub result: Option<RowResult>,
    /// Only rows committed at or after this (unix ms).
    pub from: Option<u64>,
    /// Only rows committed before this (unix ms).
    pub until: Option<u64>,
}

impl Filter {
    /// Whether `row` is one the filter lets through (public for the audit benchmark's full
    /// scan, which sets the index walks beside it).
    pub fn matches(&self, row: &Row) -> bool {
        self.publish.is_none_or(|p| row.publish == p)
            && self
                .tenant
                .as_deref()
                .is_none_or(|t| row.tenant.as_deref() == Some(t))
            && self.action.as_deref().is_none_or(|a| row.action == a)
            && self
                .resource_prefix
                .as_deref()
                .is_none_or(|p| row.resource.starts_with(p))
            && self.actor.as_deref().is_none_or(|a| row.actor == a)
            && self.subject.as_deref().is_none_or(|s| row.resource == s)
            && self.result.is_none_or(|r| row.result == r)
            && self.from.is_none_or(|from| row.at >= from)
            && self.until.is_none_or(|until| row.at < until)
    }
}

/// Decode a row from its key and value (the key's seq and at are authoritative).
pub fn decode_row(key: &[u8], value: &[u8]) -> Result<Row, StoreError> {
    let (mut row, seq, at) = decode_row_as::<Row>(key, value)?;
    row.seq = seq;
    row.at = at;
    Ok(row)
}

/// Decode the row stored at `key` as `T` (the whole [`Row`], or the part of it a reader
/// needs), with the seq and commit time its key gives.
pub fn decode_row_as<'a, T: Deserialize<'a>>(
    key: &[u8],
    value: &'a [u8],
) -> Result<(T, u64, u64), StoreError> {
    let corrupt = |detail: String| StoreError::Corrupt {
        what: format!("audit row {}", hex::encode(key)),
        detail,
    };
    let (seq, at) = keys::decode_row_key(key).ok_or_else(|| corrupt("bad key".into()))?;
    // Checked as UTF-8 once, whole: then `from_str` need not check each string again (a
    // third of the decode, read by read, was those checks).
    let text = std::str::from_utf8(value).map_err(|e| corrupt(e.to_string()))?;
    let row = serde_json::from_str(text).map_err(|e| corrupt(e.to_string()))?;
    Ok((row, seq, at))
}

/// Up to `limit` rows with seq greater than `after`, in seq order, that match `filter`.
///
/// Seq order is commit order, and every batch is atomic, so a reader that passes the last
/// seq it saw as `after` never misses a row that commits later.
pub fn page(
    store: &Store,
    after: u64,
    limit: usize,
    filter: &Filter,
) -> Result<Vec<Row>, StoreError> {
    Ok(page_within(store, after, limit, filter, usize::MAX)?.rows)
}

/// A page read within a budget of rows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scanned {
    /// The matching rows, in seq order.
    pub rows: Vec<Row>,
    /// The last seq read when the budget ran out before `limit` rows matched (more may
    /// follow: the next read goes on after it); `None` when the read was not cut short.
    pub cut_at: Option<u64>,
}

/// [`page`], reading at most `budget` rows (matching or not): a filter that few rows match
/// costs a bounded read per call, and the caller goes on from [`Scanned::cut_at`].
pub fn page_within(
    store: &Store,
    after: u64,
    limit: usize,
    filter: &Filter,
    budget: usize,
) -> Result<Scanned, StoreError> {
    let mut scanned = Scanned::default();
    if limit == 0 || after == u64::MAX || budget == 0 {
        return Ok(scanned);
    }
    if super::query::indexed(filter) {
        return super::query::page(store, after, limit, filter, budget);
    }
    let (mut read, mut last) = (0, after);
    let mut failure = None;
    store.scan(
        Cf::Audit,
        &[keys::ROW],
        &keys::row_seek(after + 1),
        |k, v| match decode_row(k, v) {
            Ok(row) => {
                (read, last) = (read + 1, row.seq);
                if filter.matches(&row) {
                    scanned.rows.push(row);
                }
                if scanned.rows.len() >= limit {
                    return false;
                }
                if read >= budget {
                    scanned.cut_at = Some(last);
                    return false;
                }
                true
            }
            Err(e) => {
                failure = Some(e);
                false
            }
        },
    )?;
    match failure {
        Some(e) => Err(e),
        None => Ok(scanned),
    }
}

/// The row of `seq`, if the trail holds it.
pub fn get(store: &Store, seq: u64) -> Result<Option<Row>, StoreError> {
    if seq == 0 {
        return Ok(None);
    }
    Ok(page(store, seq - 1, 1, &Filter::default())?
        .pop()
        .filter(|r| r.seq == seq))
}
