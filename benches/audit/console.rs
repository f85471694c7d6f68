//! The hook for the console's figure of issue 51: its trail page served with a p99 server
//! time <= 50 ms. The console (`src/console/`) is being built beside this bench; once a node
//! serves `/console/`, the measurement goes in [`trail_page_p99`] and `main` prints it.

use std::time::Duration;

/// The p99 server time of the console's trail page at `base_url` (a node serving
/// `/console/`, e.g. `http://127.0.0.1:8080`), or `None` while nothing measures it.
///
/// What goes here: sign in with a token holding `audit:read` (the session cookie the
/// console sets), then request the trail page with the queries' three filters (the actor,
/// the subject, the hour of `spread.rs`) many times each on the bench's store, timing each
/// request to its last byte on loopback (or the node's own figure, if its responses report
/// one, such as `Server-Timing`), and return the p99.
pub fn trail_page_p99(base_url: &str) -> Option<Duration> {
    let _ = base_url;
    None
}
