//! A real webhook receiver for the tests: axum on `127.0.0.1:0`, verifying every request's
//! Standard Webhooks signature with its own HMAC code (not the sink's), recording headers and
//! bodies, and answering whatever the test tells it to, switchable mid-test.

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

/// The key the receiver verifies with (the sink's second, "new" secret).
pub(crate) const RECEIVER_SECRET: &str = "whsec_dGhlIHJlY2VpdmVyJ3Mga2V5LCAzMiBieXRlcyBsb25n";
/// A secret the receiver does not know (the sink's first, "old" secret, being rotated out).
pub(crate) const OLD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// What the receiver answers on `/hook`.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
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
pub(crate) struct Recorded {
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    /// Whether a `v1` signature matched, recomputed over the received bytes.
    pub(crate) signature_valid: bool,
}

impl Recorded {
    /// A header as a string (panics if missing: tests assert exact headers).
    pub(crate) fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .unwrap_or_else(|| panic!("no header {name}"))
            .to_str()
            .unwrap()
    }
}

struct Shared {
    key: Vec<u8>,
    reply: Mutex<Reply>,
    /// Per `ce-sequence` value, a status that overrides `reply`.
    fail_seq: Mutex<HashMap<String, u16>>,
    delay: Mutex<Duration>,
    health: Mutex<u16>,
    requests: Mutex<Vec<Recorded>>,
    health_hits: AtomicUsize,
    redirect_hits: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

/// A running receiver; it stops with the test's runtime.
pub(crate) struct Receiver {
    /// Base URL, e.g. `http://127.0.0.1:41234`.
    pub(crate) base: String,
    shared: Arc<Shared>,
}

impl Receiver {
    /// Starts a receiver answering 200 to everything.
    pub(crate) async fn start() -> Receiver {
        let key = BASE64
            .decode(RECEIVER_SECRET.strip_prefix("whsec_").unwrap())
            .unwrap();
        let shared = Arc::new(Shared {
            key,
            reply: Mutex::new(Reply::Status(200)),
            fail_seq: Mutex::new(HashMap::new()),
            delay: Mutex::new(Duration::ZERO),
            health: Mutex::new(200),
            requests: Mutex::new(Vec::new()),
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

    /// The URL events go to.
    pub(crate) fn url(&self) -> String {
        format!("{}/hook", self.base)
    }

    /// Changes the answer of every following `/hook` request.
    pub(crate) fn reply(&self, reply: Reply) {
        *self.shared.reply.lock().unwrap() = reply;
    }

    /// Answers `status` to the event whose `ce-sequence` is `seq` (binary mode).
    pub(crate) fn fail_seq(&self, seq: u64, status: u16) {
        let mut fail = self.shared.fail_seq.lock().unwrap();
        fail.insert(format!("{seq:020}"), status);
    }

    /// Delays every `/hook` answer (to make requests overlap).
    pub(crate) fn delay(&self, delay: Duration) {
        *self.shared.delay.lock().unwrap() = delay;
    }

    /// The status `/health` answers.
    pub(crate) fn health(&self, status: u16) {
        *self.shared.health.lock().unwrap() = status;
    }

    /// Every `/hook` request so far, in arrival order.
    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// The most `/hook` requests that were in flight at once.
    pub(crate) fn max_concurrency(&self) -> usize {
        self.shared.max_in_flight.load(Ordering::SeqCst)
    }

    /// Requests that reached `/elsewhere` (the redirect target).
    pub(crate) fn redirect_hits(&self) -> usize {
        self.shared.redirect_hits.load(Ordering::SeqCst)
    }

    /// Requests that reached `/health`.
    pub(crate) fn health_hits(&self) -> usize {
        self.shared.health_hits.load(Ordering::SeqCst)
    }
}

async fn hook(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    shared.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let signature_valid = verify(&shared.key, &headers, &body);
    let seq = headers
        .get("ce-sequence")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    shared.requests.lock().unwrap().push(Recorded {
        headers,
        body,
        signature_valid,
    });
    let delay = *shared.delay.lock().unwrap();
    tokio::time::sleep(delay).await;
    let per_seq = seq.and_then(|s| shared.fail_seq.lock().unwrap().get(&s).copied());
    let reply = shared.reply.lock().unwrap().clone();
    let response = match (signature_valid, per_seq, reply) {
        (false, _, _) => StatusCode::UNAUTHORIZED.into_response(),
        (true, Some(status), _) => status_of(status).into_response(),
        (true, None, Reply::Status(status)) => status_of(status).into_response(),
        (true, None, Reply::RetryAfter(status, value)) => {
            let mut response = status_of(status).into_response();
            let value = HeaderValue::from_str(&value).unwrap();
            response.headers_mut().insert("retry-after", value);
            response
        }
        (true, None, Reply::Hang(pause)) => {
            tokio::time::sleep(pause).await;
            StatusCode::OK.into_response()
        }
        (true, None, Reply::Redirect) => {
            let mut response = StatusCode::TEMPORARY_REDIRECT.into_response();
            let location = HeaderValue::from_static("/elsewhere");
            response.headers_mut().insert("location", location);
            response
        }
    };
    shared.in_flight.fetch_sub(1, Ordering::SeqCst);
    response
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
