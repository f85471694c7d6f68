//! One sink's lane: a state machine that reads the outbox after the sink's position, hands
//! pages to the sink, and moves the position over what the sink confirmed, oldest first.
//!
//! The lane keeps up to `lifecycle.in_flight` attempts under way while the sink says the next
//! may overtake none of them (Kafka; webhook and file sinks have one at a time), the next page
//! read meanwhile. A failure stops the window: what is still under way is awaited and its
//! outcomes ignored, and the lane starts again from the position (what those attempts
//! delivered comes again, with the same ids). Each state is one step ([`Lane::step`]), so a
//! test can drive the lane one step at a time.
//!
//! The shutdown token is looked at whenever the lane picks its next state from the window
//! ([`Lane::next_state`]), and waits (idle, backoff, disabled) end on it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::attempt::{self, Attempt, Failure};
use super::persister::Persister;
use super::reader::{Outbox, Page, Reader};
use super::{sink_change, PublisherOptions, SinkSpec};
use crate::audit::{CommitError, Context, Trail};
use crate::lifecycle::metrics;
use crate::lifecycle::status::{self, SharedStatus, SinkState};

/// Where a lane is: what its next step does.
pub(super) enum State {
    /// No read under way and nothing to confirm: a read starts after the position.
    Resuming,
    /// Taking the next page from the reader: the window has room for another attempt.
    Reading,
    /// Handing a page's events to the sink: an attempt starts.
    Sending(Page),
    /// Awaiting the oldest attempt's outcomes, to move the position over them.
    Confirming,
    /// Caught up: waiting for a commit, the idle timer or shutdown.
    Idle,
    /// An attempt failed: pausing this long before starting again from the position.
    Retrying(Duration),
    /// The destination disabled the sink (a 410): waiting for an operator's enable.
    Disabled,
    /// Shut down (or its publisher is gone): the lane ends.
    Stopped,
}

/// One sink's loop, and all of its state.
pub(super) struct Lane {
    trail: Trail,
    spec: SinkSpec,
    options: PublisherOptions,
    status: SharedStatus,
    shutdown: CancellationToken,
    /// How many times an operator enabled the sink again (see [`super::Publisher::enable`]).
    enables: watch::Receiver<u64>,
    /// The trail's committed seq: a change wakes an idle lane.
    committed: watch::Receiver<u64>,
    /// Writes the positions, in order, in a task of its own.
    persister: Persister,
    /// The outbox readers started (each on the blocking pool), awaited when the lane ends.
    readers: TaskTracker,
    /// The last seq delivered (or dead-lettered): the next read starts after it. May be ahead
    /// of the persisted position while a position write is in flight.
    position: u64,
    /// The attempts under way, oldest first.
    window: VecDeque<Attempt>,
    /// The read of the page after the last one submitted (or after the position); `None`
    /// while nothing more is to be submitted before the window drains.
    reader: Option<Reader>,
    /// Failed attempts in a row, for the backoff.
    failures: u32,
    /// What the next step does.
    state: State,
}

impl Lane {
    /// A lane for `spec` starting at `position`; its persister starts now, its first read with
    /// its first step.
    pub(super) fn new(
        trail: &Trail,
        spec: SinkSpec,
        options: PublisherOptions,
        status: SharedStatus,
        shutdown: CancellationToken,
        enables: watch::Receiver<u64>,
        position: u64,
    ) -> Lane {
        Lane {
            committed: trail.committed(),
            persister: Persister::start(trail, &spec.name, &status),
            trail: trail.clone(),
            spec,
            options,
            status,
            shutdown,
            enables,
            readers: TaskTracker::new(),
            position,
            window: VecDeque::new(),
            reader: None,
            failures: 0,
            state: State::Resuming,
        }
    }

    /// Step until stopped, then wind down.
    pub(super) async fn run(mut self) {
        while !matches!(self.state, State::Stopped) {
            self.step().await;
        }
        self.finish().await;
    }

    /// Take one step: do what the state says, and move to the state it leads to.
    pub(super) async fn step(&mut self) {
        self.state = match std::mem::replace(&mut self.state, State::Stopped) {
            State::Resuming => self.resume(),
            State::Reading => self.take_page().await,
            State::Sending(page) => self.send(page).await,
            State::Confirming => self.confirm_oldest().await,
            State::Idle => self.idle().await,
            State::Retrying(delay) => self.back_off(delay).await,
            State::Disabled => self.await_enable().await,
            State::Stopped => State::Stopped,
        };
    }

    /// The state the window and the reader call for (stopped once shutdown is asked for):
    /// another page while there is room, else the oldest attempt's outcomes, else a new read.
    fn next_state(&self) -> State {
        if self.shutdown.is_cancelled() {
            State::Stopped
        } else if self.has_room() && self.reader.is_some() {
            State::Reading
        } else if !self.window.is_empty() {
            State::Confirming
        } else {
            State::Resuming
        }
    }

