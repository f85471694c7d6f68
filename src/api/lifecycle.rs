//! `/admin/v1/lifecycle`: the publisher's state, each sink's dead letters, and snapshots.
//!
//! Reading needs `admin:read`. Redriving and dropping dead letters, and enabling a sink its
//! destination disabled, change the node's operational state, so they need `admin:write`
//! and each leaves an audit row. They are what drains a full outbox backlog or a sink's
//! full dead letters, so neither the backlog nor the ceilings ever refuse them (503
//! `audit_backlog` is never their answer).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::{AdminRead, Authorized, Relist};
use super::context::WriteContext;
use super::error::ApiError;
use super::extract::{ApiPath, ApiQuery, OptionalJson};
use super::subject::page_limit;
use super::AppState;
use crate::audit::CommitError;
use crate::lifecycle::dead_letters::{self, NoSuchLetter};
use crate::lifecycle::{EnableRefused, Publisher};
use crate::subjects::snapshot::SnapshotError;

/// `?after=<seq>&limit=<n>`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LetterQuery {
    /// Letters with seq greater than this.
    pub after: Option<u64>,
    /// At most this many (1 to 1000, default 100).
    pub limit: Option<usize>,
}

/// `GET /admin/v1/lifecycle`: the global cursor, the last seq, the backlog, every sink's
/// position and state, the incarnation history, and the trail's usage against its ceilings
/// (rows, bytes, refusals, pruned rows, rows the cursor keeps), and each watcher's position
/// and lag.
pub async fn status(
    _: Authorized<AdminRead>,
    State(state): State<AppState>,
) -> Result<Json<Value>, ApiError> {
    // The writer already keeps these (cursor and backlog as the ceilings count them):
    // no store read, and one definition of the backlog for the API and the refusals.
    let audit_seq = *state.trail.committed().borrow();
    let trail = state.trail.stats();
    let sinks = state
        .lifecycle
        .as_deref()
        .map(Publisher::statuses)
        .unwrap_or_default();
    Ok(Json(json!({
        "enabled": state.flagging,
        "audit_seq": audit_seq,
        "cursor": trail.cursor.unwrap_or(0),
        "backlog": trail.backlog,
        "sinks": sinks,
        "incarnations": state.trail.history(),
        "trail": trail,
        "watchers": state.watch.statuses(),
    })))
}

/// `GET /admin/v1/lifecycle/sinks/{sink}/dead-letters`: one page, in seq order.
pub async fn list_letters(
    _: Authorized<AdminRead>,
    State(state): State<AppState>,
    ApiPath(sink): ApiPath<String>,
    ApiQuery(query): ApiQuery<LetterQuery>,
) -> Result<Json<Value>, ApiError> {
    known_sink(&state, &sink)?;
    let limit = page_limit(query.limit)?;
    let store = state.trail.store().clone();
    let after = query.after.unwrap_or(0);
    let mut letters = crate::store::blocking::run("a page of dead letters", move || {
        dead_letters::list(&store, &sink, after, limit + 1)
    })
    .await??;
    let next = if letters.len() > limit {
        letters.truncate(limit);
        letters.last().map(|l| l.seq)
    } else {
        None
    };
    Ok(Json(json!({"dead_letters": letters, "next": next})))
}

/// `POST /admin/v1/lifecycle/sinks/{sink}/dead-letters/redrive`: send them again, in seq
/// order with their original ids; stops at the first that fails again.
pub async fn redrive(
    WriteContext { ctx, .. }: WriteContext,
    State(state): State<AppState>,
    ApiPath(sink): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!(redrive_sink(&state, ctx, &sink).await?)))
}

/// Redrive sink `sink`'s dead letters for `ctx`: the API's and the console's one way.
pub async fn redrive_sink(
    state: &AppState,
    ctx: crate::audit::Context,
    sink: &str,
) -> Result<dead_letters::Redriven, ApiError> {
    let target = known_sink(state, sink)?;
    let counted = letter_count(state, sink)?;
    dead_letters::redrive(&state.trail, ctx, &counted, &*target)
        .await
        .map_err(letter_error)
}

/// `DELETE /admin/v1/lifecycle/sinks/{sink}/dead-letters/{seq}`: drop one for good.
pub async fn drop_letter(
    WriteContext { ctx, .. }: WriteContext,
    State(state): State<AppState>,
    ApiPath((sink, seq)): ApiPath<(String, u64)>,
) -> Result<Json<Value>, ApiError> {
    let counted = letter_count(&state, &sink)?;
    let row = dead_letters::drop_letter(&state.trail, ctx, &counted, seq)
        .await
        .map_err(letter_error)?;
    Ok(Json(json!({"dropped": seq, "audit_seq": row})))
}

