//! The publisher: one loop per sink, delivering flagged rows in seq order, at least once.
//!
//! The store is the source of truth: each loop reads the outbox after its sink's position,
//! builds the events, makes one delivery attempt through the sink, and moves the position only
//! over the highest *contiguous* seq the sink confirmed (or refused for good, which writes a
//! dead letter in the same batch as the move). Positions are persisted through the writer
//! (`m:lifecycle_cursor:<sink>`), and `m:lifecycle_cursor` is their minimum, so one broken
//! sink never stalls the others, and a crash between a confirmation and its persistence only
//! redelivers (with the same id). Commits wake the loops through the trail's committed-seq
//! watch (a hint); a timer is the fallback. While a batch is in flight the next page is read.
//! Position writes go to a task of the loop's own, which writes them in order, one at a time,
//! merging those that settled while the previous one synced: delivery never waits on an fsync.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use ankusa_sinks::{Delivery, Outcome, RetryPolicy, Sink};
use cloudevents::AttributesReader;
use futures::future::BoxFuture;
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::status::{self, SharedStatus, SinkState, SinkStatus};
use super::{event, metrics, outbox};
use crate::audit::{Change, CommitError, Context, History, Trail};
use crate::store::{keys, keys::meta, Entry, Store, StoreError};

/// A page of the outbox, its events built off the runtime while the previous page was in
/// flight.
#[derive(Default)]
struct Page {
    /// The events, in seq order.
    deliveries: Vec<Delivery>,
    /// Each event's row commit time (unix ms), aligned with `deliveries`.
    ats: Vec<u64>,
    /// The last seq the page covers: its last outbox entity (whether or not its event could
    /// be built), or, when the page is not full, the last committed seq (every row up to it
    /// was visible, so none after the page's rows is flagged). Moving the position over it lets
    /// retention and the backlog ceiling see past a run of changes that publish nothing.
    last: Option<u64>,
    /// Whether the page holds as many entities as a page may: more may follow at once.
    full: bool,
}

/// Most events a page makes room for before it is read: the page of a large batch grows as
/// it fills instead of taking its whole size up front.
const MAX_PREALLOCATED: usize = 4096;

/// How the publisher's loops behave.
#[derive(Debug, Clone)]
pub struct PublisherOptions {
    /// The node's URI: every event's `source`.
    pub source: String,
    /// Most events handed to a sink in one attempt.
    pub batch: usize,
    /// How long a loop sleeps when no commit wakes it.
    pub idle: Duration,
    /// Most attempts (batches) in flight per sink, for sinks that keep order across attempts
    /// (Kafka); the others have one at a time.
    pub in_flight: usize,
}

/// A configured sink, ready to run.
pub struct SinkSpec {
    /// Its name.
    pub name: String,
    /// The sink.
    pub sink: Arc<dyn Sink>,
    /// Its retry schedule.
    pub retry: RetryPolicy,
}

/// The running publisher: one task per sink.
pub struct Publisher {
    sinks: Vec<(String, Arc<dyn Sink>)>,
    statuses: Vec<SharedStatus>,
    /// Per sink, how many times an operator enabled it again (its loop waits for a newer
    /// count while disabled).
    enables: Vec<watch::Sender<u64>>,
    /// One enable at a time, from its check to the status it leaves.
    enabling: tokio::sync::Mutex<()>,
    tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
}

/// Why a sink could not be enabled again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EnableRefused {
    /// No configured sink has that name.
    #[error("no such sink")]
    NoSuchSink,
    /// The sink is not disabled (only a destination's 410 disables one).
    #[error("the sink is not disabled")]
    NotDisabled,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.sinks.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Publisher").field("sinks", &names).finish()
    }
}

