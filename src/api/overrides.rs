//! `/admin/v1/tenants/{tenant}/overrides`: set (create or replace), read, list and delete
//! rate-limit overrides.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::context::WriteContext;
use super::error::ApiError;
use super::extract::{ApiJson, ApiPath, IfMatchHeader};
use super::subject::written;
use super::AppState;
use crate::subjects::overrides::{self, SetOverride};

/// `PUT`: set the override of a key (201 when new, 200 when replaced or unchanged).
pub async fn set(
    WriteContext { ctx, reads, .. }: WriteContext,
    State(state): State<AppState>,
    ApiPath((tenant, key)): ApiPath<(String, String)>,
    IfMatchHeader(if_match): IfMatchHeader,
    ApiJson(body): ApiJson<SetOverride>,
) -> Result<Response, ApiError> {
    let outcome = overrides::set(&state.trail, ctx, tenant, key, body, if_match).await?;
    let status = if outcome.seq.is_some() && outcome.revision == 1 {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(written(status, outcome, reads))
}

/// `DELETE`: delete the override of a key (204; honours `If-Match`).
pub async fn delete(
    WriteContext { ctx, reads, .. }: WriteContext,
    State(state): State<AppState>,
    ApiPath((tenant, key)): ApiPath<(String, String)>,
    IfMatchHeader(if_match): IfMatchHeader,
) -> Result<Response, ApiError> {
    let outcome = overrides::delete(&state.trail, ctx, tenant, key, if_match).await?;
    Ok(written(StatusCode::NO_CONTENT, outcome, reads))
}
