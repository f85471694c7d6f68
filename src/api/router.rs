//! The admin API's endpoints, declared once, in a table that both builds the router and lists
//! what it serves.
//!
//! axum cannot list a router's endpoints, so [`admin`] records each `(method, path)` as it
//! adds it; a test compares that list with `openapi/admin-v1.json` both ways, so the
//! document can never describe an endpoint that is not served or miss one that is.

use axum::handler::Handler;
use axum::http::{header, Method};
use axum::response::IntoResponse;
use axum::routing::{self, MethodRouter};
use axum::Router;

use super::{
    audit, backups, events, lifecycle, overrides, quarantine, replay, routes, schemas, sources,
    stores, subject, AppState,
};
use crate::subjects::overrides::Override;
use crate::subjects::quarantine::Quarantine;
use crate::subjects::replay::ReplayJob;

/// Every admin endpoint starts with this.
pub const PREFIX: &str = "/admin/v1";

/// The OpenAPI document of the admin API, kept in the repository.
pub const OPENAPI: &str = include_str!("../../openapi/admin-v1.json");

/// A router under construction and the endpoints added to it.
struct Table {
    router: Router<AppState>,
    endpoints: Vec<(Method, &'static str)>,
}

impl Table {
    fn add<H, T>(
        mut self,
        method: Method,
        path: &'static str,
        handler: H,
        on: fn(H) -> MethodRouter<AppState>,
    ) -> Table
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        self.router = self.router.route(path, on(handler));
        self.endpoints.push((method, path));
        self
    }

    fn get<H: Handler<T, AppState>, T: 'static>(self, path: &'static str, h: H) -> Table {
        self.add(Method::GET, path, h, routing::get::<H, T, AppState>)
    }

    fn post<H: Handler<T, AppState>, T: 'static>(self, path: &'static str, h: H) -> Table {
        self.add(Method::POST, path, h, routing::post::<H, T, AppState>)
    }

    fn put<H: Handler<T, AppState>, T: 'static>(self, path: &'static str, h: H) -> Table {
        self.add(Method::PUT, path, h, routing::put::<H, T, AppState>)
    }

    fn patch<H: Handler<T, AppState>, T: 'static>(self, path: &'static str, h: H) -> Table {
        self.add(Method::PATCH, path, h, routing::patch::<H, T, AppState>)
    }

    fn delete<H: Handler<T, AppState>, T: 'static>(self, path: &'static str, h: H) -> Table {
        self.add(Method::DELETE, path, h, routing::delete::<H, T, AppState>)
    }
}

/// The admin router and the `(method, path)` of every endpoint it serves.
pub fn admin() -> (Router<AppState>, Vec<(Method, &'static str)>) {
    let table = Table {
        router: Router::new(),
        endpoints: Vec::new(),
    }
    .get("/admin/v1/openapi.json", openapi)
    .get("/admin/v1/asyncapi.json", schemas::asyncapi)
    .get("/admin/v1/schemas/{name}", schemas::get)
    .get("/admin/v1/tenants/{tenant}/sources", sources::list)
    .post("/admin/v1/tenants/{tenant}/sources", sources::create)
    .get("/admin/v1/tenants/{tenant}/sources/{id}", sources::get)
    .patch("/admin/v1/tenants/{tenant}/sources/{id}", sources::update)
    .delete("/admin/v1/tenants/{tenant}/sources/{id}", sources::delete)
    .get("/admin/v1/tenants/{tenant}/routes", routes::list)
    .post("/admin/v1/tenants/{tenant}/routes", routes::create)
    .get("/admin/v1/tenants/{tenant}/routes/{id}", routes::get)
    .patch("/admin/v1/tenants/{tenant}/routes/{id}", routes::update)
    .delete("/admin/v1/tenants/{tenant}/routes/{id}", routes::delete)
    .get(
        "/admin/v1/tenants/{tenant}/overrides",
        subject::list::<Override>,
    )
    .get(
        "/admin/v1/tenants/{tenant}/overrides/{key}",
        subject::get::<Override>,
    )
    .put("/admin/v1/tenants/{tenant}/overrides/{key}", overrides::set)
    .delete(
        "/admin/v1/tenants/{tenant}/overrides/{key}",
        overrides::delete,
    )
    .get(
        "/admin/v1/tenants/{tenant}/quarantine",
        subject::list::<Quarantine>,
    )
    .post("/admin/v1/tenants/{tenant}/quarantine", quarantine::add)
    .get(
        "/admin/v1/tenants/{tenant}/quarantine/{id}",
        subject::get::<Quarantine>,
    )
    .delete(
        "/admin/v1/tenants/{tenant}/quarantine/{id}",
        quarantine::remove,
    )
    .get(
        "/admin/v1/tenants/{tenant}/replay-jobs",
        subject::list::<ReplayJob>,
    )
    .post("/admin/v1/tenants/{tenant}/replay-jobs", replay::create)
    .get(
        "/admin/v1/tenants/{tenant}/replay-jobs/{id}",
        subject::get::<ReplayJob>,
    )
    .post(
        "/admin/v1/tenants/{tenant}/replay-jobs/{id}/cancel",
        replay::cancel,
    )
    .get("/admin/v1/audit", audit::list)
    .get("/admin/v1/audit/checkpoint", audit::checkpoint)
    .get("/admin/v1/audit/consistency", audit::consistency)
    .get("/admin/v1/audit/subjects/{resource}", audit::subject)
    .get("/admin/v1/audit/{seq}", audit::get)
    .get("/admin/v1/audit/{seq}/proof", audit::proof)
    .get("/admin/v1/lifecycle", lifecycle::status)
    .get("/admin/v1/lifecycle/events", events::watch)
    .get(
        "/admin/v1/lifecycle/sinks/{sink}/dead-letters",
        lifecycle::list_letters,
    )
    .post(
        "/admin/v1/lifecycle/sinks/{sink}/dead-letters/redrive",
        lifecycle::redrive,
    )
    .delete(
        "/admin/v1/lifecycle/sinks/{sink}/dead-letters/{seq}",
        lifecycle::drop_letter,
    )
    .post("/admin/v1/lifecycle/sinks/{sink}/enable", lifecycle::enable)
    .get("/admin/v1/lifecycle/snapshot", lifecycle::snapshot_status)
    .post("/admin/v1/lifecycle/snapshot", lifecycle::snapshot)
    .post("/admin/v1/backups", backups::create)
    .post("/admin/v1/stores/verify", stores::verify);
    (table.router, table.endpoints)
}

/// The `(method, path)` of every admin endpoint, as served.
pub fn admin_endpoints() -> Vec<(Method, &'static str)> {
    admin().1
}

/// `GET /admin/v1/openapi.json`: the document, public like any API description.
async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI)
}
