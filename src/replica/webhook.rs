//! `ankusa follow webhook`: an HTTP receiver for the webhook sink that keeps a replica.
//!
//! Every request is verified (Standard Webhooks, [`signature`](super::signature)) before its
//! body is read as events: 401 for a bad signature, 400 for a body that is not a CloudEvent
//! (structured, binary or batch, as the sink's modes send) or breaks the contract (the sink
//! dead-letters it), and 204 only once the events are applied and the replica file holding
//! them is written and fsynced. A redelivery after a lost answer is then stale, and a kill -9
//! before the answer leaves the sink to deliver again: nothing is lost.
//!
//! Writes are grouped: a handler applies its events under the replica's lock, then asks the
//! writer task for a write and waits; the writer takes every request queued, encodes the
//! replica once and writes it once for all of them (what it encodes holds every waiter's
//! events, since each applied before it asked). A write that fails is a 503 (the sink
//! retries).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use cloudevents::Event;
use tokio::sync::{mpsc, oneshot};

use super::event::{self, Meaning};
use super::file::{self, ReplicaFile};
use super::metrics::Metrics;
use super::signature::{Signed, Verifier};
use super::FollowError;

/// The largest request body taken (a batch of events).
const BODY_LIMIT: usize = 16 << 20;

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
        metrics.held(&loaded.replica);
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
            .layer(DefaultBodyLimit::max(BODY_LIMIT))
            .with_state(self.shared.clone());
        let served = axum::serve(self.listener, app)
            .with_graceful_shutdown(shutdown)
            .await;
        let (done, written) = oneshot::channel();
        let _ = self.shared.writes.send(done);
        let written = written.await.unwrap_or(false);
        writer.abort();
        served.map_err(|source| FollowError::Listen {
            addr: "the webhook listener".into(),
            source,
        })?;
        if !written {
            return Err(FollowError::Unwritten(self.shared.path.clone()));
        }
        Ok(())
    }
}

/// One request: verify, read, apply, wait for the write.
async fn receive(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let signed = Signed {
        id: text("webhook-id"),
        timestamp: text("webhook-timestamp"),
        signature: text("webhook-signature"),
    };
    let now = chrono::Utc::now().timestamp();
    if let Err(refused) = shared.verifier.verify(signed, &body, now) {
        tracing::warn!(reason = %refused, "follow webhook request refused");
        return (
            StatusCode::UNAUTHORIZED,
            format!("signature refused: {refused}\n"),
        );
    }
    let events = match events(&headers, &body) {
        Ok(events) => events,
        Err(e) => return bad_request(&shared, format!("not a CloudEvent: {e}")),
    };
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
    (StatusCode::NO_CONTENT, String::new())
}

fn bad_request(shared: &Shared, message: String) -> (StatusCode, String) {
    shared.metrics.skipped("invalid");
    tracing::warn!(error = %message, "follow webhook request is not an event of the contract");
    (StatusCode::BAD_REQUEST, message + "\n")
}

/// The events of a request body: a batch (`application/cloudevents-batch+json`), else one
/// event in structured or binary mode.
fn events(headers: &HeaderMap, body: &Bytes) -> Result<Vec<Event>, String> {
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if content_type.starts_with("application/cloudevents-batch+json") {
        return serde_json::from_slice(body).map_err(|e| e.to_string());
    }
    cloudevents::binding::http::to_event(headers, body.to_vec())
        .map(|event| vec![event])
        .map_err(|e| e.to_string())
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
    match tokio::task::spawn_blocking(move || file::write(&path, &bytes)).await {
        Ok(Ok(())) => {
            shared
                .metrics
                .written(len, started.elapsed().as_secs_f64(), counts);
            true
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "replica file write failed");
            false
        }
        Err(e) => {
            tracing::error!(error = %e, "replica file write task failed");
            false
        }
    }
}