impl Publisher {
    /// Start one loop per sink; they stop when `shutdown` is cancelled.
    pub async fn start(
        trail: Trail,
        sinks: Vec<SinkSpec>,
        options: PublisherOptions,
        shutdown: CancellationToken,
    ) -> Result<Publisher, StoreError> {
        let mut statuses = Vec::new();
        let mut enables = Vec::new();
        let mut tasks = Vec::new();
        let names = sinks
            .iter()
            .map(|s| (s.name.clone(), s.sink.clone()))
            .collect();
        // Every position is read, off the runtime, before any lane starts: a read that fails
        // leaves none running.
        let (store, cursors) = (
            trail.store().clone(),
            sinks
                .iter()
                .map(|s| meta::sink_cursor(&s.name))
                .collect::<Vec<_>>(),
        );
        let positions = tokio::task::spawn_blocking(move || {
            cursors
                .iter()
                .map(|cursor| store.meta_u64(cursor))
                .collect::<Result<Vec<u64>, StoreError>>()
        })
        .await
        .map_err(|e| StoreError::Unavailable(e.to_string()))??;
        for (spec, position) in sinks.into_iter().zip(positions) {
            let status = status::starting(&spec.name, spec.sink.kind(), position);
            let (enable, enabled) = watch::channel(0);
            let lane = Lane {
                trail: trail.clone(),
                spec,
                options: options.clone(),
                status: status.clone(),
                shutdown: shutdown.clone(),
                enabled,
                position,
                readers: TaskTracker::new(),
            };
            statuses.push(status);
            enables.push(enable);
            tasks.push(tokio::spawn(lane.run()));
        }
        Ok(Publisher {
            sinks: names,
            statuses,
            enables,
            enabling: tokio::sync::Mutex::new(()),
            tasks: std::sync::Mutex::new(tasks),
        })
    }

    /// Enable sink `name` again after its destination disabled it (a 410), once the operator
    /// has mended the destination: its loop resumes from its position. Records the operator's
    /// act (`sink.enable`, resource `sinks/<name>`) first; returns the row's seq.
    pub async fn enable(
        &self,
        trail: &Trail,
        ctx: Context,
        name: &str,
    ) -> Result<u64, CommitError<EnableRefused>> {
        let index = self
            .sinks
            .iter()
            .position(|(n, _)| n == name)
            .ok_or(CommitError::Refused(EnableRefused::NoSuchSink))?;
        // One at a time, and the status leaves `Disabled` with the enable: a second enable of
        // one stop is refused, and none is sent while the sink is not stopped, so none can
        // outlive its stop to resume the next.
        let _one = self.enabling.lock().await;
        let status = &self.statuses[index];
        if status::snapshot(status).state != SinkState::Disabled {
            return Err(CommitError::Refused(EnableRefused::NotDisabled));
        }
        let sink = name.to_owned();
        let committed = trail
            .commit(ctx, move |_| Ok((sink_change("sink.enable", &sink), ())))
            .await?;
        self.enables[index].send_modify(|count| *count += 1);
        status::update(status, |s| s.state = SinkState::Running);
        Ok(committed.seq)
    }

    /// Every sink's status.
    pub fn statuses(&self) -> Vec<SinkStatus> {
        self.statuses.iter().map(status::snapshot).collect()
    }

    /// The sink named `name`, for operations beside its loop (redriving dead letters).
    pub fn sink(&self, name: &str) -> Option<Arc<dyn Sink>> {
        self.sinks
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.clone())
    }

    /// Wait for every loop to stop (after the shutdown token was cancelled).
    pub async fn join(&self) {
        let tasks = match self.tasks.lock() {
            Ok(mut t) => std::mem::take(&mut *t),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        };
        for t in tasks {
            let _ = t.await;
        }
    }
}

/// One sink's loop.
struct Lane {
    trail: Trail,
    spec: SinkSpec,
    options: PublisherOptions,
    status: SharedStatus,
    shutdown: CancellationToken,
    /// How many times an operator enabled the sink again (see [`Publisher::enable`]).
    enabled: watch::Receiver<u64>,
    /// The last seq delivered (or dead-lettered): the next read starts after it. May be ahead
    /// of the persisted position while a position write is in flight.
    position: u64,
    /// The outbox readers started (each on the blocking pool), awaited when the lane ends.
    readers: TaskTracker,
}

