//! `GET /admin/v1/lifecycle/events`: the lifecycle events over HTTP, for consumers with no
//! broker and no public endpoint (docs/watch.md). A long-poll answers a page of events and
//! the position to resume from; with `Accept: text/event-stream` the same events stream as
//! server-sent events, with a bookmark (the position and the newest signed checkpoint)
//! when nothing was sent for a while. `events:read`.
//!
//! The events are those the sinks get, read from the outbox by `lifecycle::watch`; a watcher
//! moves no sink's position and holds no row back from retention.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::Stream;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::time::Instant;
use uuid::Uuid;

use super::auth::{Authorized, EventsRead};
use super::error::ApiError;
use super::extract::ApiQuery;
use super::subject::page_limit;
use super::AppState;
use crate::lifecycle::watch::{Filter, Page, WatchError, Watcher};

/// The longest `wait` of a long-poll: under common proxies' idle timeouts.
pub const MAX_WAIT: Duration = Duration::from_secs(50);

/// The bounds of a stream's `bookmark` interval.
pub const BOOKMARK_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(100)..=Duration::from_secs(300);

/// A stream's bookmark interval unless it asks for another.
const DEFAULT_BOOKMARK: Duration = Duration::from_secs(10);

/// The query of a watch.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchQuery {
    /// Serve events with a greater seq (default 0). A stream's `Last-Event-ID` wins.
    pub after: Option<u64>,
    /// The incarnation the position was served in.
    pub incarnation: Option<Uuid>,
    /// At most this many events an answer (1 to 1000, default 100).
    pub limit: Option<usize>,
    /// How long a long-poll waits for an event (default 0s): `<n>ms` or `<n>s`.
    pub wait: Option<String>,
    /// Event types, comma-separated; one ending in `*` is a prefix.
    pub types: Option<String>,
    /// Only this tenant's events.
    pub tenant: Option<String>,
    /// A stream's bookmark interval (default 10s): `<n>ms` or `<n>s`.
    pub bookmark: Option<String>,
}

/// A long-poll's answer: the events as the sinks send them (their stored bytes, spliced).
#[derive(Debug, Serialize)]
struct Answer<'a> {
    events: Vec<&'a RawValue>,
    position: u64,
    incarnation: Uuid,
    latest: u64,
}

/// `GET /admin/v1/lifecycle/events`.
pub async fn watch(
    _: Authorized<EventsRead>,
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<WatchQuery>,
) -> Result<Response, ApiError> {
    let filter = Filter::parse(query.types.as_deref(), query.tenant.as_deref())
        .map_err(|e| ApiError::invalid(e.field, e.message))?;
    let limit = page_limit(query.limit)?;
    let wait = duration("wait", query.wait.as_deref(), Duration::ZERO)?;
    let every = duration("bookmark", query.bookmark.as_deref(), DEFAULT_BOOKMARK)?;
    if wait > MAX_WAIT {
        return Err(ApiError::invalid("wait", "must be at most 50s"));
    }
    if !BOOKMARK_RANGE.contains(&every) {
        return Err(ApiError::invalid("bookmark", "must be 100ms to 300s"));
    }
    let after = last_event_id(&headers)?.or(query.after).unwrap_or(0);
    let watcher = state.watch.join().map_err(watch_error)?;
    watcher
        .check(after, query.incarnation)
        .await
        .map_err(watch_error)?;
    if wants_stream(&headers) {
        let streaming = Streaming {
            state,
            watcher,
            after,
            filter,
            limit,
            every,
            sent: Instant::now(),
            ready: VecDeque::new(),
            done: false,
        };
        return Ok(Sse::new(streaming.into_stream()).into_response());
    }
    // Answered before the request timeout cuts the wait short with a 503.
    let wait = wait.min(state.admin.limits.request_timeout.mul_f64(0.9));
    let page = watcher
        .next(after, &filter, limit, Instant::now() + wait)
        .await
        .map_err(watch_error)?;
    Ok(Json(Answer {
        events: page.events.iter().map(|e| &*e.json).collect(),
        position: page.position,
        incarnation: page.incarnation,
        latest: page.latest,
    })
    .into_response())
}