/// `POST /admin/v1/lifecycle/sinks/{sink}/enable`: resume a sink its destination disabled
/// (a 410), from its position; 409 if it is not disabled.
pub async fn enable(
    WriteContext { ctx, .. }: WriteContext,
    State(state): State<AppState>,
    ApiPath(sink): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    let row = enable_sink(&state, ctx, &sink).await?;
    Ok(Json(json!({"enabled": sink, "audit_seq": row})))
}

/// Enable sink `sink` for `ctx`, to the end: the API's and the console's one way. The seq
/// of its row.
pub async fn enable_sink(
    state: &AppState,
    ctx: crate::audit::Context,
    sink: &str,
) -> Result<u64, ApiError> {
    let publisher = state.lifecycle.clone().ok_or_else(|| unknown_sink(sink))?;
    // To the end: a client that goes away once the row is on its way does not leave the row
    // without the enable.
    let (trail, name) = (state.trail.clone(), sink.to_owned());
    state
        .finish(async move {
            let enabled = publisher.enable(&trail, ctx, &name).await;
            enabled.map_err(|e| {
                ApiError::uncommitted(e, |refused| match refused {
                    EnableRefused::NoSuchSink => unknown_sink(&name),
                    EnableRefused::NotDisabled => ApiError::Conflict {
                        code: "conflict",
                        message: format!("lifecycle sink {name:?} is not disabled"),
                    },
                })
            })
        })
        .await
}

/// The body of a snapshot request.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewSnapshot {
    /// The kinds to snapshot (`route`, `source`; default: every kind). Sent as `null`, a 422:
    /// leave it out.
    #[serde(default, deserialize_with = "crate::subjects::present")]
    pub kinds: Option<Vec<String>>,
}

/// `POST /admin/v1/lifecycle/snapshot`: publish the present state of every route and source
/// (or of `kinds`) as a snapshot: `admin:write`, or `events:read` for a consumer that relists. 202 with the snapshot, which runs on after the answer, and
/// `X-Audit-Seq` the seq of its `snapshot.request` row;
/// 409 `snapshot_in_progress` while one runs (`conflict` with lifecycle events off). One audit row (`snapshot.request`); the
/// snapshot's own rows are system rows, never refused.
pub async fn snapshot(
    WriteContext { ctx, .. }: WriteContext<Relist>,
    State(state): State<AppState>,
    OptionalJson(body): OptionalJson<NewSnapshot>,
) -> Result<Response, ApiError> {
    if !state.flagging {
        return Err(ApiError::Conflict {
            code: "conflict",
            message: "lifecycle events are off (lifecycle.enabled = false): a snapshot would publish nothing".into(),
        });
    }
    let kinds = body.unwrap_or_default().kinds;
    let started = state.snapshots.request(ctx, kinds).await;
    let (progress, seq) = started.map_err(|e| match e {
        SnapshotError::InProgress => ApiError::Conflict {
            code: "snapshot_in_progress",
            message: "a snapshot is running; retry once it is done".into(),
        },
        SnapshotError::UnknownKind(kind) => ApiError::invalid(
            "kinds",
            format!("{kind:?} is not a kind of this node (route, source)"),
        ),
        SnapshotError::Commit(e) => ApiError::uncommitted(e, |()| ApiError::Internal),
    })?;
    let mut answer = (StatusCode::ACCEPTED, Json(json!({"snapshot": progress}))).into_response();
    answer.headers_mut().insert("x-audit-seq", seq.into());
    Ok(answer)
}

/// `GET /admin/v1/lifecycle/snapshot`: the snapshot running (with its items so far) and the
/// last one that ended.
pub async fn snapshot_status(
    _: Authorized<AdminRead>,
    State(state): State<AppState>,
) -> Json<Value> {
    Json(json!(state.snapshots.status()))
}

fn unknown_sink(sink: &str) -> ApiError {
    ApiError::NotFound(format!("no lifecycle sink named {sink:?}"))
}

fn known_sink(
    state: &AppState,
    sink: &str,
) -> Result<std::sync::Arc<dyn ankusa_sinks::Sink>, ApiError> {
    state
        .lifecycle
        .as_deref()
        .and_then(|p| p.sink(sink))
        .ok_or_else(|| unknown_sink(sink))
}

/// The count of sink `sink`'s dead letters, which removing them counts out.
fn letter_count(state: &AppState, sink: &str) -> Result<dead_letters::LetterCount, ApiError> {
    state
        .lifecycle
        .as_deref()
        .and_then(|p| p.letter_count(sink))
        .ok_or_else(|| unknown_sink(sink))
}

fn letter_error(e: CommitError<NoSuchLetter>) -> ApiError {
    ApiError::uncommitted(e, |NoSuchLetter| {
        ApiError::NotFound("no such dead letter".into())
    })
}