/// A change of sink `sink`'s state (`sink.enable`, `sink.disable`): resource `sinks/<name>`.
fn sink_change(action: &str, sink: &str) -> Change {
    Change::new(action, format!("sinks/{sink}")).detail("sink", sink)
}

/// What stopped a batch short.
enum Stop {
    Retry(Option<Duration>, String),
    Disabled(String),
}

/// One attempt in flight: its page and its outcomes to come.
struct InFlight {
    page: Page,
    outcomes: BoxFuture<'static, Vec<Outcome>>,
    started: std::time::Instant,
}

/// How many pages a reader may have ready before the lane takes them; one more is being
/// read meanwhile. Reading runs on its own thread, beside the lane's submissions.
const READ_AHEAD: usize = 1;

/// Pages being read (and their events built) on the blocking pool, in seq order: after a full
/// page the reader goes on with the next one, up to [`READ_AHEAD`] pages ahead of the lane; it
/// stops after a page that is not full, and when dropped.
struct Reading {
    pages: mpsc::Receiver<Result<Page, StoreError>>,
}

impl Reading {
    /// The next page.
    async fn next(&mut self) -> Result<Page, StoreError> {
        self.pages
            .recv()
            .await
            .unwrap_or_else(|| Err(StoreError::Unavailable("the outbox reader stopped".into())))
    }
}

