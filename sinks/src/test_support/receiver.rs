//! A real webhook receiver for tests and benchmarks: axum on `127.0.0.1:0`, answering
//! whatever the test tells it to, switchable mid-test.
//!
//! It records every request's headers and body, and apart from them the `(ce-id,
//! ce-sequence)` of every binary-mode event it accepted (answered 2xx). Given a key, it verifies every
//! request's Standard Webhooks signature with its own HMAC code (not the sink's) and answers
//! 401 to a bad one. A benchmark's receiver records nothing, so that it costs the run little.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// A key a verifying receiver can check with (the sinks' tests give the sink it as its
/// second, "new" secret).
pub const RECEIVER_SECRET: &str = "whsec_dGhlIHJlY2VpdmVyJ3Mga2V5LCAzMiBieXRlcyBsb25n";
/// A secret a [`RECEIVER_SECRET`] receiver does not know (the sinks' tests give the sink it
/// as its first, "old" secret, being rotated out).
pub const OLD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// What the receiver answers on `/hook`.
#[derive(Debug, Clone)]
pub enum Reply {
    /// This status, no extra header.
    Status(u16),
    /// This status with `Retry-After: <value>`.
    RetryAfter(u16, String),
    /// Sleep this long before answering 200 (past the client's timeout).
    Hang(Duration),
    /// `307` to `/elsewhere`.
    Redirect,
}

/// One request the receiver got on `/hook`.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The request's headers.
    pub headers: HeaderMap,
    /// The request's body, as received.
    pub body: Bytes,
    /// Whether a `v1` signature matched, recomputed over the received bytes (always false
    /// for a receiver that verifies nothing).
    pub signature_valid: bool,
}

impl Recorded {
    /// A header as a string (panics if missing: tests assert exact headers).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .unwrap_or_else(|| panic!("no header {name}"))
            .to_str()
            .unwrap()
    }
}

/// The state every handler shares: what to answer (the test changes it while requests come)
/// and what came. `std::sync::Mutex`: no lock is held across an `.await`.
struct Shared {
    /// The key signatures are verified with; none: no verification.
    key: Option<Vec<u8>>,
    /// Whether requests are recorded (not in a benchmark).
    record: bool,
    /// The answer to `/hook`.
    reply: Mutex<Reply>,
    /// Per `ce-sequence` value, a status that overrides `reply`.
    fail_seq: Mutex<HashMap<String, u16>>,
    /// How long every `/hook` answer waits.
    delay: Mutex<Duration>,
    /// The status `/health` answers.
    health: Mutex<u16>,
    /// Every `/hook` request, in arrival order.
    requests: Mutex<Vec<Recorded>>,
    /// `(ce-id, ce-sequence)` of every request answered 2xx, in the order answered.
    accepted: Mutex<Vec<(String, String)>>,
    health_hits: AtomicUsize,
    redirect_hits: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

/// How a receiver starts: [`Receiver::builder`].
#[derive(Debug, Clone)]
pub struct ReceiverBuilder {
    secret: Option<String>,
    reply: Reply,
    record: bool,
}

impl ReceiverBuilder {
    /// Verify every request's signature with `secret` (`whsec_<base64>`), answering 401 to
    /// one that does not verify.
    pub fn verify(mut self, secret: &str) -> ReceiverBuilder {
        self.secret = Some(secret.to_owned());
        self
    }

    /// Answer `status` to `/hook` until told otherwise (200 by default).
    pub fn answer(mut self, status: u16) -> ReceiverBuilder {
        self.reply = Reply::Status(status);
        self
    }

    /// Record nothing (a benchmark's receiver: its cost is the run's).
    pub fn unrecorded(mut self) -> ReceiverBuilder {
        self.record = false;
        self
    }

