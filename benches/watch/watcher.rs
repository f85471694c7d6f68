//! The bench's watchers of `GET /admin/v1/lifecycle/events`: a server-sent-events stream and
//! a long-poll loop, each noting every event it has and when.
//!
//! The stream is read with a small parser of its own that looks at each event's `id` and
//! `event` lines only and never copies its data: 500 streams on two cores must cost the bench
//! little, or the bench, not the node, would be what falls behind. An event counts as had
//! once the chunk that completes it is read, as a client would hand it on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::node::TOKEN;

/// The endpoint.
const EVENTS: &str = "/admin/v1/lifecycle/events";

/// What one watcher has had so far, read by the bench while it runs.
#[derive(Default)]
pub struct Tally {
    /// The seq of the last event it had.
    last: AtomicU64,
    /// When it had it, nanoseconds after its [`Window`]'s epoch.
    last_at: AtomicU64,
    /// Events it had with a seq above its [`Window`]'s `from`.
    counted: AtomicU64,
    /// Events that came at or below the seq before them (repeated or out of order).
    disorder: AtomicU64,
}

/// What every watcher of a measurement shares: the instant their times count from, and the
/// seq after which their events are counted.
pub struct Window {
    pub epoch: Instant,
    pub from: AtomicU64,
}

impl Window {
    pub fn new() -> Arc<Window> {
        Arc::new(Window {
            epoch: Instant::now(),
            from: AtomicU64::new(u64::MAX),
        })
    }
}

impl Tally {
    fn had(&self, window: &Window, seq: u64, at: Instant) {
        if seq <= self.last.load(Ordering::Relaxed) {
            self.disorder.fetch_add(1, Ordering::Relaxed);
        }
        if seq > window.from.load(Ordering::Relaxed) {
            self.counted.fetch_add(1, Ordering::Relaxed);
        }
        let nanos = at.duration_since(window.epoch).as_nanos() as u64;
        self.last_at.store(nanos, Ordering::Relaxed);
        self.last.store(seq, Ordering::Release);
    }

    /// The seq of the last event it had.
    pub fn last(&self) -> u64 {
        self.last.load(Ordering::Acquire)
    }

    /// Events it had after the window's `from`.
    pub fn counted(&self) -> u64 {
        self.counted.load(Ordering::Relaxed)
    }

    /// Events that came at or below the seq before them.
    pub fn disorder(&self) -> u64 {
        self.disorder.load(Ordering::Relaxed)
    }

    /// When it had its last event.
    pub fn last_at(&self, window: &Window) -> Instant {
        window.epoch + Duration::from_nanos(self.last_at.load(Ordering::Relaxed))
    }
}

/// One watcher's end: every event's seq and when it was had (when asked to keep them), or
/// why it stopped early.
pub type Ended = Result<Vec<(u64, Instant)>, String>;

/// How a watcher watches.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    Stream,
    LongPoll,
}

/// A watcher from `after` until `stop`: `keep` says whether it hands back every event's time.
pub async fn watch(
    mode: Mode,
    client: reqwest::Client,
    base: String,
    after: u64,
    (tally, window): (Arc<Tally>, Arc<Window>),
    keep: bool,
    stop: CancellationToken,
) -> Ended {
    let mut times = Vec::new();
    let mut note = |seq: u64, at: Instant| {
        tally.had(&window, seq, at);
        if keep {
            times.push((seq, at));
        }
    };
    let ended = match mode {
        Mode::Stream => stream(&client, &base, after, &mut note, &stop).await,
        Mode::LongPoll => long_poll(&client, &base, after, &mut note, &stop).await,
    };
    ended.map(|()| times)
}

/// Read one stream until `stop`.
async fn stream(
    client: &reqwest::Client,
    base: &str,
    after: u64,
    note: &mut impl FnMut(u64, Instant),
    stop: &CancellationToken,
) -> Result<(), String> {
    let mut r = client
        .get(format!("{base}{EVENTS}?after={after}"))
        .bearer_auth(TOKEN)
        .header("accept", "text/event-stream")
        .send()
        .await
        .map_err(|e| format!("stream: {e}"))?;
    if r.status() != reqwest::StatusCode::OK {
        return Err(format!("stream: {}", r.status()));
    }
    let mut buf: Vec<u8> = Vec::with_capacity(16 << 10);
    loop {
        let chunk = tokio::select! {
            chunk = r.chunk() => chunk.map_err(|e| format!("stream: {e}"))?,
            () = stop.cancelled() => return Ok(()),
        };
        let Some(chunk) = chunk else {
            return Err("the stream ended".into());
        };
        let now = Instant::now();
        // Scan only what may hold a new "\n\n": the end of the old bytes and the chunk.
        let mut scan = buf.len().saturating_sub(1);
        buf.extend_from_slice(&chunk);
        let mut start = 0;
        while let Some(end) = memchr::memmem::find(&buf[scan..], b"\n\n").map(|e| scan + e) {
            match block(&buf[start..end]) {
                Block::Event(seq) => note(seq, now),
                Block::Other => {}
                Block::Gone(body) => return Err(format!("stream: gone: {body}")),
            }
            start = end + 2;
            scan = start;
        }
        buf.drain(..start);
    }
}

/// One server-sent event, as far as the bench cares.
enum Block {
    /// A lifecycle event and its seq.
    Event(u64),
    /// A bookmark.
    Other,
    /// The stream's position is gone: the body.
    Gone(String),
}

/// Parse the head of one event (`id: <seq>\nevent: <name>\ndata: ...`, as the node writes
/// it): two lines are read, never the data.
fn block(block: &[u8]) -> Block {
    let mut lines = block.splitn(3, |b| *b == b'\n');
    let (first, second) = (lines.next().unwrap_or(b""), lines.next().unwrap_or(b""));
    if first == b"event: gone" || second == b"event: gone" {
        return Block::Gone(String::from_utf8_lossy(block).into_owned());
    }
    let seq = first
        .strip_prefix(b"id: ")
        .and_then(|id| std::str::from_utf8(id).ok()?.parse().ok());
    match (seq, second) {
        (Some(seq), b"event: cloudevent") => Block::Event(seq),
        _ => Block::Other,
    }
}

/// A long-poll's answer, as far as the bench cares.
#[derive(Deserialize)]
struct Answer {
    events: Vec<Sequenced>,
    position: u64,
}

#[derive(Deserialize)]
struct Sequenced {
    /// The event's seq, zero-padded (the `sequence` extension).
    sequence: String,
}

/// Long-poll until `stop`: each answer's events, then at once the next request.
async fn long_poll(
    client: &reqwest::Client,
    base: &str,
    mut after: u64,
    note: &mut impl FnMut(u64, Instant),
    stop: &CancellationToken,
) -> Result<(), String> {
    loop {
        let request = client
            .get(format!("{base}{EVENTS}?after={after}&limit=1000&wait=30s"))
            .bearer_auth(TOKEN)
            .send();
        let body = tokio::select! {
            r = async { request.await?.error_for_status()?.bytes().await } => {
                r.map_err(|e| format!("long-poll: {e}"))?
            }
            () = stop.cancelled() => return Ok(()),
        };
        let now = Instant::now();
        let answer: Answer =
            serde_json::from_slice(&body).map_err(|e| format!("long-poll: {e}"))?;
        for event in answer.events {
            let seq = event
                .sequence
                .parse()
                .map_err(|_| format!("long-poll: sequence {:?}", event.sequence))?;
            note(seq, now);
        }
        after = answer.position;
    }
}
