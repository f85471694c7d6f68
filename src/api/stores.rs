//! `POST /admin/v1/stores/verify`: run the drift check of every shared store now (see
//! `subjects::remote::drift`), rather than at its next `verify_interval`.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::auth::{AdminWrite, Authorized};
use super::error::ApiError;
use super::AppState;
use crate::subjects::remote::drift::Verifiable;
use crate::subjects::remote::RemoteStore;

/// `POST /admin/v1/stores/verify` (scope `admin:write`: a drift found is adopted in the store
/// and published): 200 with one report per kind kept in Redis (`kinds`: empty when none is),
/// each with the subjects scanned, those found drifted and those published. Each drift
/// leaves its system rows, as found by the periodic check. Runs to the end even if the client
/// goes away. 503 `store_unavailable` when a store cannot be read or a row written.
pub async fn verify(
    _: Authorized<AdminWrite>,
    State(state): State<AppState>,
) -> Result<Json<Value>, ApiError> {
    let mut kinds: Vec<Arc<dyn Verifiable>> = Vec::new();
    if shared(state.routes.store().as_ref()) {
        kinds.push(Arc::new(state.routes.remote().clone()));
    }
    if let Some(sources) = &state.sources {
        kinds.push(Arc::new(sources.remote().clone()));
    }
    let reports = state
        .finish(async move {
            let mut reports = Vec::with_capacity(kinds.len());
            for kind in kinds {
                reports.push(kind.verify().await?);
            }
            Ok::<_, ApiError>(reports)
        })
        .await?;
    Ok(Json(json!({ "kinds": reports })))
}

/// Whether a store is shared (Redis), where subjects can change around the node.
fn shared<T: crate::subjects::remote::RemoteSubject>(store: &dyn RemoteStore<T>) -> bool {
    store.kind() == "redis"
}
