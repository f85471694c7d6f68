//! The console: a few server-rendered pages over the trail, the sinks and the snapshots, at
//! `/console/` on the admin server (`api.console`; see docs/console.md).
//!
//! Pages are askama templates (`templates/console/`), compiled into the binary with the
//! stylesheet and the one script (`assets/`): nothing is fetched at run time, and the
//! Content-Security-Policy allows nothing else. Every page reads without JavaScript; the
//! script only runs Verify, which checks a row's inclusion proof and its checkpoint's
//! signature in the browser (WebCrypto) against a key the operator pinned there.
//!
//! A page asks for the scope its API endpoint would (`session::Signed<S>`), reads through the
//! same code, and an action writes its row through the same function as its endpoint.

pub mod delivery;
pub mod history;
pub mod page;
pub mod session;
pub mod trail;

use axum::http::{header, HeaderValue};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{middleware, Router};

use crate::api::AppState;

/// The console's state on a node that serves it.
#[derive(Debug, Default)]
pub struct Console {
    /// Signed-in browsers.
    pub sessions: session::Sessions,
    /// The sinks' last hour.
    pub history: std::sync::Arc<history::History>,
}

const STYLE: &str = include_str!("assets/console.css");
const VERIFY: &str = include_str!("assets/verify.js");

/// The console's routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console", get(trail::home))
        .route("/console/", get(trail::home))
        .route("/console/login", get(trail::login_page).post(trail::login))
        .route("/console/logout", post(trail::logout))
        .route("/console/trail", get(trail::trail))
        .route("/console/trail/{seq}", get(trail::row))
        .route("/console/subject", get(trail::subject))
        .route("/console/delivery", get(delivery::delivery))
        .route("/console/delivery/{sink}/enable", post(delivery::enable))
        .route("/console/delivery/{sink}/redrive", post(delivery::redrive))
        .route("/console/snapshots", get(delivery::snapshots))
        .route("/console/assets/console.css", get(style))
        .route("/console/assets/verify.js", get(verify))
        .layer(middleware::from_fn(page::headers))
}

async fn style() -> impl IntoResponse {
    asset("text/css; charset=utf-8", STYLE)
}

async fn verify() -> impl IntoResponse {
    asset("text/javascript; charset=utf-8", VERIFY)
}

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            // Built into this binary: the same for as long as it runs.
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("private, max-age=3600"),
            ),
        ],
        body,
    )
}
