//! `/admin/v1/tenants/{tenant}/replay-jobs`: create, read, list and cancel replay jobs.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::context::WriteContext;
use super::error::ApiError;
use super::extract::{ApiJson, ApiPath, IfMatchHeader};
use super::subject::written;
use super::AppState;
use crate::subjects::replay::{self, NewReplay};

/// `POST`: create a pending job (201; 409 `already_exists`; 422 when the source is
/// missing).
pub async fn create(
    WriteContext { ctx, reads, .. }: WriteContext,
    State(state): State<AppState>,
    ApiPath(tenant): ApiPath<String>,
    ApiJson(body): ApiJson<NewReplay>,
) -> Result<Response, ApiError> {
    let sources = match &state.sources {
        Some(remote) => replay::Sources::Remote(remote),
        None => replay::Sources::Local,
    };
    let outcome = replay::create(&state.trail, ctx, tenant, body, sources).await?;
    Ok(written(StatusCode::CREATED, outcome, reads))
}

/// `POST .../{id}/cancel`: cancel a pending or running job (409 `conflict` otherwise;
/// honours `If-Match`).
pub async fn cancel(
    WriteContext { ctx, reads, .. }: WriteContext,
    State(state): State<AppState>,
    ApiPath((tenant, id)): ApiPath<(String, String)>,
    IfMatchHeader(if_match): IfMatchHeader,
) -> Result<Response, ApiError> {
    let outcome = replay::cancel(&state.trail, ctx, tenant, id, if_match).await?;
    Ok(written(StatusCode::OK, outcome, reads))
}
