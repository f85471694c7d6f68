//! Replay jobs: re-deliver one source's events of a time range, in the `replay_jobs` column
//! family.
//!
//! A job is created `pending` and can be cancelled while `pending` or `running`; its other
//! states belong to the runner that executes jobs. Cancelling keeps the job (its state is the
//! record), so `replay.cancel` is an update. The source must exist in the same tenant when the
//! job is created: for local sources, checked on the writer, in the same group as any change
//! to that source; for sources in Redis, read from there just before.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Map;

use super::key::{check_name, subject_key};
use super::read::ReadError;
use super::sources_remote::RemoteSources;
use super::{
    apply, check_if_match, commit_change, load, require, ChangeResult, Effect, IfMatch, Kind,
    Subject, SubjectError,
};
use crate::audit::{CommitError, Context, Trail};
use crate::store::Cf;

/// The longest time range one job may replay.
pub const MAX_RANGE_DAYS: i64 = 366;
/// How far past the present `to` may be (clock skew between the caller and the node).
const FUTURE_SLACK_SECS: i64 = 300;

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplayState {
    /// Waiting for a runner.
    Pending,
    /// Being replayed.
    Running,
    /// Replayed.
    Done,
    /// Cancelled by an operator.
    Cancelled,
    /// Given up by the runner.
    Failed,
}

/// A replay job as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayJob {
    /// Its id within the tenant.
    pub id: String,
    /// Its tenant.
    pub tenant: String,
    /// The id of the source whose events it replays.
    pub source: String,
    /// Start of the range (inclusive).
    pub from: DateTime<Utc>,
    /// End of the range (exclusive).
    pub to: DateTime<Utc>,
    /// Where it is.
    pub state: ReplayState,
    /// Its change counter.
    pub revision: u64,
}

impl Subject for ReplayJob {
    const KIND: Kind = Kind::Replay;

    fn tenant(&self) -> &str {
        &self.tenant
    }

    fn id(&self) -> &str {
        &self.id
    }

    fn revision(&self) -> u64 {
        self.revision
    }
}

/// The body of a create.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewReplay {
    /// The job's id.
    pub id: String,
    /// The source to replay (must exist in the tenant).
    pub source: String,
    /// Start of the range.
    pub from: DateTime<Utc>,
    /// End of the range: after `from`, not in the future.
    pub to: DateTime<Utc>,
}

/// Where a job's source must exist: where the node keeps its sources.
#[derive(Debug, Clone, Copy)]
pub enum Sources<'a> {
    /// In this node's store (`[sources] store = "local"`): looked up in the change's own
    /// transaction.
    Local,
    /// In the remote source store (`[sources] store = "redis"`): read before the change. A
    /// source deleted after that leaves a job whose source is gone, as deleting a local source
    /// after its job was made does.
    Remote(&'a RemoteSources),
}

/// Create replay job `input.id` for `tenant` (`replay.create`); its source must exist in
/// `sources`.
pub async fn create(
    trail: &Trail,
    ctx: Context,
    tenant: String,
    input: NewReplay,
    sources: Sources<'_>,
) -> ChangeResult {
    check_name("tenant", &tenant)?;
    check_name("id", &input.id)?;
    check_name("source", &input.source)?;
    check_range(input.from, input.to, Utc::now())?;
    let no_source = |tenant: &str, source: &str| {
        SubjectError::invalid(
            "source",
            format!("no source `{source}` in tenant `{tenant}`"),
        )
    };
    if let Sources::Remote(remote) = sources {
        match remote.remote().get(&tenant, &input.source).await {
            Ok(Some(_)) => {}
            Ok(None) => return Err(no_source(&tenant, &input.source).into()),
            Err(ReadError::Invalid(e)) => return Err(e.into()),
            Err(ReadError::Store(_)) => return Err(CommitError::StoreUnavailable),
        }
    }
    let local = matches!(sources, Sources::Local);
    commit_change(trail, ctx, move |tx| {
        let key = subject_key(&tenant, &input.source);
        if local && tx.get(Cf::Sources, &key)?.is_none() {
            return Err(no_source(&tenant, &input.source).into());
        }
        if load::<ReplayJob>(tx, &tenant, &input.id)?.is_some() {
            return Err(SubjectError::Exists {
                resource: Kind::Replay.resource(&input.id),
            }
            .into());
        }
        // The range and the source are the job's filters: what an auditor searches by.
        let mut detail = Map::new();
        detail.insert("source".into(), input.source.clone().into());
        detail.insert("from".into(), input.from.to_rfc3339().into());
        detail.insert("to".into(), input.to.to_rfc3339().into());
        let job = ReplayJob {
            id: input.id.clone(),
            tenant: tenant.clone(),
            source: input.source,
            from: input.from,
            to: input.to,
            state: ReplayState::Pending,
            revision: 1,
        };
        let effect = Effect {
            verb: "create",
            before: None,
            after: Some(job),
            detail,
        };
        apply(tx, &tenant, &input.id, effect)
    })
    .await
}

/// Cancel job `id` of `tenant` (`replay.cancel`): only a pending or running job.
pub async fn cancel(
    trail: &Trail,
    ctx: Context,
    tenant: String,
    id: String,
    if_match: Option<IfMatch>,
) -> ChangeResult {
    commit_change(trail, ctx, move |tx| {
        check_name("tenant", &tenant)?;
        check_name("id", &id)?;
        let before: ReplayJob = require(tx, &tenant, &id)?;
        let resource = Kind::Replay.resource(&id);
        check_if_match(if_match, || resource.clone(), Some(before.revision))?;
        if !matches!(before.state, ReplayState::Pending | ReplayState::Running) {
            return Err(SubjectError::State {
                resource,
                message: format!("a {:?} job cannot be cancelled", before.state).to_lowercase(),
            }
            .into());
        }
        let after = ReplayJob {
            state: ReplayState::Cancelled,
            revision: before.revision + 1,
            ..before.clone()
        };
        let effect = Effect {
            verb: "cancel",
            before: Some(before),
            after: Some(after),
            detail: Map::new(),
        };
        apply(tx, &tenant, &id, effect)
    })
    .await
}

fn check_range(
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<(), SubjectError> {
    if to <= from {
        return Err(SubjectError::invalid("to", "must be after `from`"));
    }
    if to - from > Duration::days(MAX_RANGE_DAYS) {
        return Err(SubjectError::invalid(
            "to",
            format!("the range must span at most {MAX_RANGE_DAYS} days"),
        ));
    }
    if to > now + Duration::seconds(FUTURE_SLACK_SECS) {
        return Err(SubjectError::invalid("to", "must not be in the future"));
    }
    Ok(())
}
