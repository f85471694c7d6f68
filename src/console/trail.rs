//! The console's reading of the trail: signing in and out, the Trail page (the API's filters,
//! paged), one row with what Verify needs, and one subject's history.
//!
//! Pages read through the same index-driven query as `GET /admin/v1/audit`, with the same
//! checks on every filter, so a page and the API never disagree on what a filter means.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;

use super::page::{render, time, Nav, Refusal};
use super::session::{self, Signed};
use crate::api::audit::{checked, rows_after, time as rfc3339};
use crate::api::auth::AuditRead;
use crate::api::error::ApiError;
use crate::api::AppState;
use crate::audit::{self, Filter, Row, RowResult};

/// Rows on one page of the Trail and Subject pages.
const PAGE: usize = 50;

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    failed: bool,
}

/// `GET /console/login`.
pub async fn login_page() -> Response {
    render(&LoginPage { failed: false })
}

/// The sign-in form.
#[derive(Debug, Deserialize)]
pub struct LoginForm {
    token: String,
}

/// `POST /console/login`: a token that authenticates opens a session and goes to the trail;
/// another is told so (401), and nothing is kept.
pub async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let Some(console) = state.console.as_deref() else {
        return ApiError::NoEndpoint.into_response();
    };
    if !session::same_origin(&headers) {
        return Refusal::Forged.into_response();
    }
    let Some(caller) = state.admin.tokens.authenticate(form.token.trim()) else {
        crate::telemetry::api::request_unauthenticated(
            "console sign-in with an unknown token",
            None,
        );
        return (
            StatusCode::UNAUTHORIZED,
            render(&LoginPage { failed: true }),
        )
            .into_response();
    };
    let start = if caller.has(crate::config::Scope::AuditRead) {
        "/console/trail"
    } else {
        "/console/delivery"
    };
    let id = console.sessions.open(caller);
    let mut answer = Redirect::to(start).into_response();
    if let Ok(v) = session::set_cookie(&id).parse() {
        answer.headers_mut().insert(header::SET_COOKIE, v);
    }
    answer
}

/// A form that only carries the session's CSRF token.
#[derive(Debug, Deserialize)]
pub struct CsrfForm {
    /// The session's CSRF token.
    pub csrf: String,
}

/// `POST /console/logout`.
pub async fn logout(
    State(state): State<AppState>,
    signed: Signed<Anyone>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Result<Response, Refusal> {
    signed.check_csrf(&form.csrf)?;
    if let (Some(console), Some(id)) = (state.console.as_deref(), session::cookie(&headers)) {
        console.sessions.close(id);
    }
    let mut answer = Redirect::to("/console/login").into_response();
    if let Ok(v) = session::clear_cookie().parse() {
        answer.headers_mut().insert(header::SET_COOKIE, v);
    }
    Ok(answer)
}

/// Any signed-in token, whatever its scopes.
#[derive(Debug)]
pub struct Anyone;

impl crate::api::auth::RequiredScope for Anyone {
    const SCOPE: crate::config::Scope = crate::config::Scope::AuditRead;

    fn admits(_: &crate::api::auth::Caller) -> bool {
        true
    }
}

/// `GET /console/`: the trail, or the sinks for a token that may not read it.
pub async fn home(signed: Signed<Anyone>) -> Redirect {
    if signed.has(crate::config::Scope::AuditRead) {
        Redirect::to("/console/trail")
    } else {
        Redirect::to("/console/delivery")
    }
}

/// The Trail page's form: the API's filters, empty fields meaning "any".
#[derive(Debug, Default, Deserialize)]
pub struct TrailQuery {
    after: Option<u64>,
    #[serde(default)]
    actor: String,
    #[serde(default)]
    tenant: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    resource: String,
    #[serde(default)]
    result: String,
    #[serde(default)]
    from: String,
    #[serde(default)]
    until: String,
}

fn given(v: &str) -> Option<String> {
    let v = v.trim();
    (!v.is_empty()).then(|| v.to_owned())
}

impl TrailQuery {
    fn filter(&self) -> Result<Filter, ApiError> {
        let result = match self.result.as_str() {
            "" => None,
            "ok" => Some(RowResult::Ok),
            "failed" => Some(RowResult::Failed),
            "interrupted" => Some(RowResult::Interrupted),
            other => {
                return Err(ApiError::bad(
                    "result",
                    format!("result: {other:?} is not ok, failed or interrupted"),
                ))
            }
        };
        Ok(Filter {
            actor: checked("actor", given(&self.actor))?,
            tenant: checked("tenant", given(&self.tenant))?,
            action: checked("action", given(&self.action))?,
            resource_prefix: checked("resource", given(&self.resource))?,
            result,
            from: rfc3339("from", given(&self.from))?,
            until: rfc3339("until", given(&self.until))?,
            ..Filter::default()
        })
    }

    /// The query string of these filters from seq `after` (none: the first page).
    fn link(&self, after: Option<u64>) -> String {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("actor", &self.actor),
            ("tenant", &self.tenant),
            ("action", &self.action),
            ("resource", &self.resource),
            ("result", &self.result),
            ("from", &self.from),
            ("until", &self.until),
        ] {
            if !v.trim().is_empty() {
                q.append_pair(k, v.trim());
            }
        }
        if let Some(after) = after {
            q.append_pair("after", &after.to_string());
        }
        q.finish()
    }
}

/// A row as a table line shows it.
pub struct Line {
    seq: u64,
    at: String,
    actor: String,
    action: String,
    tenant: String,
    resource: String,
    result: &'static str,
}

impl From<&Row> for Line {
    fn from(r: &Row) -> Line {
        Line {
            seq: r.seq,
            at: time(r.at),
            actor: r.actor.clone(),
            action: r.action.clone(),
            tenant: r.tenant.clone().unwrap_or_default(),
            resource: r.resource.clone(),
            result: r.result.as_str(),
        }
    }
}