impl Lane {
    /// The loop: keep up to `in_flight` attempts under way (while the sink says the next may
    /// overtake none of them), each page read while the previous ones are in flight; settle
    /// them oldest first. A failure stops the window: what is still in flight is awaited and
    /// its outcomes ignored, and the loop starts again from the position (what those attempts
    /// delivered comes again, with the same ids).
    async fn run(mut self) {
        let mut committed = self.trail.committed();
        let mut attempt: u32 = 0;
        let persister = Persister::start(&self.trail, &self.spec.name, &self.status);
        let mut in_flight: VecDeque<InFlight> = VecDeque::new();
        // The read of the page after the last one submitted (or after the position); `None`
        // while nothing more is to be submitted before the window drains.
        let mut reading: Option<Reading> = Some(self.read(self.position));
        // Whether the last attempt lets the next one be submitted before it is settled.
        let mut open = true;
        let window = self.options.in_flight.max(1);
        while !self.shutdown.is_cancelled() {
            let room = in_flight.len() < window && (open || in_flight.is_empty());
            if let Some(mut read) = if room { reading.take() } else { None } {
                let page = match read.next().await {
                    Ok(page) => page,
                    Err(e) => {
                        self.note_error(&format!("reading the outbox: {e}"));
                        // With attempts in flight, read again once they are settled.
                        if in_flight.is_empty() {
                            self.pause(Duration::from_secs(1)).await;
                            reading = Some(self.read(self.position));
                        }
                        continue;
                    }
                };
                if !page.deliveries.is_empty() {
                    if in_flight.is_empty() {
                        status::update(&self.status, |s| {
                            s.oldest_unconfirmed_at = page.ats.first().copied()
                        });
                    }
                    // The next page is read while this one is handed over: by the same reader
                    // after a full page.
                    reading = match page.last {
                        Some(_) if page.full => Some(read),
                        last => last.map(|last| self.read(last)),
                    };
                    let started = std::time::Instant::now();
                    let submitted = self.spec.sink.submit(&page.deliveries).await;
                    open = submitted.open;
                    in_flight.push_back(InFlight {
                        page,
                        outcomes: submitted.outcomes,
                        started,
                    });
                    continue;
                }
                if !in_flight.is_empty() {
                    // Nothing more to submit for now; read again once the window drained.
                    continue;
                }
                if let Some(last) = page.last.filter(|l| *l > self.position) {
                    // Nothing to send up to `last` (rows that publish nothing, or whose
                    // events cannot be built, logged): pass over them.
                    self.position = last;
                    persister.write(last, Vec::new());
                    reading = Some(self.read(self.position));
                    continue;
                }
                status::update(&self.status, |s| s.oldest_unconfirmed_at = None);
                report_position(&self.spec.name, &self.status);
                tokio::select! {
                    _ = committed.changed() => {}
                    _ = tokio::time::sleep(self.options.idle) => {}
                    _ = self.shutdown.cancelled() => break,
                }
                reading = Some(self.read(self.position));
                continue;
            }
            let Some(oldest) = in_flight.pop_front() else {
                // Nothing in flight and no read under way: start again from the position.
                open = true;
                reading = Some(self.read(self.position));
                continue;
            };
            let outcomes = oldest.outcomes.await;
            metrics::attempted(&self.spec.name, oldest.started.elapsed());
            let (to, dead, stop) = self.settle(&oldest.page, &outcomes);
            // Freeing a page's events is a thousand small frees: not on this loop.
            drop(tokio::task::spawn_blocking(move || drop(oldest.page)));
            if to > self.position {
                // A crash here: the sink has these events, the store does not know it yet.
                fail::fail_point!("lifecycle::before_persist");
                self.position = to;
                persister.write(to, dead);
            }
            match stop {
                None => {
                    attempt = 0;
                    status::update(&self.status, |s| {
                        s.state = SinkState::Running;
                        if let Some(next) = in_flight.front() {
                            s.oldest_unconfirmed_at = next.page.ats.first().copied();
                        }
                    });
                    if in_flight.is_empty() {
                        open = true;
                        if reading.is_none() {
                            reading = Some(self.read(self.position));
                        }
                    }
                }
                Some(Stop::Retry(after, reason)) => {
                    abandon(&mut in_flight, &mut reading).await;
                    let delay = self.spec.retry.delay(attempt, after);
                    attempt = attempt.saturating_add(1);
                    metrics::failed(&self.spec.name, &reason, true);
                    status::update(&self.status, |s| {
                        s.state = SinkState::Retrying;
                        s.retries += 1;
                        s.last_error = Some(reason.clone());
                    });
                    tracing::warn!(sink = %self.spec.name, reason = %reason, delay_ms = delay.as_millis() as u64, "lifecycle delivery failed; will retry");
                    self.pause(delay).await;
                    open = true;
                    reading = Some(self.read(self.position));
                }
                Some(Stop::Disabled(reason)) => {
                    abandon(&mut in_flight, &mut reading).await;
                    metrics::failed(&self.spec.name, "disabled", false);
                    tracing::error!(sink = %self.spec.name, reason = %reason, "lifecycle sink disabled by its destination; keeping its position until an operator enables it");
                    // Recorded before the status shows it: an enable, sent only while the
                    // status shows the sink disabled, comes after it in the trail.
                    self.record_disabled(&reason).await;
                    status::update(&self.status, |s| {
                        s.state = SinkState::Disabled;
                        s.last_error = Some(reason.clone());
                    });
                    tokio::select! {
                        enabled = self.enabled.changed() => {
                            if enabled.is_err() {
                                break;
                            }
                        }
                        _ = self.shutdown.cancelled() => break,
                    }
                    tracing::info!(sink = %self.spec.name, position = self.position, "lifecycle sink enabled again; resuming from its position");
                    attempt = 0;
                    status::update(&self.status, |s| s.state = SinkState::Running);
                    open = true;
                    reading = Some(self.read(self.position));
                }
            }
        }
        abandon(&mut in_flight, &mut reading).await;
        // Readers left behind end at their next page (nobody takes it); once they have, the
        // lane holds the store no longer.
        self.readers.close();
        self.readers.wait().await;
        persister.finish().await;
        status::update(&self.status, |s| {
            if s.state != SinkState::Disabled {
                s.state = SinkState::Stopped;
            }
        });
    }

