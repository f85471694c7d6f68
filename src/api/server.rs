//! The admin server's connections: accept at most `api.max_connections` at once, give each
//! client `api.header_timeout` to send a request's head, and on a stop give open connections
//! `api.shutdown_grace` to finish the requests they are in before closing them.
//!
//! Shaped like `axum::serve` with graceful shutdown, on hyper's HTTP/1 connection directly,
//! because `axum::serve` sets no timer (so hyper's header timeout never runs) and waits for
//! every connection on a stop, however slow its client. A connection slot is taken *before*
//! accepting (as mini-redis does): a connection over the limit waits in the listen queue,
//! is not refused, and is served once a slot is free; an idle kept-alive connection frees
//! its slot after the header timeout, since hyper runs that timer between requests too.
//! Closing a connection drops its handler like a client that goes away: work the API
//! started runs on (see `api::limits`), and the node waits for it after this returns.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt as _;

use crate::config::ApiConfig;
use crate::telemetry;

/// How long to wait before accepting again after an error that is not the peer's (out of
/// file descriptors, say): retrying at once would spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The connection limits of `[api]`.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Connections served at once.
    pub max_connections: usize,
    /// How long a client has to send a request's head.
    pub header_timeout: Duration,
    /// How long a stop lets open connections finish.
    pub shutdown_grace: Duration,
}

impl ConnectionLimits {
    /// The limits `api` sets.
    pub fn of(api: &ApiConfig) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: api.max_connections,
            header_timeout: api.header_timeout,
            shutdown_grace: api.shutdown_grace,
        }
    }
}

/// Serve `app` on `listener` until `shutdown` resolves; then stop accepting, let open
/// connections finish within the grace, and close those still open.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let connections = TaskTracker::new();
    let (finishing, closing) = (CancellationToken::new(), CancellationToken::new());
    tokio::pin!(shutdown);
    loop {
        let (stream, peer, slot) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = accept(&listener, &slots) => accepted,
        };
        let ends = (finishing.clone(), closing.clone());
        connections.spawn(connection(stream, peer, slot, app.clone(), limits, ends));
    }
    // New connections are refused from here on.
    drop(listener);
    finishing.cancel();
    connections.close();
    if tokio::time::timeout(limits.shutdown_grace, connections.wait())
        .await
        .is_err()
    {
        telemetry::api::connections_closed_at_stop(connections.len(), limits.shutdown_grace);
        closing.cancel();
        connections.wait().await;
    }
}

/// The next connection, once a slot is free for it.
async fn accept(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
) -> (TcpStream, SocketAddr, OwnedSemaphorePermit) {
    let slot = slots.clone().acquire_owned().await;
    let slot = slot.expect("the connection semaphore is never closed");
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => return (stream, peer, slot),
            Err(e) if is_peer_error(&e) => {}
            Err(e) => {
                telemetry::api::accept_failed(&e);
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// An error of one connection that went away before it was accepted, not of the listener.
fn is_peer_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    )
}

/// Serve one connection, holding its `slot`, until it closes; from `finishing`, no request
/// after the one in flight; from `closing`, not even that one.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    slot: OwnedSemaphorePermit,
    app: Router,
    limits: ConnectionLimits,
    (finishing, closing): (CancellationToken, CancellationToken),
) {
    let _slot = slot;
    // The client address, as `into_make_service_with_connect_info` would set it.
    let app = app.map_request(move |mut request: Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        request
    });
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let served = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    tokio::pin!(served);
    tokio::select! {
        ended = served.as_mut() => return log_end(ended),
        () = finishing.cancelled() => served.as_mut().graceful_shutdown(),
    }
    tokio::select! {
        ended = served => log_end(ended),
        // Dropping the connection drops its handler, never the work it started.
        () = closing.cancelled() => {}
    }
}

fn log_end(ended: Result<(), hyper::Error>) {
    if let Err(e) = ended {
        telemetry::api::connection_failed(&e);
    }
}
