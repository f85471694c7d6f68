//! What bounds the trail (retention, ceilings, outbox backlog) and how close it is to them.
//!
//! [`Limits`] is configuration, handed to the trail at start (`[audit]` in the config file).
//! [`TrailStats`] is what the writer knows about the trail after its last write: usage, the
//! lifecycle cursor, the backlog and what was pruned or refused. The writer thread updates it
//! after every group commit and the retention task after every sweep; the admin API and
//! tests read it through `Trail::stats`. It sits behind a `std::sync::Mutex` because both
//! sides hold it for a copy of a few integers and never across an `.await`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use super::prune;
use super::usage::Usage;
use crate::audit::writer::sync::Counters;

/// How long rows are kept, how large the trail may grow, and how far the lifecycle sinks may
/// fall behind before operators' changes are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Rows older than this are deleted by the retention sweep (unless the lifecycle cursor
    /// holds them back).
    pub retention: Duration,
    /// How often the retention sweep runs.
    pub sweep_interval: Duration,
    /// Rows deleted per sweep batch: one writer group each, so commits flow between them.
    pub sweep_batch: usize,
    /// Most rows the trail holds before the oldest published ones are pruned for a change.
    pub max_rows: u64,
    /// Most bytes (row and entity keys and values) the trail holds, likewise.
    pub max_bytes: u64,
    /// Events no sink has confirmed at which an operator's (bounded) change is refused.
    pub outbox_max_backlog: u64,
}

impl Default for Limits {
    /// The defaults of `config/default.toml`.
    fn default() -> Self {
        Limits {
            retention: Duration::from_secs(365 * 86_400),
            sweep_interval: Duration::from_secs(3600),
            sweep_batch: 40,
            max_rows: 10_000_000,
            max_bytes: 8 << 30,
            outbox_max_backlog: 100_000,
        }
    }
}

impl Limits {
    /// The ceilings part, as reported.
    pub fn ceilings(&self) -> Ceilings {
        Ceilings {
            max_rows: self.max_rows,
            max_bytes: self.max_bytes,
            outbox_max_backlog: self.outbox_max_backlog,
        }
    }
}

/// The ceilings a change is admitted against.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Ceilings {
    /// `audit.max_rows`.
    pub max_rows: u64,
    /// `audit.max_bytes`.
    pub max_bytes: u64,
    /// `audit.outbox_max_backlog`.
    pub outbox_max_backlog: u64,
}

/// Rows deleted since the node started, by why.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Pruned {
    /// By the retention sweep (older than `audit.retention_days`).
    pub retention: u64,
    /// To make room for a change under `audit.max_rows` / `audit.max_bytes`.
    pub ceiling: u64,
}

/// The trail's usage against its limits, as of the writer's last write.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TrailStats {
    /// Rows and bytes of the trail (`m:audit_usage`).
    pub usage: Usage,
    /// The ceilings.
    pub ceilings: Ceilings,
    /// The last seq every configured sink confirmed; `None` when no sink is configured (then
    /// nothing holds rows back).
    pub cursor: Option<u64>,
    /// Rows committed after the cursor, `m:audit_seq` minus it (`0` without sinks).
    pub backlog: u64,
    /// Changes refused with `AuditBacklog` since start.
    pub refused: u64,
    /// Rows pruned since start.
    pub pruned: Pruned,
    /// Expired rows the cursor kept, as of the last sweep.
    pub blocked_by_cursor: u64,
    /// When the last sweep finished (unix ms, the trail's clock).
    pub last_sweep_at: Option<u64>,
    /// How far the wall clock is ahead of the time the writer trusts (ms; 0: not ahead), as
    /// of the last written group (`m:clock_ahead`).
    pub clock_ahead: u64,
}

/// [`TrailStats`] shared between the writer, the retention task and readers.
#[derive(Debug, Clone, Default)]
pub(crate) struct SharedStats(Arc<Mutex<TrailStats>>);

impl SharedStats {
    pub(crate) fn new(stats: TrailStats) -> SharedStats {
        SharedStats(Arc::new(Mutex::new(stats)))
    }

    /// The stats of a trail booted with the counters `counters`, under `ceilings`.
    pub(crate) fn at_boot(counters: &Counters, ceilings: Ceilings) -> SharedStats {
        let cursor = prune::cursor(&counters.positions);
        SharedStats::new(TrailStats {
            usage: counters.usage,
            ceilings,
            cursor,
            backlog: prune::backlog(cursor, counters.last_seq),
            clock_ahead: counters.clock.ahead,
            ..TrailStats::default()
        })
    }

    /// A copy of the stats.
    pub(crate) fn get(&self) -> TrailStats {
        match self.0.lock() {
            Ok(s) => s.clone(),
            // A poisoned lock still holds the last complete update: integers, no invariants.
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Change the stats in place.
    pub(crate) fn update(&self, f: impl FnOnce(&mut TrailStats)) {
        match self.0.lock() {
            Ok(mut s) => f(&mut s),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }
}
