//! `/admin/v1/tenants/{tenant}/routes`: create, read, list, patch and delete routes, which
//! live in the route store (memory or Redis), not in this node's RocksDB.
//!
//! The same shapes as the local subjects (`subject.rs`): `ETag` revisions, `If-Match`,
//! `X-Audit-Seq` on a write that wrote a row. A write whose route store did not answer is a
//! 503 like any unavailable store; its pending row is settled by reading the route back.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;

use super::auth::{AdminRead, Authorized};
use super::context::WriteContext;
use super::error::ApiError;
use super::extract::{ApiJson, ApiPath, ApiQuery, IfMatchHeader};
use super::subject::{get_remote, list_remote, written, PageQuery};
use super::AppState;
use crate::subjects::routes::{NewRoute, RoutePatch};

/// `GET`: one page of the tenant's routes, in id order.
pub async fn list(
    _: Authorized<AdminRead>,
    State(state): State<AppState>,
    ApiPath(tenant): ApiPath<String>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    list_remote(state.routes.remote(), &tenant, query).await
}

/// `GET .../{id}`: one route, with its revision as `ETag`.
pub async fn get(
    _: Authorized<AdminRead>,
    State(state): State<AppState>,
    ApiPath((tenant, id)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    get_remote(state.routes.remote(), &tenant, &id).await
}

/// `POST`: create a route (201; 409 `already_exists`).
pub async fn create(
    WriteContext { ctx, reads, .. }: WriteContext,
    State(state): State<AppState>,
    ApiPath(tenant): ApiPath<String>,
    ApiJson(body): ApiJson<NewRoute>,
) -> Result<Response, ApiError> {
    let outcome = state.routes.create(ctx, tenant, body).await?;
    Ok(written(StatusCode::CREATED, outcome, reads))
}

/// `PATCH .../{id}`: replace the fields the body names (honours `If-Match`).
pub async fn update(
    WriteContext { ctx, reads, .. }: WriteContext,
    State(state): State<AppState>,
    ApiPath((tenant, id)): ApiPath<(String, String)>,
    IfMatchHeader(if_match): IfMatchHeader,
    ApiJson(body): ApiJson<RoutePatch>,
) -> Result<Response, ApiError> {
    let outcome = state.routes.update(ctx, tenant, id, body, if_match).await?;
    Ok(written(StatusCode::OK, outcome, reads))
}

/// `DELETE .../{id}`: delete a route (204; honours `If-Match`).
pub async fn delete(
    WriteContext { ctx, reads, .. }: WriteContext,
    State(state): State<AppState>,
    ApiPath((tenant, id)): ApiPath<(String, String)>,
    IfMatchHeader(if_match): IfMatchHeader,
) -> Result<Response, ApiError> {
    let outcome = state.routes.delete(ctx, tenant, id, if_match).await?;
    Ok(written(StatusCode::NO_CONTENT, outcome, reads))
}
