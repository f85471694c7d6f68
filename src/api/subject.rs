//! What every subject route shares: paged lists, reads by id, and the shape of a write's
//! answer.
//!
//! Reads run in `spawn_blocking`: a RocksDB read never blocks a tokio worker. Writes answer
//! with the subject's redacted view, `ETag: "<revision>"` and, when a row was written,
//! `X-Audit-Seq: <seq>` (a change that changed nothing has no row and no such header).

use axum::extract::State;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::auth::{AdminRead, Authorized};
use super::error::ApiError;
use super::extract::{ApiPath, ApiQuery};
use super::AppState;
use crate::subjects::read::{self, MAX_PAGE};
use crate::subjects::redact::Redacted;
use crate::subjects::remote::{resource, Remote, RemoteSubject};
use crate::subjects::{Subject, SubjectChange};

/// The header that gives the seq of the row a write committed.
pub static X_AUDIT_SEQ: HeaderName = HeaderName::from_static("x-audit-seq");
/// The page size when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 100;

/// `?after=<id>&limit=<n>`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// Return subjects with ids after this one.
    pub after: Option<String>,
    /// At most this many (1 to 1000, default 100).
    pub limit: Option<usize>,
}

/// Check a `limit` parameter: 1 to [`MAX_PAGE`], default [`DEFAULT_LIMIT`].
pub fn page_limit(limit: Option<usize>) -> Result<usize, ApiError> {
    match limit {
        None => Ok(DEFAULT_LIMIT),
        Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
        Some(_) => Err(ApiError::bad(
            "limit",
            format!("limit: must be 1 to {MAX_PAGE}"),
        )),
    }
}

/// `GET .../tenants/{tenant}/<kind>`: one page of the tenant's subjects, in id order.
pub async fn list<S: Subject>(
    _: Authorized<AdminRead>,
    State(state): State<AppState>,
    ApiPath(tenant): ApiPath<String>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let limit = page_limit(query.limit)?;
    let store = state.trail.store().clone();
    let page = crate::store::blocking::run("a page of subjects", move || {
        read::list::<S>(&store, &tenant, query.after.as_deref(), limit)
    })
    .await??;
    Ok(listed(page))
}

/// The answer to a list: one page and where the next starts.
pub fn listed(page: read::Page) -> Json<serde_json::Value> {
    Json(json!({"items": page.items, "next": page.next}))
}

/// `GET .../tenants/{tenant}/<kind>/{id}`: one subject.
pub async fn get<S: Subject>(
    _: Authorized<AdminRead>,
    State(state): State<AppState>,
    ApiPath((tenant, id)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    let store = state.trail.store().clone();
    let resource = S::KIND.resource(&id);
    let view = crate::store::blocking::run("a subject's read", move || {
        read::get::<S>(&store, &tenant, &id)
    })
    .await??;
    found(view, &resource)
}

/// One page of the tenant's subjects that `remote` keeps, in id order.
pub async fn list_remote<T: RemoteSubject>(
    remote: &Remote<T>,
    tenant: &str,
    query: PageQuery,
) -> Result<Json<serde_json::Value>, ApiError> {
    let limit = page_limit(query.limit)?;
    let page = remote.list(tenant, query.after.as_deref(), limit).await?;
    Ok(listed(page))
}

/// Subject `id` of `tenant` that `remote` keeps.
pub async fn get_remote<T: RemoteSubject>(
    remote: &Remote<T>,
    tenant: &str,
    id: &str,
) -> Result<Response, ApiError> {
    let view = remote.get(tenant, id).await?;
    found(view, &resource::<T>(id))
}

/// The answer to a read of one subject: its view with its revision as `ETag`, or 404.
pub fn found(view: Option<Redacted>, resource: &str) -> Result<Response, ApiError> {
    let view = view.ok_or_else(|| ApiError::NotFound(format!("{resource} does not exist")))?;
    let revision = view.as_value()["revision"].as_u64().unwrap_or(0);
    let mut response = Json(view).into_response();
    set_etag(&mut response, revision);
    Ok(response)
}

/// The answer to a write: `status` with the subject's view (or 204 after a delete); the
/// view only for a caller that `reads` (`admin:read`), else `status` with no body.
pub fn written(status: StatusCode, outcome: SubjectChange, reads: bool) -> Response {
    let mut response = match outcome.view {
        Some(_) if !reads => {
            let mut response = status.into_response();
            set_etag(&mut response, outcome.revision);
            response
        }
        Some(json) => {
            let content_type = [(header::CONTENT_TYPE, "application/json")];
            let mut response = (status, content_type, json).into_response();
            set_etag(&mut response, outcome.revision);
            response
        }
        None => StatusCode::NO_CONTENT.into_response(),
    };
    if let Some(seq) = outcome.seq {
        response
            .headers_mut()
            .insert(X_AUDIT_SEQ.clone(), HeaderValue::from(seq));
    }
    response
}

fn set_etag(response: &mut Response, revision: u64) {
    if let Ok(v) = HeaderValue::from_str(&format!("\"{revision}\"")) {
        response.headers_mut().insert(header::ETAG, v);
    }
}