/// A duration parameter, `<n>ms` or `<n>s` (`default` when absent), or a 400.
fn duration(field: &str, value: Option<&str>, default: Duration) -> Result<Duration, ApiError> {
    let Some(value) = value else {
        return Ok(default);
    };
    let (digits, millis) = match value.strip_suffix("ms") {
        Some(digits) => (digits, 1),
        None => (value.strip_suffix('s').unwrap_or(""), 1000),
    };
    let n: Option<u64> = match digits.len() {
        1..=6 if digits.bytes().all(|b| b.is_ascii_digit()) => digits.parse().ok(),
        _ => None,
    };
    n.map(|n| Duration::from_millis(n * millis)).ok_or_else(|| {
        ApiError::bad(
            field,
            format!("{field}: must be <n>ms or <n>s, n of 1 to 6 digits"),
        )
    })
}

/// Whether the client asked for server-sent events.
fn wants_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| v.split(';').next().unwrap_or("").trim() == "text/event-stream")
}

/// `Last-Event-ID`: a seq (ours are), or a 400. It wins over `after`, for a long-poll too.
fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .map(Some)
        .ok_or_else(|| ApiError::bad("Last-Event-ID", "Last-Event-ID: must be a seq"))
}

fn watch_error(e: WatchError) -> ApiError {
    match e {
        WatchError::Gone {
            oldest,
            incarnation,
            ..
        } => ApiError::Gone {
            message: e.to_string(),
            oldest,
            incarnation,
        },
        WatchError::Full(max) => ApiError::TooManyWatchers(max),
        WatchError::Store(e) => e.into(),
    }
}

/// What a stream does next.
struct Streaming {
    state: AppState,
    watcher: Watcher,
    after: u64,
    filter: Filter,
    limit: usize,
    every: Duration,
    /// When something was last sent.
    sent: Instant,
    /// Events read and not yet sent, newest last.
    ready: VecDeque<SseEvent>,
    done: bool,
}

impl Streaming {
    /// The stream of a watcher: its events, bookmarks when idle, until the node stops or the
    /// position is gone (then a last `gone` event). Pulled by the connection: a client that
    /// does not read holds one page, and is closed by `api.write_timeout`.
    fn into_stream(self) -> impl Stream<Item = Result<SseEvent, Infallible>> {
        futures::stream::unfold(self, |mut s| async move {
            loop {
                if let Some(event) = s.ready.pop_front() {
                    return Some((Ok(event), s));
                }
                if s.done {
                    return None;
                }
                s.fill().await;
            }
        })
    }

    /// Read what to send next into `ready` (or mark the stream done).
    async fn fill(&mut self) {
        let until = self.sent + self.every;
        match self
            .watcher
            .next(self.after, &self.filter, self.limit, until)
            .await
        {
            Ok(page) if !page.events.is_empty() => {
                self.after = page.position;
                self.sent = Instant::now();
                self.ready.extend(page.events.iter().map(|e| {
                    SseEvent::default()
                        .id(e.seq.to_string())
                        .event("cloudevent")
                        .data(e.json.get())
                }));
            }
            Ok(page) => {
                self.after = page.position;
                if self.state.watch.is_stopping() {
                    self.done = true;
                    return;
                }
                if Instant::now() >= until {
                    self.sent = Instant::now();
                    self.ready.push_back(self.bookmark(&page).await);
                }
            }
            // A store error ends the stream (logged): the client resumes from its last id.
            Err(e) => {
                self.done = true;
                let error = watch_error(e);
                if let ApiError::Gone { .. } = error {
                    let body = error.body().to_string();
                    self.ready
                        .push_back(SseEvent::default().event("gone").data(body));
                }
            }
        }
    }

    /// A bookmark: the position, and the newest signed checkpoint to prove what was seen.
    async fn bookmark(&self, page: &Page) -> SseEvent {
        // A checkpoint that cannot be read leaves it out; the position is what matters.
        let checkpoint = self.state.trail.newest_checkpoint().await.ok().flatten();
        let data = serde_json::json!({
            "position": page.position,
            "incarnation": page.incarnation,
            "latest": page.latest,
            "checkpoint": checkpoint,
        });
        SseEvent::default()
            .id(page.position.to_string())
            .event("bookmark")
            .data(data.to_string())
    }
}
