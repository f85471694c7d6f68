//! `/admin/v1/tenants/{tenant}/sources`: create, read, list, patch and delete API-managed
//! sources. The secret is write-only: every answer carries it as `"[redacted]"`.
//!
//! Sources live in this node's store, or in Redis when `[sources] store = "redis"`
//! (`AppState::sources`); each handler goes to the one configured, with the same answers.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;

use super::auth::{AdminRead, Authorized};
use super::context::WriteContext;
use super::error::ApiError;
use super::extract::ApiQuery;
use super::extract::{ApiJson, ApiPath, IfMatchHeader};
use super::subject::{self, get_remote, list_remote, written, PageQuery};
use super::AppState;
use crate::subjects::sources::{self, NewSource, Source, SourcePatch};

/// `GET`: one page of the tenant's sources, in id order.
pub async fn list(
    auth: Authorized<AdminRead>,
    State(state): State<AppState>,
    ApiPath(tenant): ApiPath<String>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Some(remote) = state.sources.clone() else {
        return subject::list::<Source>(auth, State(state), ApiPath(tenant), ApiQuery(query)).await;
    };
    list_remote(remote.remote(), &tenant, query).await
}

/// `GET .../{id}`: one source, with its revision as `ETag`.
pub async fn get(
    auth: Authorized<AdminRead>,
    State(state): State<AppState>,
    ApiPath((tenant, id)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    let Some(remote) = state.sources.clone() else {
        return subject::get::<Source>(auth, State(state), ApiPath((tenant, id))).await;
    };
    get_remote(remote.remote(), &tenant, &id).await
}

/// `POST`: create a source (201; 409 `already_exists`).
pub async fn create(
    WriteContext { ctx, reads, .. }: WriteContext,
    State(state): State<AppState>,
    ApiPath(tenant): ApiPath<String>,
    ApiJson(body): ApiJson<NewSource>,
) -> Result<Response, ApiError> {
    let outcome = match &state.sources {
        Some(remote) => remote.create(ctx, tenant, body).await?,
        None => sources::create(&state.trail, ctx, tenant, body).await?,
    };
    Ok(written(StatusCode::CREATED, outcome, reads))
}

/// `PATCH`: replace the fields the body names (honours `If-Match`).
pub async fn update(
    WriteContext { ctx, reads, .. }: WriteContext,
    State(state): State<AppState>,
    ApiPath((tenant, id)): ApiPath<(String, String)>,
    IfMatchHeader(if_match): IfMatchHeader,
    ApiJson(body): ApiJson<SourcePatch>,
) -> Result<Response, ApiError> {
    let outcome = match &state.sources {
        Some(remote) => remote.update(ctx, tenant, id, body, if_match).await?,
        None => sources::update(&state.trail, ctx, tenant, id, body, if_match).await?,
    };
    Ok(written(StatusCode::OK, outcome, reads))
}

/// `DELETE`: delete a source (204; honours `If-Match`).
pub async fn delete(
    WriteContext { ctx, reads, .. }: WriteContext,
    State(state): State<AppState>,
    ApiPath((tenant, id)): ApiPath<(String, String)>,
    IfMatchHeader(if_match): IfMatchHeader,
) -> Result<Response, ApiError> {
    let outcome = match &state.sources {
        Some(remote) => remote.delete(ctx, tenant, id, if_match).await?,
        None => sources::delete(&state.trail, ctx, tenant, id, if_match).await?,
    };
    Ok(written(StatusCode::NO_CONTENT, outcome, reads))
}
