//! The lane's confirming states: the oldest attempt's outcomes move the position, and a
//! failure leads the lane to back off (retry, also when the sink's dead letters are full) or
//! to wait for an operator (disabled). Either way what is still under way is abandoned: its
//! outcomes are ignored and it is sent again.

use std::time::Duration;

use super::{pause, Lane, Step};
use crate::audit::{CommitError, Context, Trail};
use crate::lifecycle::publisher::attempt::{self, Failure};
use crate::lifecycle::publisher::sink_change;
use crate::lifecycle::status::{self, SinkState};
use crate::telemetry;

/// The error kind (and the status' last error) of a sink stopped at its dead-letter ceiling.
const DEAD_LETTERS_FULL: &str = "dead_letters_full";

impl Lane {
    /// Await the oldest attempt's outcomes and move the position over what they confirm.
    pub(super) async fn confirm_oldest(&mut self) -> Step {
        let Some(oldest) = self.window.pop_front() else {
            return Step::Resuming;
        };
        let outcomes = oldest.outcomes.await;
        telemetry::lifecycle::delivery_attempted(&self.spec.name, oldest.started.elapsed());
        let room = self.counted.room(self.options.max_dead_letters);
        let (sink, page) = (&self.spec.name, &oldest.page);
        let tally = attempt::tally(sink, self.position, room, page, &outcomes);
        let dead_lettered = tally.dead.len() as u64;
        // Counted before they are durable: the count is never below what the store holds.
        self.counted.add(dead_lettered);
        status::update(&self.status, |s| {
            s.delivered += tally.delivered;
            s.dead_lettered += dead_lettered;
        });
        telemetry::lifecycle::batch_handled(&self.spec.name, tally.delivered, dead_lettered);
        let handled = page
            .deliveries
            .iter()
            .take_while(|d| d.seq <= tally.to)
            .count();
        telemetry::lifecycle::events_confirmed(&self.spec.name, &page.ats[..handled]);
        // Freeing a page's events is a thousand small frees: not on the lane's task.
        crate::store::blocking::detach(move || drop(oldest.page));
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
            Some(Failure::DeadLettersFull) => self.retry(None, DEAD_LETTERS_FULL).await,
        }
    }

    /// The oldest attempt went through: the sink runs; with nothing left under way, a read
    /// starts after the position unless one is under way already.
    fn confirmed(&mut self) -> Step {
        self.failures = 0;
        status::update(&self.status, |s| {
            s.state = SinkState::Running;
            if let Some(next) = self.window.front() {
                s.oldest_unconfirmed_at = next.page.ats.first().copied();
            }
        });
        if self.window.is_empty() && self.reader.is_none() {
            return Step::Resuming;
        }
        self.next_state()
    }

    /// An attempt must be retried: give up what is under way and back off.
    async fn retry(&mut self, after: Option<Duration>, reason: &str) -> Step {
        self.abandon().await;
        let delay = self.spec.retry.delay(self.failures, after);
        self.failures = self.failures.saturating_add(1);
        telemetry::lifecycle::sink_failed(&self.spec.name, reason, true);
        status::update(&self.status, |s| {
            s.state = SinkState::Retrying;
            s.retries += 1;
            s.last_error = Some(reason.to_owned());
        });
        telemetry::lifecycle::retrying(&self.spec.name, reason, delay);
        Step::Retrying(delay)
    }

    /// Pause before starting again from the position.
    pub(super) async fn back_off(&mut self, delay: Duration) -> Step {
        pause(&self.shutdown, delay).await;
        Step::Resuming
    }

    /// The destination disabled the sink: give up what is under way and say so in the trail.
    async fn disable(&mut self, reason: &str) -> Step {
        self.abandon().await;
        telemetry::lifecycle::sink_failed(&self.spec.name, "disabled", false);
        telemetry::lifecycle::disabled_by_destination(&self.spec.name, reason);
        // Recorded before the status shows it: an enable, sent only while the status shows
        // the sink disabled, comes after it in the trail.
        commit_disable_row(&self.trail, &self.spec.name, self.position, reason).await;
        status::update(&self.status, |s| {
            s.state = SinkState::Disabled;
            s.last_error = Some(reason.to_owned());
        });
        Step::Disabled
    }

    /// Wait at the position for an operator's enable; then start again from it.
    pub(super) async fn await_enable(&mut self) -> Step {
        tokio::select! {
            enabled = self.enables.changed() => {
                if enabled.is_err() {
                    return Step::Stopped;
                }
            }
            _ = self.shutdown.cancelled() => return Step::Stopped,
        }
        telemetry::lifecycle::enabled_again(&self.spec.name, self.position);
        self.failures = 0;
        status::update(&self.status, |s| s.state = SinkState::Running);
        Step::Resuming
    }

    /// Give up on what is under way after a failure: wait for every attempt's outcomes (they
    /// are not counted: the position stays before them, so what they delivered comes again,
    /// with the same ids) and drop the read under way.
    pub(super) async fn abandon(&mut self) {
        for attempt in self.window.drain(..) {
            drop(attempt.outcomes.await);
        }
        self.reader = None;
    }
}

/// The node's own change of sink `sink`'s state, in the trail: a `sink.disable` row (the
/// system's), resource `sinks/<name>`, saying why and at which position. Not written (the
/// store refuses it) is logged; the sink is disabled all the same.
async fn commit_disable_row(trail: &Trail, sink: &str, position: u64, reason: &str) {
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
        telemetry::lifecycle::disable_row_failed(sink, &e);
    }
}
