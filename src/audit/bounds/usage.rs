//! `m:audit_usage`: how many rows and bytes the trail holds, kept in every batch that adds or
//! deletes rows so that ceilings can be checked without scanning the trail.
//!
//! Rows and their counters change in one atomic batch, so a stored usage can only disagree
//! with the trail if it is missing (an older store), damaged, or was written for another
//! `m:audit_seq`. [`Usage::check`] finds that out at boot from three point reads, and
//! [`Usage::recount`] rebuilds it from a full scan.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::store::{keys, keys::meta, Cf, Store, StoreError};
use crate::telemetry;

/// Rows and bytes of the trail (row keys and values, plus their outbox entities), valid for
/// the trail as of `seq`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Trail rows.
    pub rows: u64,
    /// Bytes of rows, their outbox entities and their index entries (keys and values).
    pub bytes: u64,
    /// The `m:audit_seq` these figures are valid for.
    pub seq: u64,
    /// Every row with a smaller seq has been deleted (pruned): where the oldest row may be,
    /// so that deleting more seeks past the tombstones of earlier deletions.
    #[serde(default)]
    pub from: u64,
}

/// Why a stored usage was not believed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// There was none.
    Missing,
    /// It could not be decoded.
    Corrupt,
    /// It was written for another `m:audit_seq`.
    Stale,
    /// It disagrees with where the trail's first row is.
    Inconsistent,
}

impl Mismatch {
    /// The name used in logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Mismatch::Missing => "missing",
            Mismatch::Corrupt => "corrupt",
            Mismatch::Stale => "stale",
            Mismatch::Inconsistent => "inconsistent",
        }
    }
}

/// Rows between two progress lines of a recount on a terminal.
const PROGRESS_EVERY: u64 = 250_000;

impl Usage {
    /// Decode `m:audit_usage`; `None` when it cannot be read (then recount).
    pub fn decode(bytes: &[u8]) -> Option<Usage> {
        serde_json::from_slice(bytes).ok()
    }

    /// Encode for `m:audit_usage`.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("usage always serializes")
    }

    /// The usage of an empty trail whose last seq is `seq`.
    pub fn empty(seq: u64) -> Usage {
        Usage {
            rows: 0,
            bytes: 0,
            seq,
            from: seq.saturating_add(1),
        }
    }

    /// Whether `stored` (the raw `m:audit_usage`, if any) can be believed for a trail whose
    /// last seq is `seq` and whose first row has seq `first_row`.
    pub fn check(
        stored: Option<&[u8]>,
        seq: u64,
        first_row: Option<u64>,
    ) -> Result<Usage, Mismatch> {
        let usage = Usage::decode(stored.ok_or(Mismatch::Missing)?).ok_or(Mismatch::Corrupt)?;
        if usage.seq != seq {
            return Err(Mismatch::Stale);
        }
        let consistent = match first_row {
            None => usage.rows == 0,
            Some(first) => usage.rows > 0 && first >= usage.from,
        };
        if !consistent {
            return Err(Mismatch::Inconsistent);
        }
        Ok(usage)
    }

    /// The usage to boot with, for a trail whose last seq is `seq`: the stored one when it
    /// matches the trail, else a full recount (logged with its reason). The flag says that
    /// `m:audit_usage` must be written.
    pub(crate) fn at_boot(store: &Store, seq: u64) -> Result<(Usage, bool), StoreError> {
        let stored = store.meta(meta::AUDIT_USAGE)?;
        let mut first_row = None;
        store.scan(Cf::Audit, &[keys::ROW], &[keys::ROW], |k, _| {
            first_row = keys::decode_row_key(k).map(|(s, _)| s);
            first_row.is_none()
        })?;
        match Usage::check(stored.as_deref(), seq, first_row) {
            Ok(usage) => Ok((usage, false)),
            // A new store: nothing to count, nothing to report.
            Err(Mismatch::Missing) if seq == 0 && first_row.is_none() => {
                Ok((Usage::empty(0), true))
            }
            Err(why) => {
                telemetry::audit::usage_recount_started(why.as_str(), seq);
                let started = Instant::now();
                let usage = Usage::recount(store, seq)?;
                telemetry::audit::usage_recounted(why.as_str(), &usage, started.elapsed());
                Ok((usage, true))
            }
        }
    }

    /// Count the trail as it is in `store`, valid for `seq`.
    pub fn recount(store: &Store, seq: u64) -> Result<Usage, StoreError> {
        let mut usage = Usage::empty(seq);
        let mut first = None;
        // Only a human watching a terminal wants progress lines; logs get one event at the end.
        let mut progress = Progress::new(std::io::stderr().is_terminal());
        store.scan(Cf::Audit, &[keys::ROW], &[keys::ROW], |k, v| {
            if first.is_none() {
                first = keys::decode_row_key(k).map(|(s, _)| s);
            }
            usage.rows += 1;
            usage.bytes += (k.len() + v.len()) as u64;
            progress.tick(usage.rows);
            true
        })?;
        for prefix in [keys::OUTBOX, keys::INDEX] {
            store.scan(Cf::Audit, &[prefix], &[prefix], |k, v| {
                usage.bytes += (k.len() + v.len()) as u64;
                true
            })?;
        }
        progress.done(usage.rows);
        if let Some(first) = first {
            usage.from = first;
        }
        Ok(usage)
    }
}

/// Progress of a long recount, on stderr when it is a terminal.
struct Progress {
    on: bool,
    started: Instant,
    shown: bool,
}

impl Progress {
    fn new(on: bool) -> Progress {
        Progress {
            on,
            started: Instant::now(),
            shown: false,
        }
    }

    fn tick(&mut self, rows: u64) {
        if self.on
            && rows.is_multiple_of(PROGRESS_EVERY)
            && self.started.elapsed() > Duration::from_millis(500)
        {
            eprint!("\rrecounting the audit trail: {rows} rows");
            self.shown = true;
        }
    }

    fn done(&self, rows: u64) {
        if self.shown {
            eprintln!("\rrecounting the audit trail: {rows} rows, done");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(u: Usage) -> Vec<u8> {
        u.encode()
    }

    #[test]
    fn check_believes_only_a_matching_usage() {
        let good = Usage {
            rows: 3,
            bytes: 300,
            seq: 10,
            from: 8,
        };
        assert_eq!(Usage::check(Some(&stored(good)), 10, Some(8)), Ok(good));
        assert_eq!(Usage::check(None, 10, Some(8)), Err(Mismatch::Missing));
        assert_eq!(
            Usage::check(Some(b"{"), 10, Some(8)),
            Err(Mismatch::Corrupt)
        );
        assert_eq!(
            Usage::check(Some(&stored(good)), 11, Some(8)),
            Err(Mismatch::Stale)
        );
        // A row below `from` exists: some deletion was not counted.
        assert_eq!(
            Usage::check(Some(&stored(good)), 10, Some(7)),
            Err(Mismatch::Inconsistent)
        );
        assert_eq!(
            Usage::check(Some(&stored(good)), 10, None),
            Err(Mismatch::Inconsistent)
        );
        let empty = Usage::empty(10);
        assert_eq!(Usage::check(Some(&stored(empty)), 10, None), Ok(empty));
        assert_eq!(
            Usage::check(Some(&stored(empty)), 10, Some(11)),
            Err(Mismatch::Inconsistent)
        );
    }

    #[test]
    fn a_usage_without_from_still_decodes() {
        let u = Usage::decode(br#"{"rows":1,"bytes":2,"seq":3}"#).unwrap();
        assert_eq!(u.from, 0);
    }
}
