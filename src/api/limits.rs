//! The admin API's time limits on one request, from the end of its head: its body must be
//! in by `api.body_timeout` (408 `body_timeout`), its answer ready by `api.request_timeout`
//! (503 `request_timeout`). The time to send the head itself is the server's
//! (`api::server`), and so are the limits on connections.
//!
//! The request timeout drops the handler's future, exactly as a client that goes away
//! does, so it can only drop a wait, never half a change: a commit is the writer's once it is
//! submitted (the row and its effect are one batch), a dual write runs in a task of its own
//! from its pending row to its trail row, and the work of [`super::AppState::finish`] (a
//! backup, a sink's enable) runs to the end in the node's tracker. What the client hears is
//! a 503 that says so.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::time::Instant;

use super::error::ApiError;
use crate::telemetry;

/// The time limits of every request (`[api]`).
#[derive(Debug, Clone, Copy)]
pub struct RequestLimits {
    /// From the end of the head to the end of the body.
    pub body_timeout: Duration,
    /// From the end of the head to the answer.
    pub request_timeout: Duration,
}

/// When a request's body must be in, set for the body extractors (`api::extract`).
#[derive(Debug, Clone, Copy)]
pub struct BodyDeadline(pub Instant);

/// Middleware: set the body's deadline, and answer 503 `request_timeout` for a request
/// that takes longer than `api.request_timeout`.
pub async fn deadlines(
    State(limits): State<RequestLimits>,
    mut request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    request
        .extensions_mut()
        .insert(BodyDeadline(started + limits.body_timeout));
    let answer = async {
        stalled_handler().await;
        next.run(request).await
    };
    match tokio::time::timeout(limits.request_timeout, answer).await {
        Ok(response) => response,
        Err(_) => {
            telemetry::api::request_timed_out(limits.request_timeout);
            ApiError::RequestTimeout.into_response()
        }
    }
}

/// Failpoint `api::handler` (`return(<ms>)`): hold the handler that long, without blocking
/// the thread, as a slow store or a closed gate would.
async fn stalled_handler() {
    if let Some(ms) = handler_hold_ms() {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

fn handler_hold_ms() -> Option<u64> {
    fail::fail_point!("api::handler", |ms| ms.and_then(|ms| ms.parse().ok()));
    None
}
