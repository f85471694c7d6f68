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
//!
//! The lane dead-letters at most `max_dead_letters` for its sink ([`LetterCount`] counts them, with
//! the operators' removals): an event refused for good beyond that is a failure, retried
//! with the sink's backoff (`dead_letters_full`), so the position never passes it without
//! its dead letter.

mod confirming;
mod sending;

use std::collections::VecDeque;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::attempt::Attempt;
use super::persister::Persister;
use super::reader::{Outbox, Page, Reader};
use super::{PublisherOptions, SinkSpec};
use crate::audit::Trail;
use crate::lifecycle::dead_letters::LetterCount;
use crate::lifecycle::status::{self, SharedStatus, SinkState};

/// Where a lane is: what its next step does.
pub(super) enum Step {
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

/// What a lane shares with the publisher's handle, and through it with the API.
pub(super) struct Shared {
    /// What operators see of the sink; the lane writes it.
    pub(super) status: SharedStatus,
    /// How many times an operator enabled the sink again.
    pub(super) enables: watch::Receiver<u64>,
    /// How many dead letters the sink holds; operators' removals count theirs out.
    pub(super) counted: LetterCount,
}

/// One sink's lane, and all of its state.
pub(super) struct Lane {
    /// The trail: its outbox is read, positions and `sink.disable` rows go through it.
    trail: Trail,
    /// The sink, its name and its retry schedule.
    spec: SinkSpec,
    /// The publisher's page size, window and idle timer.
    options: PublisherOptions,
    /// What operators see of the sink; the lane writes it, the API reads it.
    status: SharedStatus,
    /// The node's shutdown.
    shutdown: CancellationToken,
    /// How many times an operator enabled the sink again (see [`super::Publisher::enable`]).
    enables: watch::Receiver<u64>,
    /// How many dead letters the sink holds, against `options.max_dead_letters`.
    counted: LetterCount,
    /// The trail's committed seq: a change wakes an idle lane.
    committed: watch::Receiver<u64>,
    /// Writes the positions, in order, in a task of its own.
    persister: Persister,
    /// The outbox readers started (each on the blocking pool), awaited when the lane ends.
    readers: TaskTracker,
    /// The last seq delivered (or dead-lettered): the next read starts after it. May be ahead
    /// of the persisted position while a position write is under way.
    position: u64,
    /// The attempts under way, oldest first.
    window: VecDeque<Attempt>,
    /// The read of the page after the last one submitted (or after the position); `None`
    /// while nothing more is to be submitted before the window drains.
    reader: Option<Reader>,
    /// Failed attempts in a row, for the backoff.
    failures: u32,
    /// What the next step does.
    state: Step,
}

impl Lane {
    /// A lane for `spec` starting at `position`; its persister starts now, its first read with
    /// its first step.
    pub(super) fn new(
        trail: &Trail,
        spec: SinkSpec,
        options: PublisherOptions,
        shared: Shared,
        shutdown: CancellationToken,
        position: u64,
    ) -> Lane {
        let Shared {
            status,
            enables,
            counted,
        } = shared;
        Lane {
            committed: trail.committed(),
            persister: Persister::start(trail, &spec.name, &status),
            trail: trail.clone(),
            spec,
            options,
            status,
            shutdown,
            enables,
            counted,
            readers: TaskTracker::new(),
            position,
            window: VecDeque::new(),
            reader: None,
            failures: 0,
            state: Step::Resuming,
        }
    }

    /// Step until stopped, then wind down.
    pub(super) async fn run(mut self) {
        while !matches!(self.state, Step::Stopped) {
            self.step().await;
        }
        self.finish().await;
    }

    /// Take one step: do what the state says, and move to the state it leads to.
    pub(super) async fn step(&mut self) {
        self.state = match std::mem::replace(&mut self.state, Step::Stopped) {
            Step::Resuming => self.resume(),
            Step::Reading => self.take_page().await,
            Step::Sending(page) => self.send(page).await,
            Step::Confirming => self.confirm_oldest().await,
            Step::Idle => self.idle().await,
            Step::Retrying(delay) => self.back_off(delay).await,
            Step::Disabled => self.await_enable().await,
            Step::Stopped => Step::Stopped,
        };
    }

    /// The state the window and the reader call for (stopped once shutdown is asked for):
    /// another page while there is room, else the oldest attempt's outcomes, else a new read.
    fn next_state(&self) -> Step {
        if self.shutdown.is_cancelled() {
            Step::Stopped
        } else if self.has_room() && self.reader.is_some() {
            Step::Reading
        } else if !self.window.is_empty() {
            Step::Confirming
        } else {
            Step::Resuming
        }
    }

    /// Whether another attempt may start: the window is not full, and the newest attempt
    /// lets the next overtake it.
    fn has_room(&self) -> bool {
        let window = self.options.in_flight.max(1);
        self.window.len() < window && self.window.back().is_none_or(|newest| newest.open)
    }

    /// Start reading after the position.
    fn resume(&mut self) -> Step {
        self.reader = Some(self.read(self.position));
        self.next_state()
    }

    /// Caught up: report it, then wait for a commit (or the idle timer) to read again.
    async fn idle(&mut self) -> Step {
        status::update(&self.status, |s| s.oldest_unconfirmed_at = None);
        status::report_position(&self.spec.name, &self.status);
        tokio::select! {
            _ = self.committed.changed() => {}
            _ = tokio::time::sleep(self.options.idle) => {}
            _ = self.shutdown.cancelled() => return Step::Stopped,
        }
        Step::Resuming
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

#[cfg(test)]
mod tests;
