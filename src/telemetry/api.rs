//! The admin API's log events, each defined once here with low-cardinality structured
//! fields. The API has no metrics of its own.
//!
//! None of them takes a header, a body or a token: only a method, a path, a status, a
//! request id, a token *name* and a scope. That is what keeps tokens and secrets out of the
//! logs: there is no event that could carry one.

use std::fmt::Display;
use std::path::Path;
use std::time::Duration;

use axum::http::{Method, StatusCode};

use crate::config::Scope;

/// One request answered.
pub fn request_served(
    method: &Method,
    path: &str,
    status: StatusCode,
    request_id: &str,
    elapsed: Duration,
) {
    tracing::info!(
        target: "ankusa::api",
        method = %method,
        path,
        status = status.as_u16(),
        request_id,
        elapsed_ms = elapsed.as_secs_f64() * 1000.0,
        "admin request"
    );
}

/// A request without a valid token (`reason` says which way it failed).
pub fn request_unauthenticated(reason: &'static str, request_id: Option<&str>) {
    tracing::warn!(target: "ankusa::api", reason, request_id, "request refused: no valid token");
}

/// A valid token without the scope a route needs.
pub fn request_forbidden(actor: &str, scope: Scope, request_id: Option<&str>) {
    tracing::warn!(
        target: "ankusa::api",
        actor,
        scope = scope.as_str(),
        request_id,
        "request refused: missing scope"
    );
}

/// Something failed that the caller only sees as a 500 or 503.
pub fn request_failed(error: &dyn Display) {
    tracing::error!(target: "ankusa::api", error = %error, "admin API request failed");
}

/// The node made its first-start admin token (the token itself goes to stdout only).
pub fn admin_token_created(digest_file: &Path) {
    tracing::info!(
        target: "ankusa::api",
        digest_file = %digest_file.display(),
        "created the first-start admin token; only its digest is kept"
    );
}

/// The node uses the first-start admin token of an earlier start.
pub fn admin_token_loaded(digest_file: &Path) {
    tracing::info!(
        target: "ankusa::api",
        digest_file = %digest_file.display(),
        "no api.tokens configured; using the first-start admin token"
    );
}
