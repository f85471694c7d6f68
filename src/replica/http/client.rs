//! The requests of `follow http`: a long-poll of one node's events, and a snapshot request
//! after a 410. Each answer becomes a [`Reply`] the [`Watch`](super::watch::Watch) steps on.
//!
//! A request is bounded in time (the wait plus [`MARGIN`]: a node that hangs is a failure,
//! not a follower that hangs with it) and in size ([`BODY_LIMIT`]: a node that sends without
//! end is a failure, not a follower out of memory). The token goes in the `Authorization`
//! header only; what a failure says names the URL and the status, never the token.

use std::time::Duration;

use cloudevents::Event;
use reqwest::header::RETRY_AFTER;
use reqwest::{StatusCode, Url};
use serde::Deserialize;

use super::watch::{Answer, Failure, Gone, Reply};
use crate::replica::file::WatchPosition;

/// How much longer than its wait a long-poll may take before it counts as hung: the node
/// answers when the wait runs out, and this covers the answer's way back.
pub const MARGIN: Duration = Duration::from_secs(10);
/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a snapshot request may take (it answers once the snapshot is started).
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest answer read: 1000 events of up to 64 KiB each, with room to spare.
pub const BODY_LIMIT: usize = 96 << 20;

/// A node's base URL, as given (`http://node:8080`, or with a path behind a proxy), in the
/// one spelling the replica file keys its position by: scheme and host lowercased, no
/// trailing slash, no query or fragment.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct NodeUrl(Url);

impl NodeUrl {
    /// `text` as a node URL, or why it is not one.
    pub fn parse(text: &str) -> Result<NodeUrl, String> {
        NodeUrl::parse_flag("--url", text)
    }

    /// `text`, given as command-line flag `flag`, as a node URL, or why it is not one.
    pub fn parse_flag(flag: &str, text: &str) -> Result<NodeUrl, String> {
        let not = |why: &str| format!("{flag} {text:?} is not a node's URL: {why}");
        let url = Url::parse(text).map_err(|e| not(&e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") || !url.has_host() {
            return Err(not("it needs http:// or https:// and a host"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(not("the base URL takes no query or fragment"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(not("credentials go in --token, never in the URL"));
        }
        Ok(NodeUrl(url))
    }

    /// The key of the node's position in the replica file.
    pub fn key(&self) -> String {
        self.0.as_str().trim_end_matches('/').to_owned()
    }

    /// The URL of the admin API's `path` (`["admin", "v1", ...]`) on this node.
    pub fn endpoint(&self, path: &[&str]) -> Url {
        let mut url = self.0.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty().extend(path);
        }
        url
    }

    /// The long-poll that resumes at `at` (from the oldest when `None`).
    pub fn events(&self, at: Option<&WatchPosition>, limit: u32, wait: Duration) -> Url {
        let mut url = self.endpoint(&["admin", "v1", "lifecycle", "events"]);
        {
            let mut query = url.query_pairs_mut();
            query.append_pair("after", &at.map_or(0, |a| a.position).to_string());
            if let Some(at) = at {
                query.append_pair("incarnation", &at.incarnation);
            }
            query.append_pair("limit", &limit.to_string());
            query.append_pair("wait", &duration(wait));
        }
        url
    }
}

impl std::fmt::Display for NodeUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.key())
    }
}

/// `wait` as the query takes it: whole seconds when it is some (`30s`), else milliseconds.
fn duration(wait: Duration) -> String {
    match wait.subsec_millis() {
        0 => format!("{}s", wait.as_secs()),
        _ => format!("{}ms", wait.as_millis()),
    }
}

/// What the node answered to a snapshot request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    /// 202: the snapshot of this id runs.
    Started(String),
    /// 409 `snapshot_in_progress`: one runs already, which serves as well.
    Running,
}

/// A client of one node's watch.
pub struct Client {
    http: reqwest::Client,
    node: NodeUrl,
    token: String,
    limit: u32,
    wait: Duration,
}

impl Client {
    /// A client of `node` asking for `limit` events, waiting up to `wait` for them.
    pub fn new(node: NodeUrl, token: &str, limit: u32, wait: Duration) -> Result<Client, String> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| format!("an HTTP client for {node}: {e}"))?;
        Ok(Client {
            http,
            node,
            token: token.to_owned(),
            limit,
            wait,
        })
    }

    /// The node.
    pub fn node(&self) -> &NodeUrl {
        &self.node
    }

    /// Long-poll the node's events after `at`.
    pub async fn poll(&self, at: Option<&WatchPosition>) -> Reply {
        let url = self.node.events(at, self.limit, self.wait);
        let request = self
            .http
            .get(url)
            .bearer_auth(&self.token)
            .header("accept", "application/json")
            .timeout(self.wait + MARGIN);
        match read(request).await {
            Ok((status, retry_after, body)) => reply(status, retry_after, &body),
            Err(detail) => Reply::Failed(transient(detail)),
        }
    }

    /// Ask the node for a snapshot.
    pub async fn snapshot(&self) -> Result<Asked, Failure> {
        let url = self
            .node
            .endpoint(&["admin", "v1", "lifecycle", "snapshot"]);
        let request = self
            .http
            .post(url)
            .bearer_auth(&self.token)
            .timeout(SNAPSHOT_TIMEOUT);
        let (status, retry_after, body) = read(request).await.map_err(transient)?;
        asked(status, retry_after, &body)
    }
}

