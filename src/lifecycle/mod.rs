//! Lifecycle events: route and source changes that took effect, published as CloudEvents.
//!
//! The writer flags their rows and writes the redacted entity beside each at `o`+seq, in the
//! row's batch (the outbox). This module reads the outbox in seq order ([`outbox`]), builds
//! the events ([`event`]) and delivers them through the sinks of the `ankusa-sinks` crate
//! ([`publisher`]), moving each sink's position only over what it confirmed, and serves them
//! to watchers over HTTP ([`watch`]), who move nothing.

pub mod dead_letters;
pub mod event;
pub mod outbox;
pub mod publisher;
pub mod status;
pub mod watch;

pub use publisher::{EnableRefused, Publisher, PublisherOptions, SinkSpec};
pub use status::{SinkState, SinkStatus};

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::audit::Trail;
use crate::config::LifecycleConfig;
use crate::store::StoreError;
use crate::telemetry;

/// Why the publisher could not start.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    /// A sink's configuration is invalid.
    #[error("lifecycle.sink.{name}: {source}")]
    Sink {
        /// The sink's name.
        name: String,
        /// What is wrong.
        source: ankusa_sinks::SinkError,
    },
    /// The sinks' positions could not be read.
    #[error("reading sink positions: {0}")]
    Store(#[from] StoreError),
}

/// Build the configured sinks and start the publisher (`None` when no sink is configured).
/// It runs whether or not new changes are still flagged (`enabled`): while `lifecycle.sinks`
/// is set their positions hold rows back from retention and the ceilings, so the events
/// already in the outbox must still reach them, and their positions must still pass over the
/// rows that publish nothing, or the backlog would refuse every change. A failing
/// healthcheck is logged, not fatal: the sink's lane retries until the destination comes up,
/// and the outbox keeps every event meanwhile.
pub async fn start(
    config: &LifecycleConfig,
    source: &str,
    trail: &Trail,
    shutdown: CancellationToken,
) -> Result<Option<Publisher>, LifecycleError> {
    let names = config.sinks.clone();
    if names.is_empty() {
        return Ok(None);
    }
    let mut specs = Vec::new();
    for name in names {
        let Some(sink_config) = config.sink.get(&name) else {
            continue; // config validation guarantees a definition
        };
        specs.push(build_sink(name, sink_config).await?);
    }
    let options = PublisherOptions {
        source: source.to_owned(),
        batch: config.batch,
        idle: config.idle,
        in_flight: config.in_flight,
        max_dead_letters: config.max_dead_letters,
    };
    Ok(Some(
        Publisher::start(trail.clone(), specs, options, shutdown).await?,
    ))
}

/// Build sink `name` from its definition and run its healthcheck (logged either way).
async fn build_sink(
    name: String,
    config: &ankusa_sinks::SinkConfig,
) -> Result<SinkSpec, LifecycleError> {
    let (sink, retry) = config
        .build()
        .await
        .map_err(|source| LifecycleError::Sink {
            name: name.clone(),
            source,
        })?;
    let health = sink.healthcheck().await;
    let health = health.as_ref().map_err(|e| e as &dyn std::fmt::Display);
    telemetry::lifecycle::healthchecked(&name, sink.kind(), health.copied());
    Ok(SinkSpec {
        name,
        sink: Arc::from(sink),
        retry,
    })
}
