//! The admin API's log events, each defined once here with low-cardinality structured
//! fields, and its one metric: the connections its server closed before their client did.
//!
//! None of them takes a header, a body or a token: only a method, a path, a status, a
//! request id, a token *name* and a scope. That is what keeps tokens and secrets out of the
//! logs: there is no event that could carry one.

use std::fmt::Display;
use std::net::IpAddr;
use std::path::Path;
use std::sync::LazyLock;
use std::time::Duration;

use axum::http::{Method, StatusCode};
use prometheus::IntCounterVec;

use super::counter_vec;

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

/// A console form or request was refused as forged: no CSRF token of its session, or sent
/// from another site.
pub fn console_forged() {
    tracing::warn!(target: "ankusa::api", "console request refused: forged (CSRF or origin)");
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

/// A request took longer than `api.request_timeout`: its client got 503 (the work it started
/// goes on).
pub fn request_timed_out(limit: Duration) {
    tracing::warn!(
        target: "ankusa::api",
        limit_ms = limit.as_millis() as u64,
        "request timed out; its client was answered 503, work it started goes on"
    );
}

/// A backup was asked for while one was under way, and refused.
pub fn backup_refused_busy() {
    tracing::info!(target: "ankusa::api", "backup refused: one is under way");
}

/// The admin server could not accept a connection (it retries shortly).
pub fn accept_failed(error: &dyn Display) {
    tracing::error!(target: "ankusa::api", error = %error, "accepting a connection failed");
}

/// A connection ended with an error: a header timeout, a malformed request, a client gone.
pub fn connection_failed(error: &dyn Display) {
    tracing::debug!(target: "ankusa::api", error = %error, "connection ended with an error");
}

/// Connections the server closed itself, by reason: `refused` (no slot its peer may take),
/// `stalled` (a response its client did not read), `busy` (an unauthenticated request on a
/// reserved slot).
static CLOSED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "api_connections_closed_total",
        "Connections the server closed before their client did, by reason",
        &["reason"],
    )
});

/// A connection was closed on accept: its peer holds all the slots it may, and the reserve
/// is taken.
pub fn connection_refused(peer: IpAddr) {
    CLOSED.with_label_values(&["refused"]).inc();
    tracing::debug!(target: "ankusa::api", %peer, "connection refused: its peer holds every slot it may");
}

/// A connection was closed because its response waited `limit` on a client not reading it.
pub fn connection_stalled(limit: Duration) {
    CLOSED.with_label_values(&["stalled"]).inc();
    tracing::info!(
        target: "ankusa::api",
        limit_ms = limit.as_millis() as u64,
        "connection closed: its client did not read the response"
    );
}

/// A request on a reserved slot was neither a probe nor authenticated: refused, and its
/// connection closed.
pub fn reserved_refused() {
    CLOSED.with_label_values(&["busy"]).inc();
    tracing::debug!(target: "ankusa::api", "request refused on a reserved connection slot");
}

/// Touch every metric, so that a test sees each family exported.
#[cfg(test)]
pub(super) fn touch_every_metric() {
    connection_stalled(Duration::from_secs(1));
}

/// A stop closed connections still open after `api.shutdown_grace`.
pub fn connections_closed_at_stop(connections: usize, grace: Duration) {
    tracing::warn!(
        target: "ankusa::api",
        connections,
        grace_ms = grace.as_millis() as u64,
        "closed connections still open after the shutdown grace"
    );
}
