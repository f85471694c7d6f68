//! What the publisher tells operators about each sink (`GET /admin/v1/lifecycle`), and the
//! two reports that go to its status and its metrics at once (an error, a durable position),
//! so the two never disagree.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::telemetry;

/// A sink's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkState {
    /// Delivering, or waiting for new rows.
    Running,
    /// The last attempt failed; waiting to try again.
    Retrying,
    /// The destination said it is gone (webhook 410): stopped at its position.
    Disabled,
    /// The publisher stopped.
    Stopped,
}

impl SinkState {
    /// Every state, as `ankusa_lifecycle_sink_state` lists them.
    pub const ALL: [SinkState; 4] = [
        SinkState::Running,
        SinkState::Retrying,
        SinkState::Disabled,
        SinkState::Stopped,
    ];

    /// The state's name, as the API and the metrics spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            SinkState::Running => "running",
            SinkState::Retrying => "retrying",
            SinkState::Disabled => "disabled",
            SinkState::Stopped => "stopped",
        }
    }
}

/// One sink's status.
#[derive(Debug, Clone, Serialize)]
pub struct SinkStatus {
    /// The sink's name (its key in `lifecycle.sink`).
    pub name: String,
    /// Its kind (`kafka`, `webhook`, `file`).
    pub kind: &'static str,
    /// The last seq it confirmed, persisted (`m:lifecycle_cursor:<name>`).
    pub position: u64,
    /// Its state.
    pub state: SinkState,
    /// The last error, low-cardinality and secret-free.
    pub last_error: Option<String>,
    /// Events delivered since start.
    pub delivered: u64,
    /// Failed attempts since start.
    pub retries: u64,
    /// Events dead-lettered since start.
    pub dead_lettered: u64,
    /// Commit time (unix ms) of the oldest event it has not confirmed, if it is behind.
    pub oldest_unconfirmed_at: Option<u64>,
}

/// A sink's status, shared between its lane, which updates it, and the API, which shows it.
pub type SharedStatus = Arc<Mutex<SinkStatus>>;

/// The status of a sink starting at `position`: running, nothing counted yet.
pub fn starting(name: &str, kind: &'static str, position: u64) -> SharedStatus {
    Arc::new(Mutex::new(SinkStatus {
        name: name.to_owned(),
        kind,
        position,
        state: SinkState::Running,
        last_error: None,
        delivered: 0,
        retries: 0,
        dead_lettered: 0,
        oldest_unconfirmed_at: None,
    }))
}

/// Read a shared status (a poisoned lock still holds the last status written).
pub fn snapshot(status: &SharedStatus) -> SinkStatus {
    match status.lock() {
        Ok(s) => s.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    }
}

/// Update a shared status.
pub fn update(status: &SharedStatus, f: impl FnOnce(&mut SinkStatus)) {
    match status.lock() {
        Ok(mut s) => f(&mut s),
        Err(poisoned) => f(&mut poisoned.into_inner()),
    }
}

/// Publish a sink's persisted position, its lag (age of the oldest unconfirmed event, as of
/// now) and its state.
pub fn report_position(sink: &str, status: &SharedStatus) {
    let snapshot = snapshot(status);
    let now = chrono::Utc::now().timestamp_millis().max(0) as u64;
    let lag = snapshot
        .oldest_unconfirmed_at
        .map_or(0, |at| now.saturating_sub(at));
    telemetry::lifecycle::position_reported(sink, snapshot.position, Duration::from_millis(lag));
    let states = SinkState::ALL.map(SinkState::as_str);
    telemetry::lifecycle::state_reported(sink, snapshot.state.as_str(), &states);
}

/// A publisher error of sink `sink` (not a delivery outcome): logged, counted, and shown as
/// the sink's last error.
pub fn note_error(sink: &str, status: &SharedStatus, error: &str) {
    telemetry::lifecycle::publisher_failed(sink, error);
    telemetry::lifecycle::sink_failed(sink, "publisher", false);
    update(status, |s| s.last_error = Some(error.to_owned()));
}
