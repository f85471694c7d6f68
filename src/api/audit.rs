//! `/admin/v1/audit`: the trail, read-only, for callers with `audit:read`.
//!
//! Rows come back in seq order (commit order), so a reader that passes the last seq it saw
//! as `after` never misses a row. A row holds hashes, never a secret or a spec; no route
//! returns the audit key or hashes anything a caller sends.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::{AuditRead, Authorized};
use super::error::ApiError;
use super::extract::{ApiPath, ApiQuery};
use super::subject::page_limit;
use super::AppState;
use crate::audit::tree::proof::ProofError;
use crate::audit::{self, Filter, Row, RowResult};

/// The longest filter value accepted, in characters (as the document's `maxLength` counts).
const MAX_FILTER_LEN: usize = 256;

/// The most rows one request reads, matching or not: a filter few rows match answers with
/// what it found and a `next` to go on from, instead of reading the whole trail at once.
pub(crate) const SCAN_BUDGET: usize = 50_000;

/// `?after=<seq>&limit=<n>&tenant=&action=&resource=<prefix>&actor=&result=&from=&until=`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Rows with seq greater than this (default 0: from the start).
    pub after: Option<u64>,
    /// At most this many rows (1 to 1000, default 100).
    pub limit: Option<usize>,
    /// Only rows of this tenant.
    pub tenant: Option<String>,
    /// Only rows of this action (`source.update`).
    pub action: Option<String>,
    /// Only rows whose resource starts with this (`sources/`, `sources/s1`).
    pub resource: Option<String>,
    /// Only rows made by this actor (a token's name, or `system`).
    pub actor: Option<String>,
    /// Only rows with this result (`ok`, `failed`, `interrupted`).
    pub result: Option<RowResult>,
    /// Only rows committed at or after this time (RFC 3339).
    pub from: Option<String>,
    /// Only rows committed before this time (RFC 3339).
    pub until: Option<String>,
}

/// `?after=<seq>&limit=<n>&tenant=`: one subject's history.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubjectQuery {
    /// Rows with seq greater than this (default 0: from the start).
    pub after: Option<u64>,
    /// At most this many rows (1 to 1000, default 100).
    pub limit: Option<usize>,
    /// Only rows of this tenant (a subject's resource names it within its tenant).
    pub tenant: Option<String>,
}

/// `GET /admin/v1/audit`: `{"rows": [...], "next": <seq or null>}`. `next` is set whenever
/// more rows may follow: after a full page, or when the read stopped at [`SCAN_BUDGET`] rows
/// or index entries (a page then holds fewer rows than asked, even none). An actor, a
/// tenant, a result other than `ok` or a time window is answered from the rows' index
/// entries. With `Accept: application/x-ndjson`, the whole window streams instead, each
/// row with its proof ([`super::audit_export`]).
pub async fn list(
    _: Authorized<AuditRead>,
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<AuditQuery>,
) -> Result<Response, ApiError> {
    let filter = Filter {
        tenant: checked("tenant", query.tenant)?,
        action: checked("action", query.action)?,
        resource_prefix: checked("resource", query.resource)?,
        actor: checked("actor", query.actor)?,
        result: query.result,
        from: time("from", query.from)?,
        until: time("until", query.until)?,
        ..Filter::default()
    };
    if super::audit_export::wanted(&headers) {
        return super::audit_export::export(state, query.after, query.limit, filter).await;
    }
    Ok(rows_page(&state, query.after, query.limit, filter)
        .await?
        .into_response())
}

/// `GET /admin/v1/audit/subjects/{resource}`: the rows of one subject, in seq order, from its
/// index entries; paged as the list is.
pub async fn subject(
    _: Authorized<AuditRead>,
    State(state): State<AppState>,
    ApiPath(resource): ApiPath<String>,
    ApiQuery(query): ApiQuery<SubjectQuery>,
) -> Result<Json<Value>, ApiError> {
    let filter = Filter {
        subject: checked("resource", Some(resource))?,
        tenant: checked("tenant", query.tenant)?,
        ..Filter::default()
    };
    rows_page(&state, query.after, query.limit, filter).await
}

/// An RFC 3339 time as unix ms (a time before 1970 is 1970), or a 400 naming `field`.
pub(crate) fn time(field: &str, value: Option<String>) -> Result<Option<u64>, ApiError> {
    value
        .map(|v| {
            chrono::DateTime::parse_from_rfc3339(&v)
                .map(|t| u64::try_from(t.timestamp_millis()).unwrap_or(0))
                .map_err(|e| ApiError::bad(field, format!("{field}: not an RFC 3339 time: {e}")))
        })
        .transpose()
}