    /// Whether another attempt may start: the window is not full, and the newest attempt
    /// lets the next overtake it.
    fn has_room(&self) -> bool {
        let window = self.options.in_flight.max(1);
        self.window.len() < window && self.window.back().is_none_or(|newest| newest.open)
    }

    /// Start reading after the position.
    fn resume(&mut self) -> State {
        self.reader = Some(self.read(self.position));
        self.next_state()
    }

    /// Take the next page; the next read goes on in the same reader after a full page.
    async fn take_page(&mut self) -> State {
        let Some(mut reader) = self.reader.take() else {
            return self.next_state();
        };
        let page = match reader.next().await {
            Ok(page) => page,
            Err(e) => return self.read_failed(&e.to_string()).await,
        };
        if page.deliveries.is_empty() {
            return self.nothing_to_send(page);
        }
        self.reader = match page.last {
            Some(_) if page.full => Some(reader),
            last => last.map(|last| self.read(last)),
        };
        State::Sending(page)
    }

    /// A read failed: with attempts under way, read again once they are confirmed; else
    /// after a pause.
    async fn read_failed(&mut self, error: &str) -> State {
        self.note_error(&format!("reading the outbox: {error}"));
        if !self.window.is_empty() {
            return self.next_state();
        }
        pause(&self.shutdown, Duration::from_secs(1)).await;
        State::Resuming
    }

    /// A page with no event: wait for the window to drain, or pass over rows that publish
    /// nothing (or whose events cannot be built, logged), or idle when caught up.
    fn nothing_to_send(&mut self, page: Page) -> State {
        if !self.window.is_empty() {
            // Nothing more to submit for now; read again once the window drained.
            return self.next_state();
        }
        match page.last.filter(|last| *last > self.position) {
            Some(last) => {
                self.position = last;
                self.persister.write(last, Vec::new());
                State::Resuming
            }
            None => State::Idle,
        }
    }

    /// Hand `page` to the sink: one more attempt under way.
    async fn send(&mut self, page: Page) -> State {
        if self.window.is_empty() {
            let oldest = page.ats.first().copied();
            status::update(&self.status, |s| s.oldest_unconfirmed_at = oldest);
        }
        let started = Instant::now();
        let submitted = self.spec.sink.submit(&page.deliveries).await;
        self.window.push_back(Attempt {
            page,
            outcomes: submitted.outcomes,
            open: submitted.open,
            started,
        });
        self.next_state()
    }

    /// Await the oldest attempt's outcomes and move the position over what they confirm.
    async fn confirm_oldest(&mut self) -> State {
        let Some(oldest) = self.window.pop_front() else {
            return State::Resuming;
        };
        let outcomes = oldest.outcomes.await;
        metrics::attempted(&self.spec.name, oldest.started.elapsed());
        let tally = attempt::tally(&self.spec.name, self.position, &oldest.page, &outcomes);
        let dead_lettered = tally.dead.len() as u64;
        status::update(&self.status, |s| {
            s.delivered += tally.delivered;
            s.dead_lettered += dead_lettered;
        });
        metrics::tallied(&self.spec.name, tally.delivered, dead_lettered);
        // Freeing a page's events is a thousand small frees: not on this loop.
        drop(tokio::task::spawn_blocking(move || drop(oldest.page)));
        if tally.to > self.position {
            // A crash here: the sink has these events, the store does not know it yet.
            fail::fail_point!("lifecycle::before_persist");
            self.position = tally.to;
            self.persister.write(tally.to, tally.dead);
        }
        match tally.failure {
            None => self.confirmed(),
            Some(Failure::Retry(after, reason)) => self.retry(after, &reason).await,
            Some(Failure::Disabled(reason)) => self.disable(&reason).await,
        }
    }

    /// The oldest attempt went through: the sink runs; with nothing left under way, a read
    /// starts after the position unless one is under way already.
    fn confirmed(&mut self) -> State {
        self.failures = 0;
        status::update(&self.status, |s| {
            s.state = SinkState::Running;
            if let Some(next) = self.window.front() {
                s.oldest_unconfirmed_at = next.page.ats.first().copied();
            }
        });
        if self.window.is_empty() && self.reader.is_none() {
            return State::Resuming;
        }
        self.next_state()
    }

    /// An attempt must be retried: give up what is under way and back off.
    async fn retry(&mut self, after: Option<Duration>, reason: &str) -> State {
        self.abandon().await;
        let delay = self.spec.retry.delay(self.failures, after);
        self.failures = self.failures.saturating_add(1);
        metrics::failed(&self.spec.name, reason, true);
        status::update(&self.status, |s| {
            s.state = SinkState::Retrying;
            s.retries += 1;
            s.last_error = Some(reason.to_owned());
        });
        tracing::warn!(sink = %self.spec.name, reason = %reason, delay_ms = delay.as_millis() as u64, "lifecycle delivery failed; will retry");
        State::Retrying(delay)
    }

