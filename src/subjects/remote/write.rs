//! The dual write of one change to a remote subject: the pending row with the states' hashes,
//! the store's compare-and-set on the version the change read, then the row with what the
//! compare-and-set said and the version it took.
//!
//! A change first passes the kind's gate (closed while a restore's refresh runs, see
//! `gate.rs`). It runs in a task of its own, so a client that hangs up mid-change does not
//! cut it short between the store's write and the row, holding its subject's lock (see
//! `order.rs`) so that its row finishes in the order the store applied it.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::{resource, unencodable, view, Cas, Remote, RemoteStore, RemoteSubject, Versioned};
use crate::audit::{Change, CommitError, Context, Finish, State};
use crate::subjects::key::check_name;
use crate::subjects::{check_if_match, ChangeResult, IfMatch, SubjectChange, SubjectError};
use crate::telemetry;
use crate::telemetry::dual::{timed, Stage};

impl<T: RemoteSubject> Remote<T> {
    /// Subject `id` of `tenant` as an update or delete finds it (names already checked):
    /// `NotFound` if it is not there, and `if_match` checked against its revision.
    pub(crate) async fn current(
        &self,
        tenant: &str,
        id: &str,
        if_match: Option<IfMatch>,
    ) -> Result<Versioned<T>, CommitError<SubjectError>> {
        let before = self.require(tenant, id).await?;
        check_if_match(
            if_match,
            || resource::<T>(id),
            Some(before.subject.revision()),
        )?;
        Ok(before)
    }

    /// Delete subject `id` of `tenant` (`<kind>.delete`).
    pub(crate) async fn delete(
        &self,
        ctx: Context,
        tenant: &str,
        id: &str,
        if_match: Option<IfMatch>,
    ) -> ChangeResult {
        check_name("tenant", tenant)?;
        check_name("id", id)?;
        let before = self.current(tenant, id, if_match).await?;
        self.write(ctx, "delete", Some(before), None, Map::new())
            .await
    }

    /// The answer to an update that changes nothing: no row, the subject as it is.
    pub(crate) fn unchanged(before: &T) -> ChangeResult {
        Ok(SubjectChange {
            seq: None,
            revision: before.revision(),
            view: Some(view(before)?.to_json()),
        })
    }

