//! The publisher: one lane per sink, delivering flagged rows in seq order, at least once.
//!
//! The store is the source of truth: each lane (`lane.rs`) reads the outbox after its sink's
//! position (`reader.rs`), hands the events to the sink, and moves the position only over the
//! highest *contiguous* seq the sink confirmed or refused for good (`attempt.rs`; a refusal
//! writes a dead letter in the same batch as the move). Positions are persisted through the
//! writer (`m:lifecycle_cursor:<sink>`) by a task of the lane's own (`persister.rs`), so
//! delivery never waits on an fsync; `m:lifecycle_cursor` is their minimum, so one broken sink
//! never stalls the others, and a crash between a confirmation and its persistence only
//! redelivers (with the same id). Commits wake the lanes through the trail's committed-seq
//! watch (a hint); a timer is the fallback. A sink holds at most `max_dead_letters` dead
//! letters: at the ceiling its lane stops before the next event it would dead-letter,
//! retrying, until an operator removes some (`dead_letters::LetterCount` counts them for both).
//!
//! This file is the handle: it starts the lanes, enables a sink its destination disabled,
//! and shows their statuses and dead-letter counts.

mod attempt;
mod lane;
mod persister;
mod reader;

use std::sync::Arc;
use std::time::Duration;

use ankusa_sinks::{RetryPolicy, Sink};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use self::lane::{Lane, Shared};
use super::dead_letters::{self, LetterCount};
use super::status::{self, SharedStatus, SinkState, SinkStatus};
use crate::audit::{Change, CommitError, Context, Trail};
use crate::store::{keys::meta, StoreError};

/// How the publisher's lanes behave.
#[derive(Debug, Clone)]
pub struct PublisherOptions {
    /// The node's URI: every event's `source`.
    pub source: String,
    /// Most events handed to a sink in one attempt.
    pub batch: usize,
    /// How long a lane sleeps when no commit wakes it.
    pub idle: Duration,
    /// Most attempts under way per sink, for sinks that keep order across attempts (Kafka);
    /// the others have one at a time.
    pub in_flight: usize,
    /// Most dead letters a sink holds (`lifecycle.max_dead_letters`).
    pub max_dead_letters: u64,
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

/// The running publisher: one lane (a task) per sink.
pub struct Publisher {
    sinks: Vec<(String, Arc<dyn Sink>)>,
    statuses: Vec<SharedStatus>,
    /// Per sink, how many dead letters it holds (its lane adds, operators' removals take away).
    counted: Vec<LetterCount>,
    /// Per sink, how many times an operator enabled it again (its lane waits for a newer
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
    /// Start one lane per sink; they stop when `shutdown` is cancelled.
    pub async fn start(
        trail: Trail,
        sinks: Vec<SinkSpec>,
        options: PublisherOptions,
        shutdown: CancellationToken,
    ) -> Result<Publisher, StoreError> {
        let (mut statuses, mut counted, mut enables) = (Vec::new(), Vec::new(), Vec::new());
        let mut tasks = Vec::new();
        let names = sinks
            .iter()
            .map(|s| (s.name.clone(), s.sink.clone()))
            .collect();
        let starts = read_starts(&trail, &sinks).await?;
        for (spec, (position, letters)) in sinks.into_iter().zip(starts) {
            let status = status::starting(&spec.name, spec.sink.kind(), position);
            let (enable, enabled) = watch::channel(0);
            let (trail, options) = (trail.clone(), options.clone());
            let shutdown = shutdown.clone();
            let shared = Shared {
                status: status.clone(),
                enables: enabled,
                counted: letters.clone(),
            };
            // The lane is made in its task, where it starts its persister and its reads.
            tasks.push(tokio::spawn(async move {
                Lane::new(&trail, spec, options, shared, shutdown, position)
                    .run()
                    .await
            }));
            statuses.push(status);
            counted.push(letters);
            enables.push(enable);
        }
        Ok(Publisher {
            sinks: names,
            statuses,
            counted,
            enables,
            enabling: tokio::sync::Mutex::new(()),
            tasks: std::sync::Mutex::new(tasks),
        })
    }

    /// Enable sink `name` again after its destination disabled it (a 410), once the operator
    /// has mended the destination: its lane resumes from its position. Records the operator's
    /// act (`sink.enable`, resource `sinks/<name>`) first; returns the row's seq. The row is
    /// never refused by the backlog or the ceilings: a disabled sink holds the cursor, so
    /// its enable is what drains a full backlog ([`Context::relieving`]).
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
            .commit(ctx.relieving(), move |_| {
                Ok((sink_change("sink.enable", &sink), ()))
            })
            .await?;
        self.enables[index].send_modify(|count| *count += 1);
        status::update(status, |s| s.state = SinkState::Running);
        Ok(committed.seq)
    }

    /// Every sink's status.
    pub fn statuses(&self) -> Vec<SinkStatus> {
        self.statuses.iter().map(status::snapshot).collect()
    }

    /// Bring every sink's position, lag and state metrics up to now, for a scrape: a sink
    /// that is retrying or disabled confirms nothing, so nothing else would report its
    /// growing lag.
    pub fn report_metrics(&self) {
        for s in &self.statuses {
            status::report_position(&status::snapshot(s).name, s);
        }
    }

    /// How many dead letters sink `name` holds, kept with its lane: what removing its dead
    /// letters (`dead_letters::drop_letter`, `redrive`) counts out.
    pub fn letter_count(&self, name: &str) -> Option<LetterCount> {
        let index = self.sinks.iter().position(|(n, _)| n == name)?;
        Some(self.counted[index].clone())
    }

    /// The sink named `name`, for operations beside its lane (redriving dead letters).
    pub fn sink(&self, name: &str) -> Option<Arc<dyn Sink>> {
        self.sinks
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.clone())
    }

    /// Wait for every lane to stop (after the shutdown token was cancelled).
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

/// Every sink's persisted position and the dead letters it holds, read off the runtime
/// before any lane starts: a read that fails leaves none running.
async fn read_starts(
    trail: &Trail,
    sinks: &[SinkSpec],
) -> Result<Vec<(u64, LetterCount)>, StoreError> {
    let store = trail.store().clone();
    let names: Vec<String> = sinks.iter().map(|s| s.name.clone()).collect();
    crate::store::blocking::try_run("the sinks' positions", move || {
        names
            .iter()
            .map(|name| {
                let position = store.meta_u64(&meta::sink_position(name))?;
                let counted = LetterCount::new(name, dead_letters::count(&store, name)?);
                Ok((position, counted))
            })
            .collect::<Result<Vec<_>, StoreError>>()
    })
    .await
}

/// A change of sink `sink`'s state (`sink.enable`, `sink.disable`): resource `sinks/<name>`.
fn sink_change(action: &str, sink: &str) -> Change {
    Change::new(action, format!("sinks/{sink}")).detail("sink", sink)
}