/// Send `request` and read its answer, up to [`BODY_LIMIT`].
async fn read(
    request: reqwest::RequestBuilder,
) -> Result<(StatusCode, Option<Duration>, Vec<u8>), String> {
    let shown = |e: reqwest::Error| {
        let timeout = e.is_timeout();
        let shown = chain(&e.without_url());
        match timeout {
            true => format!("no answer in time ({shown})"),
            false => shown,
        }
    };
    let mut response = request.send().await.map_err(shown)?;
    let status = response.status();
    let retry_after = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(shown)? {
        if body.len() + chunk.len() > BODY_LIMIT {
            return Err(format!("answered {status} with over {BODY_LIMIT} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((status, retry_after, body))
}

/// `error` and its sources (reqwest's own says only "error sending request"; the cause,
/// "Connection refused", is in its sources).
fn chain(error: &dyn std::error::Error) -> String {
    let mut shown = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !shown.contains(&text) {
            shown.push_str(": ");
            shown.push_str(&text);
        }
        source = cause.source();
    }
    shown
}

/// The body of a 200 answer.
#[derive(Deserialize)]
struct Body {
    events: Vec<Event>,
    position: u64,
    incarnation: String,
    latest: u64,
}

/// An error body: `{"error": "...", "oldest": ..., "incarnation": ...}` (the last two for
/// `position_gone` only).
#[derive(Deserialize)]
struct Error {
    error: String,
    oldest: Option<u64>,
    incarnation: Option<String>,
}

/// The reply a long-poll answered with `status` and `body` means.
pub fn reply(status: StatusCode, retry_after: Option<Duration>, body: &[u8]) -> Reply {
    match status {
        StatusCode::OK => match serde_json::from_slice::<Body>(body) {
            Ok(b) => Reply::Answer(Answer {
                events: b.events,
                position: b.position,
                incarnation: b.incarnation,
                latest: b.latest,
            }),
            Err(e) => Reply::Failed(transient(format!("answered 200 with no watch answer: {e}"))),
        },
        StatusCode::GONE => match serde_json::from_slice::<Error>(body) {
            Ok(Error {
                error,
                oldest: Some(oldest),
                incarnation: Some(incarnation),
            }) if error == "position_gone" => Reply::Gone(Gone {
                oldest,
                incarnation,
            }),
            _ => Reply::Failed(transient(
                "answered 410 without a position_gone body (a proxy's?)".to_owned(),
            )),
        },
        status => Reply::Failed(failure(status, retry_after, body)),
    }
}

/// What a snapshot request answered with `status` and `body` means.
pub fn asked(
    status: StatusCode,
    retry_after: Option<Duration>,
    body: &[u8],
) -> Result<Asked, Failure> {
    let code = || serde_json::from_slice::<Error>(body).ok().map(|e| e.error);
    match status {
        StatusCode::ACCEPTED => {
            let id = serde_json::from_slice::<serde_json::Value>(body)
                .ok()
                .and_then(|v| v["snapshot"]["id"].as_str().map(str::to_owned));
            Ok(Asked::Started(id.unwrap_or_default()))
        }
        StatusCode::CONFLICT if code().as_deref() == Some("snapshot_in_progress") => {
            Ok(Asked::Running)
        }
        // Lifecycle events are off on the node: it may be turned on again; meanwhile no
        // snapshot can be had, and the relist waits for one.
        StatusCode::CONFLICT => Err(Failure::Transient {
            detail: format!(
                "refused a snapshot (409 {})",
                code().unwrap_or_else(|| "conflict".into())
            ),
            retry_after,
        }),
        status => Err(failure(status, retry_after, body)),
    }
}

/// What an answer of another status than the ones expected means.
fn failure(status: StatusCode, retry_after: Option<Duration>, body: &[u8]) -> Failure {
    let code = serde_json::from_slice::<Error>(body)
        .map(|e| format!(" {}", e.error))
        .unwrap_or_default();
    match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Failure::Refused(status),
        StatusCode::NOT_FOUND => Failure::Permanent(format!(
            "answered 404{code}: no /admin/v1/lifecycle/events there (a node older than the \
             watch, or not a node)"
        )),
        StatusCode::REQUEST_TIMEOUT | StatusCode::TOO_MANY_REQUESTS => Failure::Transient {
            detail: format!("answered {status}{code}"),
            retry_after,
        },
        s if s.is_client_error() => Failure::Permanent(format!("answered {status}{code}")),
        _ => Failure::Transient {
            detail: format!("answered {status}{code}"),
            retry_after,
        },
    }
}

fn transient(detail: String) -> Failure {
    Failure::Transient {
        detail,
        retry_after: None,
    }
}
