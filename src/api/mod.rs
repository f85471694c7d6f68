//! The node's HTTP surface: health, readiness and metrics now; the admin API under
//! `/admin/v1` slots in as its own router.
//!
//! Handlers never touch RocksDB on a tokio worker directly: reads go through
//! `spawn_blocking` helpers of the trail, writes through the writer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use crate::audit::Trail;
use crate::telemetry;

/// What every handler can reach.
#[derive(Clone, Debug)]
pub struct AppState {
    /// The audit trail (and through it, the store).
    pub trail: Trail,
    /// Whether the node has finished booting and takes changes.
    pub ready: Arc<AtomicBool>,
}

/// The whole HTTP router.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// Liveness: the process serves HTTP.
async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

/// Readiness: booted, and the writer is taking changes.
async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    if state.ready.load(Ordering::Acquire) {
        let seq = *state.trail.committed().borrow();
        (
            StatusCode::OK,
            Json(json!({"status": "ready", "audit_seq": seq})),
        )
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "starting"})),
        )
    }
}

/// Prometheus metrics.
async fn metrics() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        telemetry::render(),
    )
}
