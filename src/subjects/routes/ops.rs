//! Route changes and reads: the handle the API uses. A change reads the route from the store,
//! checks the input and `If-Match` (refused: no row, as for every subject), then is a dual
//! write (`remote::Remote::write`).

use std::sync::Arc;

use serde_json::Map;

use super::{NewRoute, Route, RoutePatch, RouteStore};
use crate::audit::{Context, Trail};
use crate::subjects::key::check_name;
use crate::subjects::remote::Remote;
use crate::subjects::{ChangeResult, IfMatch};

/// The route store and the trail its changes are recorded in.
#[derive(Debug, Clone)]
pub struct Routes(Remote<Route>);

impl Routes {
    /// Routes kept in `store`, their changes recorded in `trail`.
    pub fn new(store: Arc<RouteStore>, trail: Trail) -> Routes {
        Routes(Remote::new(store, trail))
    }

    /// The route store.
    pub fn store(&self) -> &Arc<RouteStore> {
        self.0.store()
    }

    /// The remote-subject handle underneath (its gate, and the refresh after a restore).
    pub fn remote(&self) -> &Remote<Route> {
        &self.0
    }

    /// Create route `input.id` of `tenant` (`route.create`); `Exists` if it is there.
    pub async fn create(&self, ctx: Context, tenant: String, input: NewRoute) -> ChangeResult {
        check_name("tenant", &tenant)?;
        input.check()?;
        self.0.absent(&tenant, &input.id).await?;
        let mut detail = Map::new();
        detail.insert("filter_keys".into(), input.filter.len().into());
        let route = Route {
            id: input.id,
            tenant,
            source: input.source,
            destination: input.destination,
            filter: input.filter,
            enabled: input.enabled,
            revision: 1,
        };
        self.0.write(ctx, "create", None, Some(route), detail).await
    }

    /// Apply `patch` to route `id` of `tenant` (`route.update`). A patch that changes
    /// nothing writes no row.
    pub async fn update(
        &self,
        ctx: Context,
        tenant: String,
        id: String,
        patch: RoutePatch,
        if_match: Option<IfMatch>,
    ) -> ChangeResult {
        check_name("tenant", &tenant)?;
        check_name("id", &id)?;
        patch.check()?;
        let before = self.0.current(&tenant, &id, if_match).await?;
        let (mut after, fields) = patch.apply(&before.subject);
        if fields == 0 {
            return Remote::unchanged(&before.subject);
        }
        after.revision = before.subject.revision + 1;
        let mut detail = Map::new();
        detail.insert("fields".into(), fields.into());
        self.0
            .write(ctx, "update", Some(before), Some(after), detail)
            .await
    }

    /// Delete route `id` of `tenant` (`route.delete`).
    pub async fn delete(
        &self,
        ctx: Context,
        tenant: String,
        id: String,
        if_match: Option<IfMatch>,
    ) -> ChangeResult {
        self.0.delete(ctx, &tenant, &id, if_match).await
    }
}
