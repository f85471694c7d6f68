//! `/admin/v1/tenants/{tenant}/quarantine`: add, read, list and remove quarantine entries.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::context::WriteContext;
use super::error::ApiError;
use super::extract::{ApiJson, ApiPath, IfMatchHeader};
use super::subject::written;
use super::AppState;
use crate::subjects::quarantine::{self, NewQuarantine};

/// `POST`: add an entry (201; 409 `already_exists`).
pub async fn add(
    WriteContext { ctx, reads, .. }: WriteContext,
    State(state): State<AppState>,
    ApiPath(tenant): ApiPath<String>,
    ApiJson(body): ApiJson<NewQuarantine>,
) -> Result<Response, ApiError> {
    let outcome = quarantine::add(&state.trail, ctx, tenant, body).await?;
    Ok(written(StatusCode::CREATED, outcome, reads))
}

/// `DELETE`: remove an entry (204; honours `If-Match`).
pub async fn remove(
    WriteContext { ctx, reads, .. }: WriteContext,
    State(state): State<AppState>,
    ApiPath((tenant, id)): ApiPath<(String, String)>,
    IfMatchHeader(if_match): IfMatchHeader,
) -> Result<Response, ApiError> {
    let outcome = quarantine::remove_entry(&state.trail, ctx, tenant, id, if_match).await?;
    Ok(written(StatusCode::NO_CONTENT, outcome, reads))
}
