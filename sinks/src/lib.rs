//! Lifecycle event sinks: where Ankusa's CloudEvents go.
//!
//! This crate knows nothing of RocksDB or the audit trail. The publisher (in the `ankusa`
//! crate) hands a sink a slice of events in ascending trail seq; the sink makes one delivery
//! attempt for them and classifies every event's outcome. Retrying, positions and dead letters
//! are the publisher's business: a sink never decides that an event is "done" unless the
//! destination durably accepted it (`Delivered`) or refused it for good (`Rejected`).
//!
//! Every sink has the same files: `<name>/{mod,config,sink,tests}.rs` (the webhook adds
//! `signing.rs` for the Standard Webhooks scheme), so knowing one sink means knowing all.
//! A sink is built from its [`SinkConfig`] (the `kind`-tagged enum an operator writes), which
//! also yields the [`RetryPolicy`] the publisher applies to that sink's `Retry` outcomes.

#![forbid(unsafe_code)]

use std::borrow::Cow;
use std::time::Duration;

use async_trait::async_trait;

use cloudevents::event::ExtensionValue;
pub use cloudevents::Event;

mod blocking;
pub mod config;
mod encoding;
pub mod file;
pub mod kafka;
pub mod retry;
mod telemetry;
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;
pub mod webhook;

pub use config::SinkConfig;
pub use encoding::structured_value;
pub use file::{FileConfig, FileSink};
pub use kafka::{KafkaConfig, KafkaSink};
pub use retry::RetryPolicy;
pub use webhook::{WebhookConfig, WebhookMode, WebhookSink};

/// One event handed to a sink, with the trail seq it was built from.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The trail seq of the row the event was built from (also the `sequence` extension).
    pub seq: u64,
    /// The CloudEvent, complete: id, type, source, subject, time, data and extensions
    /// (`sequence`, `incarnation`, `partitionkey`).
    pub event: Event,
}

/// What became of one event in one delivery attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The destination durably accepted the event (Kafka delivery report, webhook 2xx,
    /// file line fsynced). Only this, or `Rejected`, lets a position move past it.
    Delivered,
    /// A passing failure (timeout, connection error, 408, 429, 5xx, broker unavailable):
    /// try again later, not before `after` when the destination said when (`Retry-After`).
    Retry {
        /// The destination's own wish (already clamped by the sink), if it gave one.
        after: Option<Duration>,
        /// Low-cardinality error kind, for metrics and logs (no payload, no secret).
        reason: String,
    },
    /// The destination refused this event for good (a 4xx other than 408/410/429, a record
    /// too large): it goes to the dead-letter store and the sink moves on.
    Rejected {
        /// Why, for the dead-letter entry and logs (no payload, no secret).
        reason: String,
    },
    /// The destination is gone (webhook 410): the sink stops and keeps its position until an
    /// operator enables it again (`POST /admin/v1/lifecycle/sinks/{sink}/enable`, or a
    /// restart).
    Disabled {
        /// Why, for the lifecycle status and logs.
        reason: String,
    },
}

/// Errors a sink reports outside of per-event outcomes: building it, or its healthcheck.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The sink's configuration is invalid.
    #[error("invalid sink config: {0}")]
    Config(String),
    /// The destination could not be reached or answered wrongly.
    #[error("sink unhealthy: {0}")]
    Unhealthy(String),
    /// Local I/O failed (the file sink).
    #[error("sink i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// A delivery attempt under way: its events are handed over, their outcomes still to come.
pub struct Submitted {
    /// Whether the caller may submit its next events before these outcomes are known. A sink
    /// says so when its destination keeps the order of what was handed over across attempts
    /// in flight, and no event of this attempt has already failed (a later event of its key
    /// must not overtake it).
    pub open: bool,
    /// Exactly one outcome per event, in order.
    pub outcomes: futures::future::BoxFuture<'static, Vec<Outcome>>,
}

impl Submitted {
    /// An attempt already over: nothing may overtake it until it is resolved.
    pub fn done(outcomes: Vec<Outcome>) -> Submitted {
        Submitted {
            open: false,
            outcomes: Box::pin(std::future::ready(outcomes)),
        }
    }
}

impl std::fmt::Debug for Submitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Submitted")
            .field("open", &self.open)
            .finish_non_exhaustive()
    }
}

/// A destination for lifecycle events.
#[async_trait]
pub trait Sink: Send + Sync {
    /// The sink's kind (`kafka`, `webhook`, `file`), for metrics labels.
    fn kind(&self) -> &'static str;

    /// Make one delivery attempt for `events` (ascending seq) and return exactly one outcome
    /// per event, in the same order. Must not panic and must not retry forever: retries are
    /// the caller's, so that it can stop, persist positions and report.
    async fn send(&self, events: &[Delivery]) -> Vec<Outcome>;

    /// Start one delivery attempt for `events` and return once they are handed over, with
    /// their outcomes to come (same contract as [`send`](Sink::send)). While an open attempt
    /// is in flight the caller may submit the next events, so throughput does not wait on
    /// the destination's round trip. The default is `send`, over before it returns.
    async fn submit(&self, events: &[Delivery]) -> Submitted {
        Submitted::done(self.send(events).await)
    }

    /// Exercise the real path to the destination (metadata fetch, a request, a file open).
    async fn healthcheck(&self) -> Result<(), SinkError>;
}

/// The event's `partitionkey` extension (the Kafka record key and the webhook ordering key),
/// if it has one: borrowed from the event when it is a string, as it always is for the
/// publisher's events.
pub fn partition_key(event: &Event) -> Option<Cow<'_, str>> {
    match event.extension("partitionkey")? {
        ExtensionValue::String(key) => Some(Cow::Borrowed(key)),
        other => Some(Cow::Owned(other.to_string())),
    }
}