    /// Classify the outcomes in order: the position moves over delivered and dead-lettered
    /// events up to the first that must be retried.
    fn settle(&self, batch: &Page, outcomes: &[Outcome]) -> (u64, Vec<Entry>, Option<Stop>) {
        let mut to = self.position;
        let mut dead = Vec::new();
        let (mut delivered, mut dead_lettered) = (0, 0);
        let mut stop = None;
        for (i, d) in batch.deliveries.iter().enumerate() {
            match outcomes.get(i) {
                Some(Outcome::Delivered) => delivered += 1,
                Some(Outcome::Rejected { reason }) => {
                    tracing::error!(sink = %self.spec.name, seq = d.seq, reason = %reason, "lifecycle event refused for good; dead-lettered");
                    dead.push(dead_letter(&self.spec.name, d, reason, batch.ats[i]));
                    dead_lettered += 1;
                }
                Some(Outcome::Retry { after, reason }) => {
                    stop = Some(Stop::Retry(*after, reason.clone()));
                    break;
                }
                Some(Outcome::Disabled { reason }) => {
                    stop = Some(Stop::Disabled(reason.clone()));
                    break;
                }
                None => {
                    stop = Some(Stop::Retry(None, "sink returned too few outcomes".into()));
                    break;
                }
            }
            to = d.seq;
        }
        if stop.is_none() {
            // Rows of the page whose events could not be built are passed over too.
            to = to.max(batch.last.unwrap_or(to));
        }
        status::update(&self.status, |s| {
            s.delivered += delivered;
            s.dead_lettered += dead_lettered;
        });
        metrics::settled(&self.spec.name, delivered, dead_lettered);
        (to, dead, stop)
    }

    /// Start reading the pages after `after` and building their events, off the runtime.
    fn read(&self, after: u64) -> Reading {
        let store = self.trail.store().clone();
        let history = self.trail.history().clone();
        let source = self.options.source.clone();
        let limit = self.options.batch;
        let committed = self.trail.committed();
        let (pages, taken) = mpsc::channel(READ_AHEAD);
        drop(self.readers.spawn_blocking(move || {
            let mut after = after;
            loop {
                // Read before the outbox: every row up to it is already in the store.
                let up_to = *committed.borrow();
                let page = read_page(&store, &history, &source, after, limit, up_to);
                let next = match &page {
                    Ok(page) if page.full => page.last,
                    _ => None,
                };
                // The lane dropped the reader (a retry starts again from its position).
                if pages.blocking_send(page).is_err() {
                    return;
                }
                match next {
                    Some(last) => after = last,
                    None => return,
                }
            }
        }));
        Reading { pages: taken }
    }

    /// The node's own change of the sink's state, in the trail: a `sink.disable` row (the
    /// system's), resource `sinks/<name>`, saying why and at which position. Not written
    /// (the store refuses it) is logged; the sink is disabled all the same.
    async fn record_disabled(&self, reason: &str) {
        let (sink, reason, position) = (self.spec.name.clone(), reason.to_owned(), self.position);
        let committed = self
            .trail
            .commit(Context::system(), move |_| {
                let change = sink_change("sink.disable", &sink)
                    .detail("reason", reason.clone())
                    .detail("position", position);
                Ok::<_, CommitError<std::convert::Infallible>>((change, ()))
            })
            .await;
        if let Err(e) = committed {
            tracing::error!(sink = %self.spec.name, error = ?e, "the sink.disable row could not be written");
        }
    }

    fn note_error(&self, error: &str) {
        note_error(&self.spec.name, &self.status, error);
    }

    async fn pause(&self, delay: Duration) {
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = self.shutdown.cancelled() => {}
        }
    }
}

/// The page of up to `limit` events after `after`, with `committed` the last seq committed
/// before the read began.
fn read_page(
    store: &Store,
    history: &History,
    source: &str,
    after: u64,
    limit: usize,
    committed: u64,
) -> Result<Page, StoreError> {
    let mut page = Page {
        deliveries: Vec::with_capacity(limit.min(MAX_PREALLOCATED)),
        ats: Vec::with_capacity(limit.min(MAX_PREALLOCATED)),
        ..Page::default()
    };
    let visited = outbox::visit(store, after, limit, |row, entity| {
        match event::build(&row, entity, history, source) {
            Ok(event) => {
                page.ats.push(row.at);
                page.deliveries.push(Delivery {
                    seq: row.seq,
                    event,
                });
            }
            Err(e) => tracing::error!(error = %e, "lifecycle event not built; passed over"),
        }
    })?;
    page.last = visited.last;
    page.full = visited.entities >= limit;
    if !page.full && committed > after {
        page.last = Some(page.last.unwrap_or(0).max(committed));
    }
    Ok(page)
}

