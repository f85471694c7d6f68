//! Routes in the pluggable route store (memory, and a real redis-server started here), and the
//! trail's second way in: pending rows, their finish, and their settlement (a dropped
//! `Pending`, a crash at each named point of the dual write, Redis down at boot, a concurrent
//! change before settlement, two nodes sharing one Redis).
//!
//! This module holds the helpers its cases share; the crash of a process at each named
//! point of the dual write is in `crash::routes`.

pub(crate) mod api;
mod config;
mod fleet;
pub(crate) mod sentinel;
pub(crate) mod settle;
pub(crate) mod sources_redis;
mod stores;
mod versions;
mod versions_props;

use crate::support::eventually;
use std::sync::Arc;
use std::time::Duration;

use ankusa::audit::{pending_rows, Row, SettleOptions, Stamp, State, Trail};
use ankusa::store::{keys, Cf, Store, StoreError};
use ankusa::subjects::remote::redis::RedisStore;
use ankusa::subjects::remote::{Cas, Found, RemoteStore, Versioned};
use ankusa::subjects::routes::{NewRoute, Route, RouteStore, Routes};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// A Redis route store on `url` with the default prefix.
pub fn redis_store(url: &str) -> Arc<RouteStore> {
    Arc::new(RedisStore::<Route>::new(url, "ankusa:", Duration::from_secs(2)).expect("redis store"))
}

/// Routes on a store with settlement running; [`Settling::stop`] ends the settlement task (it
/// holds the trail, and with it the store's lock).
pub struct Settling {
    /// The routes handle (same store as the reconciler's).
    pub routes: Routes,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Settling {
    /// Stop settling and wait for the task to end.
    pub async fn stop(self) {
        self.stop.cancel();
        self.task.await.expect("settlement task");
    }
}

/// `routes` of `store` recorded in `trail`, with settlement running (`interval`, `window`).
pub fn settling(
    trail: &Trail,
    store: Arc<RouteStore>,
    interval: Duration,
    window: Duration,
) -> Settling {
    let routes = Routes::new(store, trail.clone());
    let stop = CancellationToken::new();
    let task = trail
        .start_settlement(
            routes.remote().reconcilers(),
            SettleOptions { interval, window },
            stop.clone(),
        )
        .expect("settlement starts once");
    Settling { routes, stop, task }
}

/// Wait (up to `limit`) until the store holds no pending row.
pub async fn wait_settled(store: &Store, limit: Duration) {
    let settled = async || pending_rows(store).expect("pending rows").is_empty();
    eventually("no pending row", limit, settled).await;
}

/// The rows of `routes/<id>`, in seq order.
pub fn route_rows(store: &Store, id: &str) -> Vec<Row> {
    crate::support::trail::all_rows(store)
        .into_iter()
        .filter(|r| r.resource == format!("routes/{id}"))
        .collect()
}

/// The outbox entity of row `seq`.
pub fn entity(store: &Store, seq: u64) -> Option<Value> {
    store
        .get(Cf::Audit, &keys::outbox_key(seq))
        .expect("read outbox")
        .map(|v| serde_json::from_slice(&v).expect("entity JSON"))
}

/// Route `r1` of tenant `t1` to `destination` at `revision`, as a store takes it.
pub fn r1(destination: &str, revision: u64) -> Route {
    Route {
        id: "r1".into(),
        tenant: "t1".into(),
        source: "s1".into(),
        destination: destination.into(),
        filter: Default::default(),
        enabled: true,
        revision,
    }
}

/// A new route `id` of tenant `t1` to `destination`.
pub fn new_route(id: &str, destination: &str) -> NewRoute {
    NewRoute {
        id: id.into(),
        source: "s1".into(),
        destination: destination.into(),
        filter: Default::default(),
        enabled: true,
    }
}

/// A route store whose next read, once armed, answers only when released: the window in
/// which another change lands between a read and what the reader does with it. Its next
/// write can be held the same way, before it is made: a change in the middle of its apply.
#[derive(Debug)]
pub struct PausedStore {
    inner: Arc<RouteStore>,
    armed: std::sync::atomic::AtomicBool,
    armed_write: std::sync::atomic::AtomicBool,
    reached: tokio::sync::Notify,
    go: tokio::sync::Notify,
}

impl PausedStore {
    /// `inner`, nothing paused until [`PausedStore::arm`] or [`PausedStore::arm_write`].
    pub fn new(inner: Arc<RouteStore>) -> PausedStore {
        PausedStore {
            inner,
            armed: Default::default(),
            armed_write: Default::default(),
            reached: Default::default(),
            go: Default::default(),
        }
    }

    /// Hold the next read.
    pub fn arm(&self) {
        self.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Hold the next write (`put`), before it is made.
    pub fn arm_write(&self) {
        self.armed_write
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Wait until the held read has read (or the held write is reached).
    pub async fn reached(&self) {
        self.reached.notified().await;
    }

    /// Let the held read answer (or the held write go on).
    pub fn release(&self) {
        self.go.notify_one();
    }

    async fn hold_if(&self, armed: &std::sync::atomic::AtomicBool) {
        if armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
            self.reached.notify_one();
            self.go.notified().await;
        }
    }
}

#[async_trait::async_trait]
impl RemoteStore<Route> for PausedStore {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    async fn tenants(&self) -> Result<Vec<String>, StoreError> {
        self.inner.tenants().await
    }
    async fn get(&self, tenant: &str, id: &str) -> Result<Found<Route>, StoreError> {
        let found = self.inner.get(tenant, id).await;
        self.hold_if(&self.armed).await;
        found
    }
    async fn list(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Versioned<Route>>, StoreError> {
        self.inner.list(tenant, after, limit).await
    }
    async fn version(&self) -> Result<Stamp, StoreError> {
        self.inner.version().await
    }
    async fn put(
        &self,
        route: Route,
        state: Option<State>,
        expected: Option<u64>,
    ) -> Result<Cas, StoreError> {
        self.hold_if(&self.armed_write).await;
        self.inner.put(route, state, expected).await
    }
    async fn delete(&self, tenant: &str, id: &str, expected: u64) -> Result<Cas, StoreError> {
        self.inner.delete(tenant, id, expected).await
    }
}
