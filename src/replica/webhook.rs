//! `ankusa follow webhook`: an HTTP receiver for the webhook sink that keeps a replica.
//!
//! Every request is verified (Standard Webhooks, [`signature`](super::signature)) before its
//! body is read as events, and only what the signature covers is read
//! ([`request`](super::request)): 401 for a bad signature or a `webhook-id` that does not
//! name the events, 400 for a body that is not a CloudEvent (structured, binary or batch, as
//! the sink's modes send) or breaks the contract (the sink dead-letters it), and 204 only
//! once the events are applied and the replica file holding them is written and fsynced. A
//! `webhook-id` applied lately ([`seen`](super::seen)) is answered 204 and applied no more.
//! A redelivery after a lost answer is then a duplicate, and a kill -9 before the answer
//! leaves the sink to deliver again: nothing is lost.
//!
//! Writes are grouped: a handler applies its events under the replica's lock, then asks the
//! writer task for a write and waits; the writer takes every request queued, encodes the
//! replica once and writes it once for all of them (what it encodes holds every waiter's
//! events, since each applied before it asked). A write that fails is a 503 (the sink
//! retries).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::CONTENT_LENGTH;
use axum::http::{HeaderMap, StatusCode};
use cloudevents::Event;
use tokio::sync::{mpsc, oneshot, Semaphore};

use super::event::{self, Meaning};
use super::file::{self, ReplicaFile};
use super::metrics::Metrics;
use super::request;
use super::seen::Seen;
use super::signature::{Signed, Verifier};
use super::FollowError;
use crate::server::ConnectionLimits;
use crate::telemetry::follow as telemetry;

/// The largest request body taken (a batch of events).
const BODY_LIMIT: usize = 16 << 20;
/// The most body bytes read at once across every request, before any is authenticated: a
/// request waits for its share (by `content-length`), so unauthenticated clients cannot
/// hold more memory than this whatever they send.
const BODY_BUDGET: usize = 64 << 20;
/// How long a client has to send a body, from the end of its head.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// The receiver's connections: bounded as the admin server's are (see `crate::server`).
fn connection_limits() -> ConnectionLimits {
    ConnectionLimits {
        max_connections: 256,
        max_connections_per_peer: 64,
        reserved_connections: 0,
        uncapped: Vec::new(),
        header_timeout: Duration::from_secs(10),
        write_timeout: Duration::from_secs(10),
        shutdown_grace: Duration::from_secs(10),
    }
}

/// What a webhook follower needs.
#[derive(Clone)]
pub struct WebhookOptions {
    /// The address to listen on (`127.0.0.1:8080`; port 0 for any).
    pub listen: String,
    /// The `whsec_<base64>` secrets a request may be signed with.
    pub secrets: Vec<String>,
    /// The replica file.
    pub out: PathBuf,
}

impl std::fmt::Debug for WebhookOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookOptions")
            .field("listen", &self.listen)
            .field(
                "secrets",
                &format_args!("<{} redacted>", self.secrets.len()),
            )
            .field("out", &self.out)
            .finish()
    }
}

/// A bound webhook follower, ready to [`run`](Server::run).
pub struct Server {
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    writes: mpsc::UnboundedReceiver<oneshot::Sender<bool>>,
}

/// What the handlers and the writer share.
struct Shared {
    verifier: Verifier,
    /// The replica and its (empty) progress; a std mutex: held only to apply or encode,
    /// never across an await.
    file: Mutex<ReplicaFile>,
    path: PathBuf,
    /// Write requests to the writer task, each answered with whether the write succeeded.
    writes: mpsc::UnboundedSender<oneshot::Sender<bool>>,
    metrics: Arc<Metrics>,
    /// The `webhook-id`s applied lately; a std mutex, never held across an await.
    seen: Mutex<Seen>,
    /// Body bytes being read, in bytes ([`BODY_BUDGET`]).
    budget: Semaphore,
}

impl Shared {
    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Server {
    /// Load the replica file and bind the listen address.
    pub async fn bind(
        options: WebhookOptions,
        metrics: Arc<Metrics>,
    ) -> Result<Server, FollowError> {
        let verifier = Verifier::new(&options.secrets).map_err(FollowError::Options)?;
        let loaded = file::load(&options.out)?.unwrap_or_default();
        if let Some(kafka) = &loaded.progress.kafka {
            return Err(FollowError::Mismatch {
                path: options.out,
                found: format!("kafka topic {}", kafka.topic),
                asked: "a webhook".into(),
            });
        }
        metrics.count_subjects(&loaded.replica);
        let listener = tokio::net::TcpListener::bind(&options.listen)
            .await
            .map_err(|source| FollowError::Listen {
                addr: options.listen.clone(),
                source,
            })?;
        let (tx, writes) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            verifier,
            file: Mutex::new(loaded),
            path: options.out,
            writes: tx,
            metrics,
            seen: Mutex::new(Seen::default()),
            budget: Semaphore::new(BODY_BUDGET),
        });
        Ok(Server {
            listener,
            shared,
            writes,
        })
    }

    /// The address bound.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serve until `shutdown`, then finish the requests in flight and write the replica.
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), FollowError> {
        let writer = tokio::spawn(writer(self.shared.clone(), self.writes));
        let app = axum::Router::new()
            .fallback(axum::routing::post(receive))
            .with_state(self.shared.clone());
        crate::server::serve(self.listener, app, connection_limits(), shutdown).await;
        let (done, written) = oneshot::channel();
        let _ = self.shared.writes.send(done);
        let written = written.await.unwrap_or(false);
        writer.abort();
        if !written {
            return Err(FollowError::Unwritten(self.shared.path.clone()));
        }
        Ok(())
    }
}

