//! The node's HTTP surface: health, readiness and metrics, and the admin API under
//! `/admin/v1` (the router table in `router.rs`, one file per resource).
//!
//! Handlers never touch RocksDB on a tokio worker directly: reads go through
//! `spawn_blocking`, writes through the trail's writer. Every error becomes a response in
//! one place (`error.rs`), and every response, errors included, echoes the request id
//! (`context.rs`). The server has limits of its own: on connections and the time to send a
//! request's head (`server.rs`), on the time to send its body and to answer it
//! (`limits.rs`), and one backup at a time (`backups.rs`).

pub mod audit;
pub mod audit_export;
pub mod auth;
pub mod backups;
pub mod context;
pub mod error;
pub mod events;
pub mod extract;
pub mod lifecycle;
pub mod limits;
pub mod overrides;
pub mod quarantine;
pub mod replay;
pub mod router;
pub mod routes;
pub mod schemas;
pub mod sources;
pub mod stores;
pub mod subject;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{middleware, Json, Router};
use serde_json::json;

use crate::audit::Trail;
use crate::config::{ApiConfig, TrustedProxy};
use crate::telemetry;
use auth::{TokenSetupError, Tokens};
use error::ApiError;

/// What every handler can reach: one allocation shared by every request, so that the
/// extractors' clones of it are one reference count each.
#[derive(Clone, Debug)]
pub struct AppState(Arc<Shared>);

impl AppState {
    /// The state of a node serving `shared`.
    pub fn new(shared: Shared) -> AppState {
        AppState(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The node's parts the API serves, behind [`AppState`].
#[derive(Debug)]
pub struct Shared {
    /// The audit trail (and through it, the store).
    pub trail: Trail,
    /// Whether the node has finished booting and takes changes.
    pub ready: Arc<AtomicBool>,
    /// The admin API's tokens and settings.
    pub admin: Arc<AdminState>,
    /// Whether changes are flagged for lifecycle events (`lifecycle.enabled`).
    pub flagging: bool,
    /// The watchers of the lifecycle events over HTTP.
    pub watch: crate::lifecycle::watch::Watch,
    /// The lifecycle publisher, when sinks are configured (whether or not changes are still
    /// flagged: it delivers what the outbox holds).
    pub lifecycle: Option<Arc<crate::lifecycle::Publisher>>,
    /// Where `POST /admin/v1/backups` puts backups (`node.backup_dir`).
    pub backup_dir: std::path::PathBuf,
    /// The route store, and the trail its changes are recorded in.
    pub routes: crate::subjects::routes::Routes,
    /// The sources' Redis store when `[sources] store = "redis"` (`None`: they are local).
    pub sources: Option<crate::subjects::sources_remote::RemoteSources>,
    /// Snapshots of the routes and sources.
    pub snapshots: crate::subjects::snapshot::Snapshots,
    /// The kinds whose shared store lost data and is not yet snapshotted again (`/readyz`).
    pub losses: crate::subjects::remote::loss::Losses,
    /// Work a request started that must end with its row even if its client goes away
    /// ([`AppState::finish`]); the node waits for it before it stops the writer.
    pub work: tokio_util::task::TaskTracker,
    /// The one backup under way: kept by its work, so that a second one is refused (409)
    /// rather than queued behind it on the blocking pool.
    pub backing_up: Arc<tokio::sync::Semaphore>,
    /// The console's sessions and history, when it is served (`api.console`).
    pub console: Option<Arc<crate::console::Console>>,
}

impl Shared {
    /// Run `work` in a task of its own, to the end, and wait for it: a client that goes away
    /// drops the handler, never the change (whose row and effect then go together).
    pub async fn finish<T: Send + 'static>(
        &self,
        work: impl std::future::Future<Output = Result<T, ApiError>> + Send + 'static,
    ) -> Result<T, ApiError> {
        self.work.spawn(work).await?
    }
}

/// The admin API's settings, fixed at start.
#[derive(Debug, Clone)]
pub struct AdminState {
    /// The tokens it accepts.
    pub tokens: Tokens,
    /// Peers whose `X-Forwarded-For` it believes.
    pub trusted_proxies: Vec<TrustedProxy>,
    /// The largest request body it reads.
    pub body_limit: usize,
    /// How long a request's body and its answer may take.
    pub limits: limits::RequestLimits,
}

impl AdminState {
    /// The settings of `[api]`; with no token configured, the first-start admin token of
    /// `data_dir` (made, and printed once on `out`, if there is none yet).
    pub fn new(
        api: &ApiConfig,
        data_dir: &Path,
        out: &mut dyn std::io::Write,
    ) -> Result<AdminState, TokenSetupError> {
        Ok(AdminState {
            tokens: Tokens::load_or_create(&api.tokens, data_dir, out)?,
            trusted_proxies: api.trusted_proxies.clone(),
            body_limit: api.body_limit,
            limits: limits::RequestLimits {
                body_timeout: api.body_timeout,
                request_timeout: api.request_timeout,
            },
        })
    }
}

/// The whole HTTP router.
pub fn router(state: AppState) -> Router {
    let (admin, _) = router::admin();
    let console = match state.console {
        Some(_) => crate::console::router(),
        None => Router::new(),
    };
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .merge(admin)
        .merge(console)
        .fallback(no_endpoint)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(state.admin.body_limit))
        // Inside the request id: a timed-out request's answer echoes its id and is logged.
        .layer(middleware::from_fn_with_state(
            state.admin.limits,
            limits::deadlines,
        ))
        // Outside the deadlines: a refused request costs no handler.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::reserved_slots,
        ))
        // Inside the request id, which the request's span names.
        .layer(middleware::from_fn(context::trace))
        .layer(middleware::from_fn(context::request_id))
        .with_state(state)
}

async fn no_endpoint() -> ApiError {
    ApiError::NoEndpoint
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

/// Liveness: the process serves HTTP.
async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

/// Readiness: booted, and the writer is taking changes.
async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    if !state.trail.is_taking_changes() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "writer_stopped"})),
        );
    }
    let lost = state.losses.pending();
    if !lost.is_empty() {
        // Until the snapshot that tells consumers the present has finished.
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "store_lost", "kinds": lost})),
        );
    }
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

/// Prometheus metrics. Each sink's lag and state are reported as of the scrape, not as of
/// its last confirmation.
async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    if let Some(publisher) = state.lifecycle.as_deref() {
        publisher.report_metrics();
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        telemetry::render(),
    )
}