    /// Start it; it stops with the runtime.
    pub async fn start(self) -> Receiver {
        let key = self
            .secret
            .map(|s| BASE64.decode(s.strip_prefix("whsec_").unwrap()).unwrap());
        let shared = Arc::new(Shared {
            key,
            record: self.record,
            reply: Mutex::new(self.reply),
            fail_seq: Mutex::new(HashMap::new()),
            delay: Mutex::new(Duration::ZERO),
            health: Mutex::new(200),
            requests: Mutex::new(Vec::new()),
            accepted: Mutex::new(Vec::new()),
            health_hits: AtomicUsize::new(0),
            redirect_hits: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route("/hook", any(hook))
            .route("/elsewhere", any(elsewhere))
            .route("/health", get(health))
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver { base, shared }
    }
}

/// A running receiver; it stops with the test's runtime. Clones share it.
#[derive(Clone)]
pub struct Receiver {
    /// Base URL, e.g. `http://127.0.0.1:41234`.
    pub base: String,
    shared: Arc<Shared>,
}

impl Receiver {
    /// A receiver to set up: answering 200, recording, verifying nothing.
    pub fn builder() -> ReceiverBuilder {
        ReceiverBuilder {
            secret: None,
            reply: Reply::Status(200),
            record: true,
        }
    }

    /// Starts a receiver answering 200 to everything, recording, verifying nothing.
    pub async fn start() -> Receiver {
        Receiver::builder().start().await
    }

    /// Starts a receiver answering `status`, recording, verifying nothing.
    pub async fn answering(status: u16) -> Receiver {
        Receiver::builder().answer(status).start().await
    }

    /// The URL events go to.
    pub fn url(&self) -> String {
        format!("{}/hook", self.base)
    }

    /// Changes the answer of every following `/hook` request.
    pub fn reply(&self, reply: Reply) {
        *self.shared.reply.lock().unwrap() = reply;
    }

    /// Answers `status` to every following `/hook` request.
    pub fn answer(&self, status: u16) {
        self.reply(Reply::Status(status));
    }

    /// Answers `status` to the event whose `ce-sequence` is `seq` (binary mode).
    pub fn fail_seq(&self, seq: u64, status: u16) {
        let mut fail = self.shared.fail_seq.lock().unwrap();
        fail.insert(format!("{seq:020}"), status);
    }

    /// Delays every `/hook` answer (to make requests overlap).
    pub fn delay(&self, delay: Duration) {
        *self.shared.delay.lock().unwrap() = delay;
    }

    /// The status `/health` answers.
    pub fn health(&self, status: u16) {
        *self.shared.health.lock().unwrap() = status;
    }

    /// Every `/hook` request so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// `(ce-id, ce-sequence)` of every request answered 2xx, in the order answered.
    pub fn accepted(&self) -> Vec<(String, String)> {
        self.shared.accepted.lock().unwrap().clone()
    }

    /// The seqs accepted, in the order answered.
    pub fn sequences(&self) -> Vec<u64> {
        let accepted = self.shared.accepted.lock().unwrap();
        accepted.iter().map(|(_, s)| s.parse().unwrap()).collect()
    }

    /// The event ids (`ce-id`) accepted, in the order answered.
    pub fn ids(&self) -> Vec<String> {
        let accepted = self.shared.accepted.lock().unwrap();
        accepted.iter().map(|(id, _)| id.clone()).collect()
    }

    /// The most `/hook` requests that were in flight at once.
    pub fn max_concurrency(&self) -> usize {
        self.shared.max_in_flight.load(Ordering::SeqCst)
    }

    /// Requests that reached `/elsewhere` (the redirect target).
    pub fn redirect_hits(&self) -> usize {
        self.shared.redirect_hits.load(Ordering::SeqCst)
    }

    /// Requests that reached `/health`.
    pub fn health_hits(&self) -> usize {
        self.shared.health_hits.load(Ordering::SeqCst)
    }
}

async fn hook(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    shared.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let signature_valid = shared
        .key
        .as_ref()
        .is_some_and(|key| verify(key, &headers, &body));
    if shared.record {
        shared.requests.lock().unwrap().push(Recorded {
            headers: headers.clone(),
            body,
            signature_valid,
        });
    }
    let delay = *shared.delay.lock().unwrap();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let response = if shared.key.is_some() && !signature_valid {
        StatusCode::UNAUTHORIZED.into_response()
    } else {
        answer(&shared, &headers).await
    };
    if shared.record && response.status().is_success() {
        let h = |n: &str| header(&headers, n);
        let entry = (h("ce-id"), h("ce-sequence"));
        shared.accepted.lock().unwrap().push(entry);
    }
    shared.in_flight.fetch_sub(1, Ordering::SeqCst);
    response
}

/// The answer to a request whose signature passed (or was not checked).
async fn answer(shared: &Shared, headers: &HeaderMap) -> Response {
    let seq = headers.get("ce-sequence").and_then(|v| v.to_str().ok());
    let per_seq = seq.and_then(|s| shared.fail_seq.lock().unwrap().get(s).copied());
    let reply = shared.reply.lock().unwrap().clone();
    match (per_seq, reply) {
        (Some(status), _) => status_of(status).into_response(),
        (None, Reply::Status(status)) => status_of(status).into_response(),
        (None, Reply::RetryAfter(status, value)) => {
            let mut response = status_of(status).into_response();
            let value = HeaderValue::from_str(&value).unwrap();
            response.headers_mut().insert("retry-after", value);
            response
        }
        (None, Reply::Hang(pause)) => {
            tokio::time::sleep(pause).await;
            StatusCode::OK.into_response()
        }
        (None, Reply::Redirect) => {
            let mut response = StatusCode::TEMPORARY_REDIRECT.into_response();
            let location = HeaderValue::from_static("/elsewhere");
            response.headers_mut().insert("location", location);
            response
        }
    }
}

/// A header as a string, empty when missing.
fn header(headers: &HeaderMap, name: &str) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

async fn elsewhere(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.redirect_hits.fetch_add(1, Ordering::SeqCst);
    StatusCode::OK
}

async fn health(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.health_hits.fetch_add(1, Ordering::SeqCst);
    status_of(*shared.health.lock().unwrap())
}

fn status_of(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap()
}

/// Standard Webhooks verification: a fresh timestamp and a `v1` signature matching
/// `HMAC-SHA256(key, "{id}.{timestamp}.{body}")`.
fn verify(key: &[u8], headers: &HeaderMap, body: &[u8]) -> bool {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let (Some(id), Some(timestamp), Some(signatures)) = (
        get("webhook-id"),
        get("webhook-timestamp"),
        get("webhook-signature"),
    ) else {
        return false;
    };
    let Ok(sent_at) = timestamp.parse::<i64>() else {
        return false;
    };
    if (chrono::Utc::now().timestamp() - sent_at).abs() > 300 {
        return false;
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    let expected = BASE64.encode(mac.finalize().into_bytes());
    signatures
        .split(' ')
        .any(|s| s.strip_prefix("v1,") == Some(expected.as_str()))
}
