//! When each row was committed, as the node in this process says it: its syncer logs
//! `audit row committed` (with the row's seq) right after the synced write returned and the
//! watch was told, before any caller hears "committed". A tracing layer of the bench notes
//! the instant of each such event while armed, so part 1 measures from the commit itself,
//! not from a request around it.
//!
//! The node in process installs no subscriber of its own (`ankusa serve` does, in `main`),
//! so this one is the process's.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer;

/// The message of the node's event for a committed row (`telemetry::audit::row_committed`).
const COMMITTED: &str = "audit row committed";

/// Whether commits are noted now.
static ARMED: AtomicBool = AtomicBool::new(false);
/// Each noted row's seq and the instant its event came (the first, if a seq came twice).
static NOTED: Mutex<Vec<(u64, Instant)>> = Mutex::new(Vec::new());

/// Install the layer (once, before any node starts).
pub fn install() {
    let targets = tracing_subscriber::filter::Targets::new()
        .with_target("ankusa::audit", tracing::Level::INFO);
    let _ = tracing_subscriber::registry()
        .with(Noter.with_filter(targets))
        .try_init();
}

/// Note commits from now on, forgetting any noted before.
pub fn arm() {
    NOTED.lock().unwrap_or_else(|p| p.into_inner()).clear();
    ARMED.store(true, Ordering::Release);
}

/// Stop noting: the commits noted since [`arm`], by seq.
pub fn disarm() -> HashMap<u64, Instant> {
    ARMED.store(false, Ordering::Release);
    let noted = std::mem::take(&mut *NOTED.lock().unwrap_or_else(|p| p.into_inner()));
    let mut by_seq = HashMap::with_capacity(noted.len());
    for (seq, at) in noted {
        by_seq.entry(seq).or_insert(at);
    }
    by_seq
}

struct Noter;

impl<S: tracing::Subscriber> Layer<S> for Noter {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if !ARMED.load(Ordering::Acquire) {
            return;
        }
        let at = Instant::now();
        let mut fields = Fields::default();
        event.record(&mut fields);
        if let (Some(seq), true) = (fields.seq, fields.committed) {
            NOTED
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((seq, at));
        }
    }
}

/// The two fields the bench reads: the seq, and whether the message is [`COMMITTED`].
#[derive(Default)]
struct Fields {
    seq: Option<u64>,
    committed: bool,
}

impl Visit for Fields {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "seq" {
            self.seq = Some(value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        if field.name() == "message" {
            self.committed = format!("{value:?}") == COMMITTED;
        }
    }
}
