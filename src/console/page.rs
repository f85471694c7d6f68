//! What every console page shares: the navigation, the answer to a refused or failed request
//! (a page, never JSON), the rendering of a template, and the headers every answer carries.

use askama::Template;
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};

use super::session::Session;
use crate::api::error::ApiError;
use crate::config::Scope;

/// Only the node's own scripts, styles and images; no frames, no plugins, forms posted back
/// to the node only. A page inlines neither script nor style, so none needs `unsafe-inline`.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                       connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
                       base-uri 'none'";

/// The navigation and who is signed in, on every page but sign-in.
#[derive(Debug, Clone)]
pub struct Nav {
    /// The token's name.
    pub name: String,
    /// Its scopes, as configured.
    pub scopes: String,
    /// The session's CSRF token, for the forms of the page.
    pub csrf: String,
    /// The page shown (`trail`, `subject`, `delivery`, `snapshots`): marked in the menu.
    pub current: &'static str,
    /// Whether the token may read the trail (`audit:read`).
    pub audit: bool,
    /// Whether it may read subjects and sinks (`admin:read`).
    pub admin: bool,
}

impl Nav {
    /// The navigation of page `current` for `session`.
    pub fn new(session: &Session, current: &'static str) -> Nav {
        let caller = &session.caller;
        let scopes: Vec<_> = Scope::ALL
            .iter()
            .filter(|s| caller.has(**s))
            .map(|s| s.as_str())
            .collect();
        Nav {
            name: caller.name.to_string(),
            scopes: scopes.join(" "),
            csrf: session.csrf.clone(),
            current,
            audit: caller.has(Scope::AuditRead),
            admin: caller.has(Scope::AdminRead),
        }
    }
}

/// A console request that did not get its page.
#[derive(Debug)]
pub enum Refusal {
    /// A form without this session's CSRF token, or posted from another site: 403.
    Forged,
    /// The token lacks a scope the page needs: 403.
    Scope(Scope),
    /// What the API would have answered.
    Api(ApiError),
}

impl From<ApiError> for Refusal {
    fn from(e: ApiError) -> Refusal {
        Refusal::Api(e)
    }
}

impl From<crate::store::StoreError> for Refusal {
    fn from(e: crate::store::StoreError) -> Refusal {
        Refusal::Api(e.into())
    }
}

#[derive(Template)]
#[template(path = "refused.html")]
struct RefusedPage {
    title: String,
    message: String,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let (status, title, message) = match self {
            Refusal::Forged => (
                StatusCode::FORBIDDEN,
                "Refused".to_owned(),
                "This form did not come from this console's own page (its CSRF token or origin \
                 is wrong). Nothing was changed."
                    .to_owned(),
            ),
            Refusal::Scope(scope) => (
                StatusCode::FORBIDDEN,
                "Not allowed".to_owned(),
                format!(
                    "Your token lacks the `{}` scope this page needs.",
                    scope.as_str()
                ),
            ),
            Refusal::Api(e) => {
                let message = e.body()["message"].as_str().unwrap_or_default().to_owned();
                (
                    e.status(),
                    format!("{} ({})", e.status(), e.code()),
                    message,
                )
            }
        };
        let page = RefusedPage { title, message };
        (status, render(&page)).into_response()
    }
}

/// A template as an HTML answer; a template that fails to render (it cannot, short of a bug)
/// is a 500, never a panic.
pub fn render(page: &impl Template) -> Response {
    match page.render() {
        Ok(html) => Html(html).into_response(),
        Err(e) => {
            crate::telemetry::api::request_failed(&e);
            (StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
        }
    }
}

/// Middleware on every console answer: the policy above, no sniffing, no referrer to other
/// sites, and nothing kept in a cache (a page shows what one token may see). `same-origin`
/// rather than `no-referrer`: under the latter a browser sends `Origin: null` even on the
/// console's own forms, and the origin check refuses them. `Server-Timing` says how long the
/// node took to make the answer, for the browser's tools and the benchmark.
pub async fn headers(request: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let mut response = next.run(request).await;
    let took = format!("app;dur={:.3}", started.elapsed().as_secs_f64() * 1000.0);
    let h = response.headers_mut();
    if let Ok(took) = HeaderValue::from_str(&took) {
        h.insert("server-timing", took);
    }
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// Unix milliseconds as RFC 3339 UTC, to the millisecond.
pub fn time(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
}
