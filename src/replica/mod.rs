//! The reference consumer of the lifecycle events (`ankusa follow`): a replica of the routes
//! and sources kept exact by the contract's rule, from Kafka, from webhook requests, or by
//! watching nodes over HTTP.
//!
//! Parts, each its own file: [`event`] reads what a CloudEvent says (a change, a snapshot
//! marker, or nothing), [`rule`] is the replica and the rule (pure, no I/O; [`snapshot`] its
//! snapshot bookkeeping, [`version`] the 20-digit versions), [`file`] the replica file
//! (replica and progress, replaced atomically), [`kafka`], [`http`] and [`webhook`] the three
//! consumers ([`signature`] the Standard Webhooks verification), [`verify`] the comparison with a
//! node's admin API, [`progress`] and [`metrics`] what a running follower tells.
//!
//! A consumer is a function of its options and a shutdown future ([`kafka::follow`],
//! [`http::follow`], [`webhook::Server::run`]), so a test runs one in its own process as the
//! CLI does.
//!
//! Architecture invariant: this module knows nothing of the node's store, trail or
//! subjects: it reads only what a consumer anywhere can read (events and the admin API).

pub mod api;
pub mod event;
pub mod file;
pub mod http;
pub mod kafka;
pub mod lag;
pub mod metrics;
pub mod progress;
pub mod request;
pub mod rule;
pub mod seen;
pub mod signature;
pub mod snapshot;
pub mod verify;
pub mod version;
pub mod webhook;

use std::path::PathBuf;

pub use file::{FileError, ReplicaFile};
pub use metrics::Metrics;
pub use rule::{Entry, Replica};

/// Why a follower stopped.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// The replica file could not be read or written.
    #[error(transparent)]
    File(#[from] FileError),
    /// The replica file was made from another source than the one asked for.
    #[error("replica file {path} follows {found}, not {asked}: use another --out")]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// What it follows.
        found: String,
        /// What the command asked for.
        asked: String,
    },
    /// A write of the replica file failed or was cut short (the log says why).
    #[error("the replica file {0} could not be written (see the log)")]
    Unwritten(PathBuf),
    /// Kafka refused the consumer or its topic.
    #[error("kafka: {0}")]
    Kafka(String),
    /// A partition cannot be resumed where the replica is: records it never read are gone.
    #[error(
        "kafka: partition {partition} of {topic}: the replica resumes at offset {next}, but \
         {}: records it never read are gone (the topic's retention, or a topic made again), \
         so it would miss changes. Start a new replica from a snapshot (a new --out with \
         --start end, then POST /admin/v1/lifecycle/snapshot on each node)",
        match oldest { -1 => "that is past the topic's end".to_owned(), o => format!("the oldest record the topic holds is at {o}") }
    )]
    Gap {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// Where the replica resumes.
        next: i64,
        /// The oldest offset the partition holds; -1: unknown (the position is past the end).
        oldest: i64,
    },
    /// The listen address could not be bound.
    #[error("listening on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// What failed.
        source: std::io::Error,
    },
    /// Bad options (a secret that is not `whsec_<base64>`, ...); never shows a secret.
    #[error("{0}")]
    Options(String),
    /// A node refused what the follower asked, for good (its token, a snapshot it could not
    /// ask for): asking again would not change it.
    #[error("{0}")]
    Refused(String),
}

/// The time of `event` in unix ms, if it has one.
pub(crate) fn event_time_ms(event: &cloudevents::Event) -> Option<i64> {
    cloudevents::AttributesReader::time(event).map(|t| t.timestamp_millis())
}