#[derive(Template)]
#[template(path = "trail.html")]
struct TrailPage {
    nav: Nav,
    q: TrailQuery,
    lines: Vec<Line>,
    /// The query string of the first page.
    first: String,
    /// The query string of the next page, if more rows may follow.
    next: Option<String>,
    /// The read stopped at its budget before a page filled.
    cut: bool,
    error: Option<String>,
}

/// `GET /console/trail`: the filters and one page of rows; a bad filter is shown beside
/// the form (400), never a blank page.
pub async fn trail(
    signed: Signed<AuditRead>,
    State(state): State<AppState>,
    Query(q): Query<TrailQuery>,
) -> Result<Response, Refusal> {
    let nav = Nav::new(&signed.session, "trail");
    let filter = match q.filter() {
        Ok(f) => f,
        Err(e) => {
            let error = e.body()["message"].as_str().map(str::to_owned);
            let page = TrailPage {
                nav,
                first: q.link(None),
                q,
                lines: Vec::new(),
                next: None,
                cut: false,
                error,
            };
            return Ok((StatusCode::BAD_REQUEST, render(&page)).into_response());
        }
    };
    let (rows, next) = rows_after(&state, q.after.unwrap_or(0), PAGE, filter).await?;
    // Fewer rows than a page and still a `next`: the read stopped at its budget.
    let cut = rows.len() < PAGE && next.is_some();
    let page = TrailPage {
        nav,
        lines: rows.iter().map(Line::from).collect(),
        next: next.map(|n| q.link(Some(n))),
        first: q.link(None),
        q,
        cut,
        error: None,
    };
    Ok(render(&page))
}

#[derive(Template)]
#[template(path = "row.html")]
struct RowPage {
    nav: Nav,
    row: Row,
    at: String,
    detail: String,
    /// What Verify checks, as JSON for the page's script: the row, its proof against the
    /// newest checkpoint, and that checkpoint; `None` when there is nothing to check yet.
    verify: Option<serde_json::Value>,
    /// Why there is no proof, when there is none.
    no_proof: Option<String>,
}

/// `GET /console/trail/{seq}`: one row, and its inclusion proof against the newest
/// checkpoint for Verify.
pub async fn row(
    signed: Signed<AuditRead>,
    State(state): State<AppState>,
    Path(seq): Path<u64>,
) -> Result<Response, Refusal> {
    let store = state.trail.store().clone();
    let row =
        crate::store::blocking::run("a row's read", move || audit::get(&store, seq)).await??;
    let row = row.ok_or_else(|| ApiError::NotFound(format!("no row with seq {seq}")))?;
    let (verify, no_proof) = match state.trail.newest_checkpoint().await? {
        None => (
            None,
            Some("No checkpoint has been signed yet (or audit.tree is off).".into()),
        ),
        Some(cp) if cp.size < seq => (
            None,
            Some(format!(
                "The newest checkpoint covers {} rows; this row is newer. Try again after the \
                 next checkpoint.",
                cp.size
            )),
        ),
        Some(cp) => match state.trail.inclusion_proof(seq, Some(cp.size)).await {
            Ok(proof) => (
                Some(serde_json::json!({"row": row, "proof": proof, "checkpoint": cp})),
                None,
            ),
            Err(e) => (None, Some(e.to_string())),
        },
    };
    let page = RowPage {
        nav: Nav::new(&signed.session, "trail"),
        at: time(row.at),
        detail: serde_json::to_string_pretty(&row.detail).unwrap_or_default(),
        row,
        verify,
        no_proof,
    };
    Ok(render(&page))
}

/// `?resource=&tenant=&after=`: the subject whose history to show.
#[derive(Debug, Default, Deserialize)]
pub struct SubjectQuery {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    tenant: String,
    after: Option<u64>,
}

#[derive(Template)]
#[template(path = "subject.html")]
struct SubjectPage {
    nav: Nav,
    resource: String,
    tenant: String,
    lines: Vec<Line>,
    next: Option<String>,
    error: Option<String>,
}

/// `GET /console/subject?resource=`: one subject's history as a timeline, oldest first.
pub async fn subject(
    signed: Signed<AuditRead>,
    State(state): State<AppState>,
    Query(q): Query<SubjectQuery>,
) -> Result<Response, Refusal> {
    let mut page = SubjectPage {
        nav: Nav::new(&signed.session, "subject"),
        resource: q.resource.trim().to_owned(),
        tenant: q.tenant.trim().to_owned(),
        lines: Vec::new(),
        next: None,
        error: None,
    };
    if page.resource.is_empty() {
        return Ok(render(&page));
    }
    let filter = checked("resource", given(&q.resource)).and_then(|subject| {
        Ok(Filter {
            subject,
            tenant: checked("tenant", given(&q.tenant))?,
            ..Filter::default()
        })
    });
    let filter = match filter {
        Ok(f) => f,
        Err(e) => {
            page.error = e.body()["message"].as_str().map(str::to_owned);
            return Ok((StatusCode::BAD_REQUEST, render(&page)).into_response());
        }
    };
    let (rows, next) = rows_after(&state, q.after.unwrap_or(0), PAGE, filter).await?;
    page.lines = rows.iter().map(Line::from).collect();
    page.next = next.map(|n| {
        let mut s = url::form_urlencoded::Serializer::new(String::new());
        s.append_pair("resource", &page.resource);
        if !page.tenant.is_empty() {
            s.append_pair("tenant", &page.tenant);
        }
        s.append_pair("after", &n.to_string());
        s.finish()
    });
    Ok(render(&page))
}