    /// Subject `id` of `tenant`, or `NotFound`.
    pub(crate) async fn require(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Versioned<T>, CommitError<SubjectError>> {
        let found = timed(Stage::Read, self.store.get(tenant, id)).await?;
        found.subject.ok_or_else(|| {
            CommitError::Refused(SubjectError::NotFound {
                resource: resource::<T>(id),
            })
        })
    }

    /// Refuse a create of `id` that exists.
    pub(crate) async fn absent(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<(), CommitError<SubjectError>> {
        if timed(Stage::Read, self.store.exists(tenant, id)).await? {
            return Err(SubjectError::Exists {
                resource: resource::<T>(id),
            }
            .into());
        }
        Ok(())
    }

    /// The dual write of `<kind>.<verb>` from `before` (at the version the change read) to
    /// `after` (either absent, not both), with the row's `detail`. `after`'s revision must be
    /// `before`'s + 1 (1 for a create).
    pub(crate) async fn write(
        &self,
        ctx: Context,
        verb: &'static str,
        before: Option<Versioned<T>>,
        after: Option<T>,
        detail: Map<String, Value>,
    ) -> ChangeResult {
        // A store that kept the encoding its last change was hashed with hands it back: the
        // state before is then that buffer, byte for byte the last row's state after.
        let (expected, before, before_state) = match before {
            Some(b) => {
                let state = match b.state {
                    Some(state) => state,
                    None => b.subject.state().map_err(unencodable::<T>)?,
                };
                (Some(b.version), Some(b.subject), Some(state))
            }
            None => (None, None, None),
        };
        let Some(subject) = after.as_ref().or(before.as_ref()) else {
            return Err(CommitError::StoreUnavailable);
        };
        let (tenant, id) = (subject.tenant().to_owned(), subject.id().to_owned());
        // While the kind is refreshed after a restore, a change would race the refresh rows.
        if self.gate.pass().await.is_err() {
            telemetry::remote::change_held(T::KIND, &resource::<T>(&id));
            return Err(CommitError::StoreUnavailable);
        }
        let revision = before.as_ref().map_or(0, |b| b.revision()) + 1;
        // The answer's body and the event's entity are the same bytes.
        let (after_state, after_json) = after
            .as_ref()
            .map(|a| a.state_and_view().map_err(unencodable::<T>))
            .transpose()?
            .unzip();
        // A delete's event carries the subject as it was, at the delete's revision.
        let entity = match (&after_json, &before) {
            (Some(json), _) => json.clone(),
            (None, Some(b)) => view(b)?.with_revision(revision).to_json(),
            (None, None) => return Err(CommitError::StoreUnavailable),
        };
        let stored_state = after_state.clone();
        // Names this change's write, so that settlement can fence it (see RemoteStore::fence).
        let fence = uuid::Uuid::new_v4().simple().to_string();
        let mut change = Change::new([T::KIND, ".", verb].concat(), resource::<T>(&id))
            .tenant(&tenant)
            .encoded_states(before_state, after_state)
            .revision(revision)
            .entity_json(entity)
            .locate(T::KIND, json!({"tenant": tenant, "id": id, "fence": fence}));
        change.detail = detail;
        let (store, trail, locks) = (self.store.clone(), self.trail.clone(), self.locks.clone());
        // Boxed: the future is a few KB, and a task's future is moved several times on its
        // way into the runtime and out.
        let task = tokio::spawn(Box::pin(async move {
            // From the compare-and-set to the row, this subject's only change on this node.
            let _locked = locks.lock(&tenant, &id).await;
            trail
                .record(ctx, change, || {
                    apply(
                        store,
                        (tenant.clone(), id.clone(), &fence),
                        (after, stored_state),
                        (expected, revision),
                    )
                })
                .await
        }));
        let recorded = task.await.map_err(|e| {
            crate::telemetry::dual::task_failed(&e);
            CommitError::StoreUnavailable
        })??;
        recorded.value?;
        Ok(SubjectChange {
            seq: recorded.settled.map(|s| s.seq),
            revision,
            view: after_json,
        })
    }
}

/// The store's compare-and-set of one change (`after` and its state; `None` for a delete),
/// on the version it read (`expected`; `None` for a create), and what it means for the row.
async fn apply<T: RemoteSubject>(
    store: Arc<dyn RemoteStore<T>>,
    (tenant, id, fence): (String, String, &str),
    (after, state): (Option<T>, Option<State>),
    (expected, revision): (Option<u64>, u64),
) -> (Option<Finish>, Result<(), CommitError<SubjectError>>) {
    fail::fail_point!("remote::apply", |_| (
        None,
        Err(CommitError::StoreUnavailable)
    ));
    let written = match (after, expected) {
        (Some(subject), _) => store.put_fenced(subject, state, expected, fence).await,
        (None, Some(expected)) => store.delete_fenced(&tenant, &id, expected, fence).await,
        (None, None) => return (Some(Finish::Refused), Err(CommitError::StoreUnavailable)),
    };
    match written {
        Ok(Cas::Written(stamp)) => (Some(Finish::Applied(stamp)), Ok(())),
        Ok(Cas::Conflict { actual }) => {
            // The subject changed since the change read it: deleted, created again (with a
            // revision that may equal the one read), or changed by another node.
            let refusal = if expected.is_none() {
                SubjectError::Exists {
                    resource: resource::<T>(&id),
                }
            } else {
                SubjectError::RevisionMismatch {
                    resource: resource::<T>(&id),
                    expected: IfMatch::Revision(revision - 1),
                    actual: (actual > 0).then_some(actual),
                }
            };
            // Refused by the store: nothing changed, so no row (the spec's "refused by the
            // store writes none").
            (Some(Finish::Refused), Err(CommitError::Refused(refusal)))
        }
        Err(e) => {
            // The write may or may not have landed: settlement reads the subject back.
            crate::telemetry::dual::store_write_failed(&resource::<T>(&id), &e);
            (None, Err(CommitError::StoreUnavailable))
        }
    }
}