/// One page of the rows `filter` lets through after `after`, and where the next begins.
async fn rows_page(
    state: &AppState,
    after: Option<u64>,
    limit: Option<usize>,
    filter: Filter,
) -> Result<Json<Value>, ApiError> {
    let (rows, next) = rows_after(state, after.unwrap_or(0), page_limit(limit)?, filter).await?;
    Ok(Json(json!({"rows": rows, "next": next})))
}

/// Up to `limit` rows `filter` lets through after `after`, and the seq the next page begins
/// after, set whenever more rows may follow (after a full page, or when the read stopped at
/// [`SCAN_BUDGET`]): what the list and the console's pages serve.
pub(crate) async fn rows_after(
    state: &AppState,
    after: u64,
    limit: usize,
    filter: Filter,
) -> Result<(Vec<Row>, Option<u64>), ApiError> {
    let scanned = state
        .trail
        .page(after, limit + 1, filter, SCAN_BUDGET)
        .await?;
    let mut rows = scanned.rows;
    let next = if rows.len() > limit {
        rows.truncate(limit);
        rows.last().map(|r| r.seq)
    } else {
        scanned.cut_at
    };
    Ok((rows, next))
}

/// `GET /admin/v1/audit/{seq}`: one row.
pub async fn get(
    _: Authorized<AuditRead>,
    State(state): State<AppState>,
    ApiPath(seq): ApiPath<u64>,
) -> Result<Json<Value>, ApiError> {
    let store = state.trail.store().clone();
    let row =
        crate::store::blocking::run("a row's read", move || audit::get(&store, seq)).await??;
    let row = row.ok_or_else(|| ApiError::NotFound(format!("no row with seq {seq}")))?;
    Ok(Json(json!(row)))
}

pub(crate) fn checked(field: &str, value: Option<String>) -> Result<Option<String>, ApiError> {
    match value {
        Some(v)
            if v.is_empty()
                || v.chars().count() > MAX_FILTER_LEN
                || v.chars().any(char::is_control) =>
        {
            Err(ApiError::bad(
                field,
                format!(
                    "{field}: must be 1 to {MAX_FILTER_LEN} characters without control characters"
                ),
            ))
        }
        v => Ok(v),
    }
}

/// `GET /admin/v1/audit/checkpoint`: the newest signed checkpoint of the trail's Merkle
/// tree: `{"origin", "size", "root", "checkpoint"}`, the last its signed-note text.
pub async fn checkpoint(
    _: Authorized<AuditRead>,
    State(state): State<AppState>,
) -> Result<Json<Value>, ApiError> {
    match state.trail.newest_checkpoint().await? {
        Some(c) => Ok(Json(json!(c))),
        None => Err(ApiError::NotFound(
            "no checkpoint has been signed yet (or audit.tree is off)".into(),
        )),
    }
}

/// `?size=<n>`: the tree the proof is for.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProofQuery {
    /// Leaves of the tree (default: the newest checkpoint's size).
    pub size: Option<u64>,
}

/// `GET /admin/v1/audit/{seq}/proof?size=N`: the RFC 6962 inclusion proof of row `seq` in
/// the tree of `size` leaves.
pub async fn proof(
    _: Authorized<AuditRead>,
    State(state): State<AppState>,
    ApiPath(seq): ApiPath<u64>,
    ApiQuery(query): ApiQuery<ProofQuery>,
) -> Result<Json<Value>, ApiError> {
    let proof = state
        .trail
        .inclusion_proof(seq, query.size)
        .await
        .map_err(|e| proof_error("size", e))?;
    Ok(Json(json!(proof)))
}

/// `?from=<n>&to=<m>`: the two trees.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsistencyQuery {
    /// Leaves of the older tree.
    pub from: u64,
    /// Leaves of the newer tree.
    pub to: u64,
}

/// `GET /admin/v1/audit/consistency?from=N&to=M`: the RFC 6962 consistency proof that the
/// tree of `from` leaves is a prefix of the tree of `to` leaves.
pub async fn consistency(
    _: Authorized<AuditRead>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ConsistencyQuery>,
) -> Result<Json<Value>, ApiError> {
    let proof = state
        .trail
        .consistency_proof(query.from, query.to)
        .await
        .map_err(|e| proof_error("from", e))?;
    Ok(Json(json!(proof)))
}

pub(super) fn proof_error(field: &str, e: ProofError) -> ApiError {
    match e {
        ProofError::NoTree => ApiError::Conflict {
            code: "conflict",
            message: e.to_string(),
        },
        ProofError::Invalid(m) => ApiError::invalid(field, m),
        ProofError::OutOfRange(m) | ProofError::Gone(m) => ApiError::NotFound(m),
        ProofError::Store(e) => e.into(),
    }
}
