//! `POST /admin/v1/backups`: back up the running node's store into `node.backup_dir`.
//!
//! The backup is taken first, from a frozen copy (see `store::backup`: the writer is never
//! paused, and the `m:audit_seq` the backup holds is read from the copy itself), then
//! the `backup.create` row is committed through the writer, saying which backup and which
//! `m:audit_seq` it holds. So the row comes after everything the backup holds and never names
//! a backup that does not exist; the backup never holds its own row. A row that cannot be
//! written (store unavailable) un-makes the backup, like any change whose row cannot be
//! written; the backlog and the ceilings never refuse it (it is an operator's act already
//! done, admitted as relieving). The directory comes from the configuration, never from the
//! caller.
//!
//! One backup at a time: a second one asked while one is under way is refused with 409
//! `backup_in_progress` and writes no row. Queued, it would wait on the store's backup lock
//! on a blocking thread, and a few of them would starve the reads that need those threads.

use std::convert::Infallible;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::context::WriteContext;
use super::error::ApiError;
use super::extract::OptionalJson;
use super::subject::X_AUDIT_SEQ;
use super::AppState;
use crate::audit::{Change, Clock, CommitError, Context, SystemClock};
use crate::store::backup::{BackupDir, BackupError, BackupInfo};
use crate::telemetry;

/// The request body: empty, or a JSON object with no fields (room for options to come).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewBackup {}

/// `POST /admin/v1/backups` (scope `admin:write`): 201 with the backup's id, time, size and
/// the `m:audit_seq` it holds; `X-Audit-Seq` is the seq of its `backup.create` row.
///
/// The work runs to the end ([`AppState::finish`]): a client that goes away mid-backup drops
/// this handler, but the backup still gets its row (or is discarded), never neither. 409
/// `backup_in_progress` while another backup is under way.
pub async fn create(
    WriteContext { ctx, .. }: WriteContext,
    State(state): State<AppState>,
    OptionalJson(_options): OptionalJson<NewBackup>,
) -> Result<Response, ApiError> {
    let Ok(turn) = state.backing_up.clone().try_acquire_owned() else {
        telemetry::api::backup_refused_busy();
        return Err(ApiError::Conflict {
            code: "backup_in_progress",
            message: "a backup is under way; retry once it is done".into(),
        });
    };
    let work = back_up_and_record(state.clone(), ctx);
    // The turn goes with the work, not with this handler: a client that leaves does not
    // let the next backup start while this one still runs.
    let (info, row) = state
        .finish(async move {
            let done = work.await;
            drop(turn);
            done
        })
        .await?;
    Ok(created(&info, row))
}

/// Take the backup, then commit its row; discard the backup if the row is not written. The
/// row is never refused by the backlog or the ceilings ([`Context::relieving`]): the backup
/// is already made, and an operator takes one most when the node is in trouble.
async fn back_up_and_record(state: AppState, ctx: Context) -> Result<(BackupInfo, u64), ApiError> {
    let (store, dir) = (state.trail.store().clone(), state.backup_dir.clone());
    let now = SystemClock.now_ms();
    let made = crate::store::blocking::run("the backup", move || {
        let mut backups = BackupDir::create(&dir)?;
        let info = backups.back_up(&store, now)?;
        fail::fail_point!("api::backup_taken");
        Ok::<_, BackupError>((backups, info))
    })
    .await?;
    let (backups, info) = made.map_err(|e| {
        telemetry::api::request_failed(&format!("backup failed: {e}"));
        ApiError::Internal
    })?;
    let change = Change::new("backup.create", format!("backups/{}", info.id))
        .detail("backup_id", info.id)
        .detail("audit_seq", info.audit_seq.unwrap_or(0))
        .detail("size", info.size)
        .detail("files", info.files);
    let committed = state
        .trail
        .commit(ctx.relieving(), move |_| {
            Ok::<_, CommitError<Infallible>>((change, ()))
        })
        .await;
    match committed {
        Ok(row) => Ok((info, row.seq)),
        Err(e) => {
            let id = info.id;
            let undone =
                crate::store::blocking::run("discarding the backup", move || backups.discard(id))
                    .await?;
            if let Err(undo) = undone {
                telemetry::api::request_failed(&format!(
                    "discarding backup {id}, whose row was not written, failed: {undo}"
                ));
            }
            Err(ApiError::uncommitted(e, |never| match never {}))
        }
    }
}

fn created(info: &BackupInfo, row: u64) -> Response {
    let audit_seq = info.audit_seq.unwrap_or(0);
    let created_at = chrono::DateTime::from_timestamp(info.timestamp, 0).map(|t| t.to_rfc3339());
    let body = json!({
        "id": info.id,
        "created_at": created_at,
        "size": info.size,
        "files": info.files,
        "audit_seq": audit_seq,
    });
    let mut response = (StatusCode::CREATED, Json(body)).into_response();
    response
        .headers_mut()
        .insert(X_AUDIT_SEQ.clone(), HeaderValue::from(row));
    response
}