    /// Pause before starting again from the position.
    async fn back_off(&mut self, delay: Duration) -> State {
        pause(&self.shutdown, delay).await;
        State::Resuming
    }

    /// The destination disabled the sink: give up what is under way and say so in the trail.
    async fn disable(&mut self, reason: &str) -> State {
        self.abandon().await;
        metrics::failed(&self.spec.name, "disabled", false);
        tracing::error!(sink = %self.spec.name, reason = %reason, "lifecycle sink disabled by its destination; keeping its position until an operator enables it");
        // Recorded before the status shows it: an enable, sent only while the status shows
        // the sink disabled, comes after it in the trail.
        record_disabled(&self.trail, &self.spec.name, self.position, reason).await;
        status::update(&self.status, |s| {
            s.state = SinkState::Disabled;
            s.last_error = Some(reason.to_owned());
        });
        State::Disabled
    }

    /// Wait at the position for an operator's enable; then start again from it.
    async fn await_enable(&mut self) -> State {
        tokio::select! {
            enabled = self.enables.changed() => {
                if enabled.is_err() {
                    return State::Stopped;
                }
            }
            _ = self.shutdown.cancelled() => return State::Stopped,
        }
        tracing::info!(sink = %self.spec.name, position = self.position, "lifecycle sink enabled again; resuming from its position");
        self.failures = 0;
        status::update(&self.status, |s| s.state = SinkState::Running);
        State::Resuming
    }

    /// Caught up: report it, then wait for a commit (or the idle timer) to read again.
    async fn idle(&mut self) -> State {
        status::update(&self.status, |s| s.oldest_unconfirmed_at = None);
        status::report_position(&self.spec.name, &self.status);
        tokio::select! {
            _ = self.committed.changed() => {}
            _ = tokio::time::sleep(self.options.idle) => {}
            _ = self.shutdown.cancelled() => return State::Stopped,
        }
        State::Resuming
    }

    /// Give up on what is under way after a failure: wait for every attempt's outcomes (they
    /// are not counted: the position stays before them, so what they delivered comes again,
    /// with the same ids) and drop the read under way.
    async fn abandon(&mut self) {
        for attempt in self.window.drain(..) {
            drop(attempt.outcomes.await);
        }
        self.reader = None;
    }

    /// Wind down: abandon what is under way, wait for the readers, write the last positions.
    async fn finish(mut self) {
        self.abandon().await;
        // Readers left behind end at their next page (nobody takes it); once they have, the
        // lane holds the store no longer.
        self.readers.close();
        self.readers.wait().await;
        self.persister.finish().await;
        status::update(&self.status, |s| {
            if s.state != SinkState::Disabled {
                s.state = SinkState::Stopped;
            }
        });
    }

    /// Start reading the pages after `after` and building their events, off the runtime.
    fn read(&self, after: u64) -> Reader {
        let outbox = Outbox {
            store: self.trail.store().clone(),
            history: self.trail.history().clone(),
            source: self.options.source.clone(),
            limit: self.options.batch,
            committed: self.trail.committed(),
        };
        Reader::start(&self.readers, outbox, after)
    }

    fn note_error(&self, error: &str) {
        status::note_error(&self.spec.name, &self.status, error);
    }
}

// The lane's attempts are `Send` but not `Sync`, so no `&Lane` may be held across an await:
// what the lane awaits with only a shared look at itself takes the parts it needs.

/// Sleep `delay`, cut short by shutdown.
async fn pause(shutdown: &CancellationToken, delay: Duration) {
    tokio::select! {
        _ = tokio::time::sleep(delay) => {}
        _ = shutdown.cancelled() => {}
    }
}

/// The node's own change of sink `sink`'s state, in the trail: a `sink.disable` row (the
/// system's), resource `sinks/<name>`, saying why and at which position. Not written (the
/// store refuses it) is logged; the sink is disabled all the same.
async fn record_disabled(trail: &Trail, sink: &str, position: u64, reason: &str) {
    let (name, reason) = (sink.to_owned(), reason.to_owned());
    let committed = trail
        .commit(Context::system(), move |_| {
            let change = sink_change("sink.disable", &name)
                .detail("reason", reason.clone())
                .detail("position", position);
            Ok::<_, CommitError<std::convert::Infallible>>((change, ()))
        })
        .await;
    if let Err(e) = committed {
        tracing::error!(sink = %sink, error = ?e, "the sink.disable row could not be written");
    }
}

#[cfg(test)]
mod tests;
