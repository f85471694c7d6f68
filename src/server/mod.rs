//! HTTP serving with bounded connections, shared by the admin API and the follower's
//! webhook receiver: at most `max_connections` at once ([`slots`]: per peer, and a reserve),
//! and a bound on every state a connection can be in, so that no client holds a slot for
//! long by going quiet. A client has `header_timeout` to send a request's head (hyper's
//! timer, which also closes idle kept-alive connections); the caller bounds a body and a
//! handler; and a response the client does not read is given `write_timeout` to make
//! progress ([`watched`]). On a stop, open connections get `shutdown_grace` to finish the
//! requests they are in before they are closed.
//!
//! Shaped like `axum::serve` with graceful shutdown, on hyper's HTTP/1 connection directly,
//! because `axum::serve` sets no timer (so hyper's header timeout never runs) and waits for
//! every connection on a stop, however slow its client. Closing a connection drops its
//! handler like a client that goes away: work the API started runs on (see `api::limits`),
//! and the node waits for it after this returns.

pub mod slots;
pub mod watched;

use std::future::Future;
use std::net::SocketAddr;

use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use ipnet::IpNet;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt as _;

use self::slots::{Slot, Slots};
use self::watched::Watched;
use crate::telemetry;

/// How long to wait before accepting again after an error that is not the peer's (out of
/// file descriptors, say): retrying at once would spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How long a connection on a reserved slot has to send its request's head.
const RESERVED_HEADER_TIMEOUT: Duration = Duration::from_secs(1);

/// A server's connection limits.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// Connections served at once, the reserve aside.
    pub max_connections: usize,
    /// Of those, how many one peer address may hold.
    pub max_connections_per_peer: usize,
    /// Connections served beside them, for probes and authenticated requests only.
    pub reserved_connections: usize,
    /// Peers the per-peer cap does not apply to (trusted proxies).
    pub uncapped: Vec<IpNet>,
    /// How long a client has to send a request's head.
    pub header_timeout: Duration,
    /// How long a response may wait on a client that does not read it.
    pub write_timeout: Duration,
    /// How long a stop lets open connections finish.
    pub shutdown_grace: Duration,
}

/// Set on each request of a connection on a reserved slot: the app answers only what must
/// get through when every general slot is taken (probes, authenticated requests) and refuses
/// the rest at once.
#[derive(Debug, Clone, Copy)]
pub struct Reserved;

/// Serve `app` on `listener` until `shutdown` resolves; then stop accepting, let open
/// connections finish within the grace, and close those still open.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Slots::new(
        limits.max_connections,
        limits.max_connections_per_peer,
        limits.reserved_connections,
        limits.uncapped.clone(),
    );
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
        let limits = limits.clone();
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

/// The next connection, once a slot is free for it. One that finds no slot it may take
/// (its peer over the cap, the reserve taken) is closed at once.
async fn accept(listener: &TcpListener, slots: &Slots) -> (TcpStream, SocketAddr, Slot) {
    loop {
        let free = slots.free().await;
        match listener.accept().await {
            Ok((stream, peer)) => match slots.assign(free, peer.ip()) {
                Some(slot) => {
                    // hyper writes what a response has ready in one go: Nagle's algorithm
                    // would only hold the next write (a stream's next event) until the
                    // client's delayed ACK, tens of milliseconds. A peer already gone fails
                    // its first read instead.
                    let _ = stream.set_nodelay(true);
                    return (stream, peer, slot);
                }
                None => telemetry::api::connection_refused(peer.ip()),
            },
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
/// after the one in flight; from `closing`, not even that one. A connection whose response
/// has waited `write_timeout` on its client is closed in any state.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    slot: Slot,
    app: Router,
    limits: ConnectionLimits,
    (finishing, closing): (CancellationToken, CancellationToken),
) {
    let reserved = slot.reserved;
    let _slot = slot;
    // The client address, as `into_make_service_with_connect_info` would set it.
    let app = app.map_request(move |mut request: Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        if reserved {
            request.extensions_mut().insert(Reserved);
        }
        request
    });
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new());
    if reserved {
        http.header_read_timeout(limits.header_timeout.min(RESERVED_HEADER_TIMEOUT))
            .keep_alive(false);
    } else {
        http.header_read_timeout(limits.header_timeout);
    }
    let (stream, clock) = Watched::new(stream);
    let served = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    tokio::pin!(served);
    let stalled = clock.stalled(limits.write_timeout);
    tokio::pin!(stalled);
    tokio::select! {
        ended = served.as_mut() => return log_end(ended),
        () = finishing.cancelled() => served.as_mut().graceful_shutdown(),
        () = &mut stalled => return telemetry::api::connection_stalled(limits.write_timeout),
    }
    tokio::select! {
        ended = served => log_end(ended),
        // Dropping the connection drops its handler, never the work it started.
        () = closing.cancelled() => {}
        () = stalled => telemetry::api::connection_stalled(limits.write_timeout),
    }
}

fn log_end(ended: Result<(), hyper::Error>) {
    if let Err(e) = ended {
        telemetry::api::connection_failed(&e);
    }
}
