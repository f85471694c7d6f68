//! The changes the bench makes through the admin API, each on a connection of its own
//! subject, so that every request is a real change and none waits on another's revision.
//!
//! - override: `PUT .../overrides/k{c}`, the rate alternating between two values;
//! - source: `PATCH .../sources/s{c}` with a new config each time (a local source: one batch);
//! - route: `PATCH .../routes/r{c}` with a new destination each time (a dual write: a synced
//!   pending row, the route store's write, the row's finish).

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::node::TOKEN;
use crate::stats::Failures;

const TENANT: &str = "/admin/v1/tenants/bench";

/// The kind of change a measurement makes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Override,
    Source,
    Route,
}

impl Kind {
    /// How the report names it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Override => "override",
            Kind::Source => "source",
            Kind::Route => "route",
        }
    }
}

/// One HTTP/1.1 keep-alive connection to the node and the subject it changes.
pub struct Conn {
    client: reqwest::Client,
    base: String,
    kind: Kind,
    /// The connection's number: its subject's id.
    c: usize,
}

impl Conn {
    /// A connection of its own (a client whose pool holds one connection, used by one
    /// request at a time) for connection number `c`.
    pub fn new(base: &str, kind: Kind, c: usize) -> Conn {
        let client = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(1)
            .pool_idle_timeout(None)
            .timeout(Duration::from_secs(30))
            .build()
            .expect("an HTTP client");
        Conn {
            client,
            base: base.to_owned(),
            kind,
            c,
        }
    }

    /// Create the connection's subject (which opens the connection); `Err` says what the
    /// node answered instead.
    pub async fn create(&self) -> Result<u64, String> {
        self.create_as(self.kind).await
    }

    /// Create the connection's subject of `kind`.
    pub async fn create_as(&self, kind: Kind) -> Result<u64, String> {
        let c = self.c;
        let (method, path, body) = match kind {
            Kind::Override => (
                Method::PUT,
                format!("{TENANT}/overrides/k{c}"),
                json!({"rate": 1000}),
            ),
            Kind::Source => (
                Method::POST,
                format!("{TENANT}/sources"),
                json!({"id": format!("s{c}"), "kind": "webhook", "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                       "config": {"url": format!("https://example.test/hooks/{c}/0"), "timeout_ms": 5000}}),
            ),
            Kind::Route => (
                Method::POST,
                format!("{TENANT}/routes"),
                json!({"id": format!("r{c}"), "source": format!("s{c}"),
                       "destination": format!("https://example.test/in/{c}/0"),
                       "filter": {"type": "order"}}),
            ),
        };
        self.send(method, &path, body, StatusCode::CREATED).await
    }

    /// The connection's `i`-th change (i from 1): the seq of its row, or what went wrong.
    pub async fn change(&self, i: u64) -> Result<u64, String> {
        self.change_as(self.kind, i).await
    }

    /// The connection's `i`-th change of its subject of `kind`.
    pub async fn change_as(&self, kind: Kind, i: u64) -> Result<u64, String> {
        let c = self.c;
        let (method, path, body) = match kind {
            // Created at 1000: 999 and 1000 alternate, so each is a real change.
            Kind::Override => (
                Method::PUT,
                format!("{TENANT}/overrides/k{c}"),
                json!({"rate": 1000 - (i % 2)}),
            ),
            Kind::Source => (
                Method::PATCH,
                format!("{TENANT}/sources/s{c}"),
                json!({"config": {"url": format!("https://example.test/hooks/{c}/{i}"), "timeout_ms": 5000}}),
            ),
            Kind::Route => (
                Method::PATCH,
                format!("{TENANT}/routes/r{c}"),
                json!({"destination": format!("https://example.test/in/{c}/{i}")}),
            ),
        };
        self.send(method, &path, body, StatusCode::OK).await
    }

    /// Send one request; a real change answers `want` with an `X-Audit-Seq`.
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Value,
        want: StatusCode,
    ) -> Result<u64, String> {
        let r = self
            .client
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .map_err(|e| format!("{method} {path}: {e}"))?;
        let status = r.status();
        let seq = r
            .headers()
            .get("x-audit-seq")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let text = r
            .text()
            .await
            .map_err(|e| format!("{method} {path}: body: {e}"))?;
        match seq {
            Some(seq) if status == want => Ok(seq),
            _ => Err(format!(
                "{method} {path}: {status}, X-Audit-Seq {seq:?}: {}",
                text.chars().take(200).collect::<String>()
            )),
        }
    }
}

/// One change of a [`paced`] run.
pub struct Paced {
    /// Its row's seq (the answer's `X-Audit-Seq`).
    pub seq: u64,
    /// When its turn came.
    pub due: tokio::time::Instant,
    /// Just before its request.
    #[allow(dead_code)] // The load bench times from `due`.
    pub sent: Instant,
    /// When its answer was read.
    pub answered: Instant,
}

/// Changes at `rate`/s for `run_for` over `conns`, open loop: each connection's changes are
/// due at their slots of one schedule spread over all of them, whatever the answers before
/// them. `each` sees every answer as it comes (a tracker of what was answered). The changes
/// answered, when the schedule began, and the failures.
pub async fn paced(
    conns: &[Arc<Conn>],
    rate: f64,
    run_for: Duration,
    each: impl Fn(&Paced) + Clone + Send + 'static,
) -> (Vec<Paced>, tokio::time::Instant, Failures) {
    let t0 = tokio::time::Instant::now() + Duration::from_millis(10);
    let end = t0 + run_for;
    let n = conns.len();
    let tasks: Vec<_> = conns
        .iter()
        .enumerate()
        .map(|(k, conn)| {
            let (conn, each) = (conn.clone(), each.clone());
            tokio::spawn(async move {
                let (mut answered, mut failures) = (Vec::new(), Failures::default());
                for j in 0u64.. {
                    let due = t0 + Duration::from_secs_f64((j as usize * n + k) as f64 / rate);
                    if due >= end {
                        break;
                    }
                    tokio::time::sleep_until(due).await;
                    let sent = Instant::now();
                    match conn.change(j + 1).await {
                        Ok(seq) => {
                            let change = Paced {
                                seq,
                                due,
                                sent,
                                answered: Instant::now(),
                            };
                            each(&change);
                            answered.push(change);
                        }
                        Err(e) => failures.add(e),
                    }
                }
                (answered, failures)
            })
        })
        .collect();
    let (mut all, mut failures) = (Vec::new(), Failures::default());
    for t in tasks {
        let (answered, f) = t.await.expect("a paced connection");
        all.extend(answered);
        failures.merge(f);
    }
    (all, t0, failures)
}
