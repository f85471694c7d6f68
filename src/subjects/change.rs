//! The common tail of every change to a subject: load it as the change sees it, stage its
//! put or delete, and describe its row (action, resource, tenant, complete states, revision,
//! detail and, for lifecycle kinds, the redacted entity).
//!
//! Every function here runs inside a `Trail::commit` closure, on the writer thread.

use bytes::Bytes;
use serde_json::{Map, Value};

use super::key::{check_name, subject_key};
use super::redact::{self, redact, secret_fields, Redacted};
use super::{check_if_match, ChangeResult, IfMatch, Kind, Subject, SubjectChange, SubjectError};
use crate::audit::{Change, CommitError, Context, State, Trail, Tx, Versioning};
use crate::store::StoreError;

/// What one change does to one subject: `before` and `after` (either absent), under
/// `<kind>.<verb>`, with the row's `detail`.
pub(crate) struct Effect<S> {
    pub verb: &'static str,
    pub before: Option<S>,
    pub after: Option<S>,
    pub detail: Map<String, Value>,
}

/// The subject at `<tenant>/<id>` as this change sees it.
pub(crate) fn load<S: Subject>(
    tx: &Tx<'_>,
    tenant: &str,
    id: &str,
) -> Result<Option<S>, CommitError<SubjectError>> {
    Ok(tx.get_json(S::KIND.cf(), &subject_key(tenant, id))?)
}

/// The subject at `<tenant>/<id>`, or `NotFound`.
pub(crate) fn require<S: Subject>(
    tx: &Tx<'_>,
    tenant: &str,
    id: &str,
) -> Result<S, CommitError<SubjectError>> {
    load(tx, tenant, id)?.ok_or_else(|| {
        CommitError::Refused(SubjectError::NotFound {
            resource: S::KIND.resource(id),
        })
    })
}

/// Refuse a change that leaves `current` as it is, answering with its present view.
pub(crate) fn unchanged<S: Subject>(current: &S) -> CommitError<SubjectError> {
    match view(current) {
        Ok(view) => CommitError::Refused(SubjectError::Unchanged(Box::new(SubjectChange {
            seq: None,
            revision: current.revision(),
            view: Some(view.to_json()),
        }))),
        Err(e) => e,
    }
}

/// Delete subject `<tenant>/<id>` under `<kind>.<verb>`, if it exists and `if_match` holds.
pub(crate) fn remove<S: Subject>(
    tx: &mut Tx<'_>,
    tenant: &str,
    id: &str,
    if_match: Option<IfMatch>,
    verb: &'static str,
) -> Result<(Change, SubjectChange), CommitError<SubjectError>> {
    check_name("tenant", tenant)?;
    check_name(S::KIND.id_field(), id)?;
    let before: S = require(tx, tenant, id)?;
    check_if_match(if_match, || S::KIND.resource(id), Some(before.revision()))?;
    let effect = Effect {
        verb,
        before: Some(before),
        after: None,
        detail: Map::new(),
    };
    apply(tx, tenant, id, effect)
}

/// Stage `effect`'s ops in `tx` and describe its row.
pub(crate) fn apply<S: Subject>(
    tx: &mut Tx<'_>,
    tenant: &str,
    id: &str,
    effect: Effect<S>,
) -> Result<(Change, SubjectChange), CommitError<SubjectError>> {
    let kind = S::KIND;
    let key = subject_key(tenant, id);
    let revision = match (&effect.after, &effect.before) {
        (Some(after), _) => after.revision(),
        (None, Some(before)) => before.revision() + 1,
        (None, None) => 0,
    };
    match &effect.after {
        Some(after) => tx.put_json(kind.cf(), key, after)?,
        None => tx.delete(kind.cf(), key)?,
    }
    let before_state = effect.before.as_ref().map(state).transpose()?;
    let (after_state, after_json) = effect
        .after
        .as_ref()
        .map(state_and_view)
        .transpose()?
        .unzip();
    let mut change = Change::new([kind.name(), ".", effect.verb].concat(), kind.resource(id))
        .tenant(tenant)
        .encoded_states(before_state, after_state)
        .revision(revision);
    change.detail = effect.detail;
    if S::LIFECYCLE {
        // A delete's event carries the subject as it was, at the delete's revision.
        let entity = match (&after_json, &effect.before) {
            (Some(json), _) => Some(json.clone()),
            (None, Some(before)) => Some(view(before)?.with_revision(revision).to_json()),
            (None, None) => None,
        };
        if let Some(entity) = entity {
            // This node's own store: the writer derives the version from the row's seq.
            change = change.entity_json(entity).versioning(Versioning::Local);
        }
    }
    let outcome = SubjectChange {
        seq: None,
        revision,
        view: after_json,
    };
    Ok((change, outcome))
}

/// The snapshot item of subject `<tenant>/<id>` (a lifecycle kind) as this change sees it:
/// `<kind>.refresh`, its present state and redacted entity, versioned by its own row (so
/// above the snapshot's floor), in snapshot `snapshot`. `None` when it no longer exists.
pub(crate) fn snapshot_item<S: Subject>(
    tx: &Tx<'_>,
    tenant: &str,
    id: &str,
    snapshot: &str,
) -> Result<Option<Change>, CommitError<SubjectError>> {
    let Some(subject) = load::<S>(tx, tenant, id)? else {
        return Ok(None);
    };
    let kind = S::KIND;
    let (state, view) = state_and_view(&subject)?;
    let mut change = Change::new([kind.name(), ".refresh"].concat(), kind.resource(id))
        .tenant(tenant)
        .encoded_states(None, Some(state))
        .revision(subject.revision())
        .entity_json(view)
        .versioning(Versioning::Local)
        .detail("reason", "snapshot");
    change.snapshot = Some(snapshot.to_owned());
    Ok(Some(change))
}

/// Commit `change` and fill in its row's seq; a no-op comes back as an [`SubjectChange`] without
/// a seq.
pub(crate) async fn commit_change<F>(trail: &Trail, ctx: Context, change: F) -> ChangeResult
where
    F: FnOnce(&mut Tx<'_>) -> Result<(Change, SubjectChange), CommitError<SubjectError>>
        + Send
        + 'static,
{
    match trail.commit(ctx, change).await {
        Ok(committed) => Ok(SubjectChange {
            seq: Some(committed.seq),
            ..committed.value
        }),
        Err(CommitError::Refused(SubjectError::Unchanged(outcome))) => Ok(*outcome),
        Err(e) => Err(e),
    }
}

/// The complete subject, as hashed into its row.
fn state<S: Subject>(subject: &S) -> Result<State, CommitError<SubjectError>> {
    State::of_subject(subject).map_err(|e| encode_error(S::KIND, e))
}

/// The subject's state and the JSON of its redacted view, from one encoding.
fn state_and_view<S: Subject>(subject: &S) -> Result<(State, Bytes), CommitError<SubjectError>> {
    redact::state_and_view(subject, secret_fields(S::KIND)).map_err(|e| encode_error(S::KIND, e))
}

/// The redacted view of `subject`.
fn view<S: Subject>(subject: &S) -> Result<Redacted, CommitError<SubjectError>> {
    redact(subject).map_err(|e| encode_error(S::KIND, e))
}

fn encode_error(kind: Kind, e: serde_json::Error) -> CommitError<SubjectError> {
    CommitError::from(StoreError::Corrupt {
        what: format!("{} value", kind.name()),
        detail: e.to_string(),
    })
}