/// One request: verify, read what the signature covers, apply once, wait for the write.
async fn receive(State(shared): State<Arc<Shared>>, request: Request) -> (StatusCode, String) {
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let signed = Signed {
        id: text("webhook-id"),
        timestamp: text("webhook-timestamp"),
        signature: text("webhook-signature"),
    };
    let now = chrono::Utc::now().timestamp();
    // The headers first: a request that cannot be genuine is refused unread.
    if let Err(refused) = Verifier::check_headers(signed, now) {
        return unauthorized(refused.to_string());
    }
    let body = match read_body(&shared, &headers, body).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    if let Err(refused) = shared.verifier.verify(signed, &body, now) {
        return unauthorized(refused.to_string());
    }
    // Verified, so the id is there.
    let id = signed.id.unwrap_or_default();
    let events = match request::events(&headers, id, &body) {
        Ok(events) => events,
        Err(refused @ request::Refused::Unbound(_)) => return unauthorized(refused.to_string()),
        Err(refused) => return bad_request(&shared, refused.to_string()),
    };
    if shared.seen().contains(id, now) {
        for _ in &events {
            shared.metrics.skipped("duplicate");
        }
        return (StatusCode::NO_CONTENT, String::new());
    }
    let meanings = match events
        .iter()
        .map(event::read)
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(meanings) => meanings,
        Err(e) => return bad_request(&shared, e.to_string()),
    };
    apply(&shared, &events, meanings);
    let (done, written) = oneshot::channel();
    if shared.writes.send(done).is_err() || !written.await.unwrap_or(false) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "replica file write failed\n".into(),
        );
    }
    // Only once written: a request answered 503 is applied again when the sink retries.
    shared.seen().insert(id, now);
    (StatusCode::NO_CONTENT, String::new())
}

/// The body of a request, within the limits: its `content-length` known and at most
/// [`BODY_LIMIT`], its share of [`BODY_BUDGET`] taken while it is read, all of it in within
/// [`BODY_TIMEOUT`].
async fn read_body(
    shared: &Shared,
    headers: &HeaderMap,
    body: Body,
) -> Result<Bytes, (StatusCode, String)> {
    let refuse = |status: StatusCode, text: &str| Err((status, format!("{text}\n")));
    let length = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let Some(length) = length else {
        return refuse(StatusCode::LENGTH_REQUIRED, "content-length is required");
    };
    if length > BODY_LIMIT {
        return refuse(StatusCode::PAYLOAD_TOO_LARGE, "the body is over 16 MiB");
    }
    let reading = async {
        let share = u32::try_from(length).unwrap_or(u32::MAX);
        let _held = shared.budget.acquire_many(share).await;
        axum::body::to_bytes(body, length).await
    };
    match tokio::time::timeout(BODY_TIMEOUT, reading).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(_)) => refuse(StatusCode::BAD_REQUEST, "the body is not as long as said"),
        Err(_) => refuse(
            StatusCode::REQUEST_TIMEOUT,
            "the body did not arrive within 10 s",
        ),
    }
}

fn unauthorized(reason: String) -> (StatusCode, String) {
    telemetry::request_refused(&reason);
    (
        StatusCode::UNAUTHORIZED,
        format!("signature refused: {reason}\n"),
    )
}

fn bad_request(shared: &Shared, message: String) -> (StatusCode, String) {
    shared.metrics.skipped("invalid");
    telemetry::request_invalid(&message);
    (StatusCode::BAD_REQUEST, message + "\n")
}

/// Apply a request's events under the replica's lock.
fn apply(shared: &Shared, events: &[Event], meanings: Vec<Meaning>) {
    let mut file = shared.file.lock().unwrap_or_else(|p| p.into_inner());
    for (event, meaning) in events.iter().zip(meanings) {
        let effect = file.replica.apply(meaning);
        shared.metrics.applied(&effect, super::event_time_ms(event));
    }
}

/// The writer task: one write for every request queued, then every waiter answered.
async fn writer(shared: Arc<Shared>, mut writes: mpsc::UnboundedReceiver<oneshot::Sender<bool>>) {
    while let Some(first) = writes.recv().await {
        let mut waiters = vec![first];
        while let Ok(more) = writes.try_recv() {
            waiters.push(more);
        }
        let ok = write(&shared).await;
        for waiter in waiters {
            let _ = waiter.send(ok);
        }
    }
}

/// Encode the replica under its lock and write it off the runtime.
async fn write(shared: &Arc<Shared>) -> bool {
    let started = Instant::now();
    let (bytes, counts) = {
        let file = shared.file.lock().unwrap_or_else(|p| p.into_inner());
        (file::encode(&file), file.replica.counts())
    };
    let path = shared.path.clone();
    let len = bytes.len();
    match crate::store::blocking::run("the replica file's write", move || {
        file::write(&path, &bytes)
    })
    .await
    {
        Ok(Ok(())) => {
            shared
                .metrics
                .written(len, started.elapsed().as_secs_f64(), counts);
            true
        }
        Ok(Err(e)) => {
            telemetry::file_write_failed(&e);
            false
        }
        Err(e) => {
            telemetry::file_write_failed(&e);
            false
        }
    }
}
