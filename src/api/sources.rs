//! `/admin/v1/tenants/{tenant}/sources`: create, read, list, patch and delete API-managed
//! sources. The secret is write-only: every answer carries it as `"[redacted]"`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::context::WriteContext;
use super::error::ApiError;
use super::extract::{ApiJson, ApiPath, IfMatchHeader};
use super::subject::written;
use super::AppState;
use crate::subjects::sources::{self, NewSource, SourcePatch};

/// `POST`: create a source (201; 409 `already_exists`).
pub async fn create(
    WriteContext(ctx): WriteContext,
    State(state): State<AppState>,
    ApiPath(tenant): ApiPath<String>,
    ApiJson(body): ApiJson<NewSource>,
) -> Result<Response, ApiError> {
    let outcome = sources::create(&state.trail, ctx, tenant, body).await?;
    Ok(written(StatusCode::CREATED, outcome))
}

/// `PATCH`: replace the fields the body names (honours `If-Match`).
pub async fn update(
    WriteContext(ctx): WriteContext,
    State(state): State<AppState>,
    ApiPath((tenant, id)): ApiPath<(String, String)>,
    IfMatchHeader(if_match): IfMatchHeader,
    ApiJson(body): ApiJson<SourcePatch>,
) -> Result<Response, ApiError> {
    let outcome = sources::update(&state.trail, ctx, tenant, id, body, if_match).await?;
    Ok(written(StatusCode::OK, outcome))
}

/// `DELETE`: delete a source (204; honours `If-Match`).
pub async fn delete(
    WriteContext(ctx): WriteContext,
    State(state): State<AppState>,
    ApiPath((tenant, id)): ApiPath<(String, String)>,
    IfMatchHeader(if_match): IfMatchHeader,
) -> Result<Response, ApiError> {
    let outcome = sources::delete(&state.trail, ctx, tenant, id, if_match).await?;
    Ok(written(StatusCode::NO_CONTENT, outcome))
}