/// Give up on what is in flight after a failure: wait for every attempt's outcomes (they are
/// not counted: the position stays before them, so what they delivered comes again, with the
/// same ids) and drop the read under way.
async fn abandon(in_flight: &mut VecDeque<InFlight>, reading: &mut Option<Reading>) {
    for attempt in in_flight.drain(..) {
        drop(attempt.outcomes.await);
    }
    *reading = None;
}

/// A lane's position writes, in a task of their own. The lane hands each new position (with
/// the dead letters that go with it) over and moves on; the task writes them through the
/// writer in order, one at a time, and merges into one write whatever was handed over while
/// the previous write synced (the newest position, every dead letter). The status shows a
/// position once it is durable.
///
/// A write that fails is tried again, merged with what came since, until it lands: a later
/// position must never be persisted without the dead letters of an earlier one (their events
/// would be past the position and in no store). Once the lane has stopped, a failed write is
/// given up: nothing was persisted, so after a restart those events are delivered again, with
/// their ids, and refused ones are dead-lettered again.
struct Persister {
    positions: mpsc::UnboundedSender<(u64, Vec<Entry>)>,
    task: JoinHandle<()>,
}

/// The pause before a failed position write is tried again.
const PERSIST_RETRY: Duration = Duration::from_secs(1);

impl Persister {
    fn start(trail: &Trail, sink: &str, status: &SharedStatus) -> Persister {
        let (positions, mut handed) = mpsc::unbounded_channel::<(u64, Vec<Entry>)>();
        let (trail, sink, status) = (trail.clone(), sink.to_owned(), status.clone());
        let task = tokio::spawn(async move {
            // Handed over and not yet durable: the newest position and every dead letter.
            let mut unwritten: Option<(u64, Vec<Entry>)> = None;
            let mut stopped = false;
            loop {
                let (mut to, mut dead) = match unwritten.take() {
                    Some(write) => write,
                    None => match handed.recv().await {
                        Some(write) => write,
                        None => break,
                    },
                };
                loop {
                    match handed.try_recv() {
                        Ok((newer, more)) => {
                            to = to.max(newer);
                            dead.extend(more);
                        }
                        Err(mpsc::error::TryRecvError::Empty) => break,
                        Err(mpsc::error::TryRecvError::Disconnected) => {
                            stopped = true;
                            break;
                        }
                    }
                }
                // Dead letters are few: copied only so that a failed write keeps them.
                match trail.advance(&sink, to, dead.clone()).await {
                    Ok(()) => {
                        fail::fail_point!("lifecycle::after_persist");
                        status::update(&status, |s| s.position = s.position.max(to));
                        report_position(&sink, &status);
                    }
                    Err(e) => {
                        note_error(&sink, &status, &format!("persisting the position: {e}"));
                        if stopped {
                            break;
                        }
                        unwritten = Some((to, dead));
                        tokio::time::sleep(PERSIST_RETRY).await;
                    }
                }
            }
        });
        Persister { positions, task }
    }

    /// Persist that the sink has everything up to `to` (and dead-lettered `dead`).
    fn write(&self, to: u64, dead: Vec<Entry>) {
        // The task ends only after the sender is dropped (`finish`).
        let _ = self.positions.send((to, dead));
    }

    /// Write what was handed over and stop.
    async fn finish(self) {
        drop(self.positions);
        if let Err(e) = self.task.await {
            tracing::error!(error = %e, "lifecycle position writer failed");
        }
    }
}

