//! `GET /admin/v1/audit` with `Accept: application/x-ndjson`: a whole filtered window of the
//! trail, streamed as NDJSON, each row with its inclusion proof against one signed
//! checkpoint, for handing to someone who checks it without the node (docs/operations.md).
//!
//! Lines, in order: `{"checkpoint": {origin, size, root, checkpoint}, "first": seq}` (the
//! newest signed checkpoint, and the seq of its tree's leaf 0); one `{"row", "leaf_input",
//! "index", "proof"}` per row; then `{"end": {"rows", "next", "reason"}}`, or, when the
//! export failed part way, `{"error": <the error body>, "next": seq}` and no end line. A
//! receiver without the end line holds a cut export.
//!
//! The stream is pulled by the connection: each poll reads one page on the blocking pool
//! (at most [`PAGE_ROWS`] rows, [`SCAN_BUDGET`] rows or index entries read), so a slow
//! client holds one page, and a client that goes away drops the stream and no further page
//! is read. Nothing is buffered beyond the page being sent.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use serde::Serialize;
use serde_json::json;

use super::audit::{proof_error, SCAN_BUDGET};
use super::error::ApiError;
use super::subject::page_limit;
use super::AppState;
use crate::audit::tree::export::{ExportStart, Next, ProvenPage};
use crate::audit::Filter;

/// The media type of an export.
pub const NDJSON: &str = "application/x-ndjson";

/// The most rows one page of an export holds: a chunk of some hundred KiB.
const PAGE_ROWS: usize = 256;

/// Whether the client asked for an export (`Accept: application/x-ndjson`).
pub fn wanted(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| v.split(';').next().unwrap_or("").trim() == NDJSON)
}

/// Why an export ended, as its end line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Reason {
    /// Every row of the window up to the end of the trail: `next` is null.
    Complete,
    /// Rows after the checkpoint's size may match: `next` is its last seq; export again
    /// from there once a newer checkpoint is signed.
    Checkpoint,
    /// `limit` rows were sent: `next` is the last one's seq.
    Limit,
}

/// The end line's body.
#[derive(Debug, Serialize)]
struct End {
    rows: u64,
    next: Option<u64>,
    reason: Reason,
}

/// Where an export is.
#[derive(Debug, Clone, Copy)]
enum Stage {
    /// The checkpoint line is next, then the rows after this seq.
    Head(u64),
    /// Rows after this seq are next.
    Rows(u64),
    /// Sent its end or error line.
    Done,
}

/// An export under way: a state machine, one chunk a step.
struct Export {
    state: AppState,
    start: ExportStart,
    filter: Filter,
    /// Rows still allowed by `limit` (`None`: no limit).
    left: Option<usize>,
    /// Rows sent so far.
    sent: u64,
    stage: Stage,
}

/// The export of `filter`'s window after `after`: 409 when the trail keeps no tree, 404
/// before the first checkpoint; else 200 and the stream. `limit` (1 to 1000, as for a page)
/// caps the rows sent.
pub async fn export(
    state: AppState,
    after: Option<u64>,
    limit: Option<usize>,
    filter: Filter,
) -> Result<Response, ApiError> {
    let left = limit.map(|l| page_limit(Some(l))).transpose()?;
    let start = state
        .trail
        .export_start()
        .await
        .map_err(|e| proof_error("after", e))?
        .ok_or_else(|| {
            ApiError::NotFound("no checkpoint has been signed yet: nothing can be proven".into())
        })?;
    let export = Export {
        state,
        start,
        filter,
        left,
        sent: 0,
        stage: Stage::Head(after.unwrap_or(0)),
    };
    let mut response = Body::from_stream(export.into_stream()).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(NDJSON));
    Ok(response)
}

impl Export {
    /// The chunks of the export, pulled by the connection.
    fn into_stream(self) -> impl Stream<Item = Result<Bytes, Infallible>> {
        futures::stream::unfold(self, |mut s| async move {
            loop {
                let chunk = s.step().await?;
                // A page of no rows (its budget spent on rows that did not match) sends
                // nothing: the next one is read at once.
                if !chunk.is_empty() {
                    return Some((Ok(chunk), s));
                }
            }
        })
    }

    /// The next chunk: the checkpoint line, a page of rows (with the end line after the
    /// last), or `None` once the end or error line was sent.
    async fn step(&mut self) -> Option<Bytes> {
        match self.stage {
            Stage::Head(after) => {
                self.stage = Stage::Rows(after);
                let head = json!({"checkpoint": self.start.checkpoint, "first": self.start.first});
                Some(line(&head))
            }
            Stage::Rows(after) => Some(self.rows(after).await),
            Stage::Done => None,
        }
    }

    /// A page of row lines after `after`, and the end or error line when it is the last.
    async fn rows(&mut self, after: u64) -> Bytes {
        // The node stopping ends an export rather than holding the shutdown grace.
        if self.state.watch.is_stopping() {
            let stopping = json!({
                "error": "stopping",
                "message": "the node is stopping: export again from `next`",
            });
            return self.fail(stopping, after);
        }
        let limit = self.left.map_or(PAGE_ROWS, |left| left.min(PAGE_ROWS));
        let page = self
            .state
            .trail
            .export_page(
                self.start.clone(),
                after,
                limit,
                self.filter.clone(),
                SCAN_BUDGET,
            )
            .await;
        match page {
            Ok(page) => self.sent_page(page),
            Err(e) => self.fail(proof_error("after", e).body(), after),
        }
    }

    /// The lines of `page`, and what comes after it.
    fn sent_page(&mut self, page: ProvenPage) -> Bytes {
        let mut out = Vec::with_capacity(page.rows.len() * 1024);
        let n = page.rows.len();
        for row in &page.rows {
            write_line(&mut out, row);
        }
        self.sent += n as u64;
        if let Some(left) = &mut self.left {
            *left -= n;
        }
        let end = match page.next {
            Next::After(seq) if self.left == Some(0) => Some((Some(seq), Reason::Limit)),
            Next::After(seq) => {
                self.stage = Stage::Rows(seq);
                None
            }
            Next::End => Some((None, Reason::Complete)),
            Next::PastCheckpoint => Some((Some(self.start.last()), Reason::Checkpoint)),
        };
        if let Some((next, reason)) = end {
            let end = End {
                rows: self.sent,
                next,
                reason,
            };
            write_line(&mut out, &json!({ "end": end }));
            self.stage = Stage::Done;
        }
        Bytes::from(out)
    }

    /// The error line, with the seq the rows sent reach (no end line follows: the
    /// receiver sees a cut export, and may resume after `next`).
    fn fail(&mut self, error: serde_json::Value, after: u64) -> Bytes {
        self.stage = Stage::Done;
        line(&json!({"error": error, "next": after}))
    }
}

fn line(value: &impl Serialize) -> Bytes {
    let mut out = Vec::new();
    write_line(&mut out, value);
    Bytes::from(out)
}

fn write_line(out: &mut Vec<u8>, value: &impl Serialize) {
    serde_json::to_writer(&mut *out, value).expect("an export line always serializes");
    out.push(b'\n');
}
