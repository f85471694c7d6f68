//! `[audit]` (the trail's retention and ceilings) and `[settlement]` (how dual writes left
//! pending are settled): the trail's own settings, turned into its option types.

use std::time::Duration;

use serde::Deserialize;

use super::{invalid, ConfigError};

/// `[audit]`: how long the trail keeps rows, how large it may grow, and how far the
/// lifecycle sinks may fall behind before operators' changes are refused.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// Rows older than this many days are deleted by the retention sweep, unless a lifecycle
    /// sink has not confirmed them yet.
    pub retention_days: u32,
    /// How often the retention sweep runs (humantime: "1h", "15m").
    #[serde(with = "humantime_serde")]
    pub sweep_interval: Duration,
    /// Rows deleted per sweep batch (one writer batch each; commits run between them).
    pub sweep_batch: usize,
    /// Most rows the trail holds; beyond it the oldest published rows are pruned for a new
    /// change, and if none can be, the change is refused (503 audit_backlog).
    pub max_rows: u64,
    /// Most bytes (keys and values of rows and outbox entities) the trail holds; likewise.
    pub max_bytes: u64,
    /// The outbox backlog (`m:audit_seq` minus the lifecycle cursor) at which an operator's
    /// change is refused.
    pub outbox_max_backlog: u64,
    /// Whether every row joins the trail's Merkle tree and checkpoints are signed.
    pub tree: bool,
    /// A checkpoint is signed once this many rows came since the last one...
    pub checkpoint_rows: u64,
    /// ...or this long after the last one, if any row came since.
    #[serde(with = "humantime_serde")]
    pub checkpoint_interval: Duration,
}

/// The smallest `audit.max_rows`: above one group commit, so a group's own rows never have
/// to be pruned to make room for each other.
const MIN_MAX_ROWS: u64 = 10_000;
/// The smallest `audit.max_bytes` (16 MiB).
const MIN_MAX_BYTES: u64 = 16 << 20;

impl AuditConfig {
    /// The trail's limits (`TrailOptions::limits`).
    pub fn limits(&self) -> crate::audit::Limits {
        crate::audit::Limits {
            retention: Duration::from_secs(u64::from(self.retention_days) * 86_400),
            sweep_interval: self.sweep_interval,
            sweep_batch: self.sweep_batch,
            max_rows: self.max_rows,
            max_bytes: self.max_bytes,
            outbox_max_backlog: self.outbox_max_backlog,
        }
    }

    /// The trail's Merkle tree options (`TrailOptions::tree`).
    pub fn tree(&self) -> crate::audit::TreeOptions {
        crate::audit::TreeOptions {
            enabled: self.tree,
            checkpoint_rows: self.checkpoint_rows,
            checkpoint_interval: self.checkpoint_interval,
        }
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=36_500).contains(&self.retention_days) {
            return invalid("audit.retention_days", "must be between 1 and 36500");
        }
        if self.sweep_interval < Duration::from_secs(1) {
            return invalid("audit.sweep_interval", "must be at least 1s");
        }
        if !(1..=100_000).contains(&self.sweep_batch) {
            return invalid("audit.sweep_batch", "must be between 1 and 100000");
        }
        if self.max_rows < MIN_MAX_ROWS {
            return invalid("audit.max_rows", "must be at least 10000");
        }
        if self.max_bytes < MIN_MAX_BYTES {
            return invalid("audit.max_bytes", "must be at least 16777216 (16 MiB)");
        }
        if !(1..=1_000_000).contains(&self.checkpoint_rows) {
            return invalid("audit.checkpoint_rows", "must be between 1 and 1000000");
        }
        if self.checkpoint_interval < Duration::from_secs(1) {
            return invalid("audit.checkpoint_interval", "must be at least 1s");
        }
        if self.outbox_max_backlog == 0 || self.outbox_max_backlog > self.max_rows {
            // Above max_rows the ceilings would refuse changes first: the limit would be moot.
            return invalid(
                "audit.outbox_max_backlog",
                "must be between 1 and audit.max_rows",
            );
        }
        Ok(())
    }
}

/// `[settlement]`: pending rows whose caller never finished them (it was cancelled, or the
/// node crashed) are settled by reading the subject's present state, retried while its store
/// cannot be read.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettlementConfig {
    /// Between two attempts to read a subject's store.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// How long to keep trying before the row settles `interrupted`.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
}

impl SettlementConfig {
    /// The trail's settlement options.
    pub fn options(&self) -> crate::audit::SettleOptions {
        crate::audit::SettleOptions {
            interval: self.interval,
            window: self.window,
        }
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.interval < Duration::from_millis(10) {
            return invalid("settlement.interval", "must be at least 10ms");
        }
        if self.window < self.interval {
            return invalid("settlement.window", "must be at least settlement.interval");
        }
        Ok(())
    }
}