/// Publish a sink's persisted position and its lag (age of the oldest unconfirmed event).
fn report_position(sink: &str, status: &SharedStatus) {
    let snapshot = status::snapshot(status);
    let now = chrono::Utc::now().timestamp_millis().max(0) as u64;
    let lag = snapshot
        .oldest_unconfirmed_at
        .map_or(0, |at| now.saturating_sub(at));
    metrics::position(sink, snapshot.position, Duration::from_millis(lag));
}

fn note_error(sink: &str, status: &SharedStatus, error: &str) {
    tracing::error!(sink, error, "lifecycle publisher error");
    metrics::failed(sink, "publisher", false);
    status::update(status, |s| s.last_error = Some(error.to_owned()));
}

/// A dead letter: the event (structured mode) and why it was refused, keyed by sink and seq.
fn dead_letter(sink: &str, d: &Delivery, reason: &str, at: u64) -> Entry {
    let event = ankusa_sinks::structured_value(&d.event)
        .unwrap_or_else(|e| json!({"id": d.event.id(), "unencodable": e.to_string()}));
    let value = json!({
        "sink": sink,
        "seq": d.seq,
        "reason": reason,
        "at": at,
        "event": event,
    });
    (
        keys::dead_letter_key(sink, d.seq),
        serde_json::to_vec(&value).expect("a dead letter always serializes"),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::audit::{SystemClock, TrailOptions};
    use crate::lifecycle::dead_letters;
    use crate::store::Store;

    /// A trail on a fresh store with one sink, `s`, and its status.
    fn sink_s() -> (tempfile::TempDir, Store, Trail, SharedStatus) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let options = TrailOptions {
            sinks: vec!["s".into()],
            ..TrailOptions::default()
        };
        let trail = Trail::start(store.clone(), options, Arc::new(SystemClock)).unwrap();
        (dir, store, trail, status::starting("s", "file", 0))
    }

    /// Positions handed over faster than they sync are merged, and none of what was handed
    /// over is lost: the last position and every dead letter reach the store, and the status
    /// shows the position once it is durable.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn handed_over_positions_all_reach_the_store_in_order() {
        let (_dir, store, trail, status) = sink_s();
        #[cfg(feature = "failpoints")]
        let _slow = {
            let scenario = fail::FailScenario::setup();
            // Every write through the syncer, each taking 20 ms.
            fail::cfg("audit::inline", "return").unwrap();
            fail::cfg("audit::sync_delay", "sleep(20)").unwrap();
            scenario
        };
        let persister = Persister::start(&trail, "s", &status);
        for to in 1..=50u64 {
            let letter = (keys::dead_letter_key("s", to), br#"{}"#.to_vec());
            persister.write(to, if to % 5 == 0 { vec![letter] } else { vec![] });
        }
        persister.finish().await;
        assert_eq!(store.meta_u64(&meta::sink_cursor("s")).unwrap(), 50);
        assert_eq!(dead_letters::count(&store, "s").unwrap(), 10);
        assert_eq!(status::snapshot(&status).position, 50);
        trail.shutdown().await;
    }

    /// A position write that fails is tried again with what came since: the dead letters of
    /// the failed write reach the store with the later position, never after it or not at all.
    #[cfg(feature = "failpoints")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_position_write_keeps_its_dead_letters() {
        let (_dir, store, trail, status) = sink_s();
        let scenario = fail::FailScenario::setup();
        // Every write through the syncer; the first one fails.
        fail::cfg("audit::inline", "return").unwrap();
        fail::cfg("audit::write", "1*return").unwrap();
        let persister = Persister::start(&trail, "s", &status);
        persister.write(7, vec![(keys::dead_letter_key("s", 7), br#"{}"#.to_vec())]);
        while status::snapshot(&status).last_error.is_none() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        persister.write(20, Vec::new());
        while status::snapshot(&status).position < 20 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        persister.finish().await;
        assert_eq!(store.meta_u64(&meta::sink_cursor("s")).unwrap(), 20);
        assert_eq!(dead_letters::count(&store, "s").unwrap(), 1);
        drop(scenario);
        trail.shutdown().await;
    }
}
