//! Property: for any interleaving of commits (events or not, operator or system), sink
//! confirmations, clock moves, retention sweeps, ceiling prunes and restarts, no row at or
//! above the lifecycle cursor is ever deleted, deletions only ever take the oldest rows, rows
//! and entities go together, and `m:audit_usage` always equals a full count.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::support::trail::{all_keys, all_rows};
use ankusa::audit::{
    Change, Clock, CommitError, Context, Limits, ManualClock, Trail, TrailOptions, Usage,
};
use ankusa::store::{keys, keys::meta, Cf, Store};
use proptest::prelude::*;
use serde_json::json;

const HOUR: u64 = 3_600_000;
const T0: u64 = 1_700_000_000_000;
const SINKS: [&str; 2] = ["a", "b"];

#[derive(Debug, Clone)]
enum Op {
    /// A change; `pad` makes rows of different sizes.
    Commit { event: bool, system: bool, pad: u16 },
    /// Sink `sink` confirms `by` more rows (never past the last one).
    Advance { sink: usize, by: u8 },
    /// The clock moves.
    Tick { hours: u8 },
    /// A whole retention sweep.
    Sweep,
    /// The node stops and starts again.
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (any::<bool>(), prop::bool::weighted(0.1), 0u16..400)
            .prop_map(|(event, system, pad)| Op::Commit { event, system, pad }),
        3 => (0usize..2, 0u8..6).prop_map(|(sink, by)| Op::Advance { sink, by }),
        2 => (0u8..30).prop_map(|hours| Op::Tick { hours }),
        2 => Just(Op::Sweep),
        1 => Just(Op::Restart),
    ]
}

fn limits() -> Limits {
    Limits {
        retention: Duration::from_millis(24 * HOUR),
        sweep_batch: 3,
        max_rows: 12,
        max_bytes: 6_000,
        outbox_max_backlog: 8,
        ..Limits::default()
    }
}

fn start(dir: &Path, sinks: &[String], clock: &Arc<ManualClock>) -> Trail {
    let options = TrailOptions {
        lifecycle: true,
        sinks: sinks.to_vec(),
        limits: limits(),
        ..TrailOptions::default()
    };
    Trail::start(Store::open(dir).unwrap(), options, clock.clone()).unwrap()
}

async fn commit(
    trail: &Trail,
    n: u64,
    event: bool,
    system: bool,
    pad: u16,
) -> Result<u64, CommitError<()>> {
    let ctx = if system {
        Context::system()
    } else {
        Context::new("ops", Some("192.0.2.1".into()), None)
    };
    trail
        .commit(ctx, move |tx| {
            tx.put(Cf::Overrides, format!("k{n}").into_bytes(), b"{}".to_vec())?;
            let mut change = Change::new("override.set", format!("overrides/k{n}"))
                .detail("pad", "p".repeat(pad as usize));
            if event {
                change = change.entity(json!({"id": n}));
            }
            Ok((change, ()))
        })
        .await
        .map(|c| c.seq)
}

/// What the test knows independently of the trail.
struct Model {
    /// Every seq ever committed.
    committed: Vec<u64>,
    /// Sink positions.
    positions: BTreeMap<String, u64>,
}

impl Model {
    fn cursor(&self) -> Option<u64> {
        self.positions.values().min().copied()
    }
}

/// The invariants, checked after every step.
fn check(trail: &Trail, model: &Model, step: &str) -> Result<(), TestCaseError> {
    let store = trail.store();
    let rows = all_rows(store);
    let present: Vec<u64> = rows.iter().map(|r| r.seq).collect();
    // Only a prefix of the committed seqs was ever deleted (oldest first).
    let first = present.first().copied();
    let expected: Vec<u64> = model
        .committed
        .iter()
        .copied()
        .filter(|s| first.is_some_and(|f| *s >= f))
        .collect();
    prop_assert_eq!(&present, &expected, "{}: deletions are a prefix", step);
    // Never at or above the cursor.
    if let Some(cursor) = model.cursor() {
        for s in model.committed.iter().filter(|s| **s >= cursor) {
            prop_assert!(
                present.binary_search(s).is_ok(),
                "{}: row {} >= cursor {} deleted",
                step,
                s,
                cursor
            );
        }
    }
    // Rows and entities go together.
    let entities: Vec<u64> = all_keys(store, Cf::Audit)
        .iter()
        .filter_map(|k| keys::decode_seq_key(keys::OUTBOX, k))
        .collect();
    let flagged: Vec<u64> = rows.iter().filter(|r| r.publish).map(|r| r.seq).collect();
    prop_assert_eq!(entities, flagged, "{}: entities", step);
    // The counters equal a full count, on disk and in memory.
    let seq = store.meta_u64(meta::AUDIT_SEQ).unwrap();
    let truth = Usage::recount(store, seq).unwrap();
    let stored = store
        .meta(meta::AUDIT_USAGE)
        .unwrap()
        .and_then(|b| Usage::decode(&b));
    if seq > 0 {
        prop_assert_eq!(stored, Some(truth), "{}: m:audit_usage", step);
    }
    prop_assert_eq!(trail.usage(), truth, "{}: Trail::usage", step);
    Ok(())
}

async fn run(sinks: usize, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let names: Vec<String> = SINKS[..sinks].iter().map(|s| s.to_string()).collect();
    let mut trail = start(dir.path(), &names, &clock);
    let mut model = Model {
        committed: Vec::new(),
        positions: names.iter().map(|n| (n.clone(), 0)).collect(),
    };
    let l = limits();
    for (i, op) in ops.into_iter().enumerate() {
        let step = format!("step {i} {op:?}");
        match op {
            Op::Commit { event, system, pad } => {
                let before = trail.stats();
                match commit(&trail, i as u64, event, system, pad).await {
                    Ok(seq) => {
                        let expected = model.committed.last().copied().unwrap_or(0) + 1;
                        prop_assert_eq!(seq, expected, "{}: seqs are dense", step);
                        model.committed.push(seq);
                        let u = trail.usage();
                        if !system {
                            prop_assert!(
                                u.rows <= l.max_rows && u.bytes <= l.max_bytes,
                                "{}: over a ceiling",
                                step
                            );
                        }
                    }
                    Err(e) => {
                        prop_assert_eq!(e, CommitError::AuditBacklog, "{}", step);
                        prop_assert!(!system, "{}: a system change was refused", step);
                        // Refused only when the backlog is full or nothing below the cursor
                        // is left to prune.
                        let after = trail.stats();
                        let first = all_rows(trail.store()).first().map(|r| r.seq);
                        let nothing_to_prune = match (first, model.cursor()) {
                            (None, _) => true,
                            (Some(f), Some(c)) => f >= c,
                            (Some(_), None) => false,
                        };
                        prop_assert!(
                            before.backlog >= l.outbox_max_backlog || nothing_to_prune,
                            "{}: refused with room to make (backlog {}, first {:?}, cursor {:?}, usage {:?})",
                            step, before.backlog, first, model.cursor(), after.usage
                        );
                        let key = format!("k{i}").into_bytes();
                        prop_assert!(trail.store().get(Cf::Overrides, &key).unwrap().is_none());
                    }
                }
            }
            Op::Advance { sink, by } => {
                let Some(name) = names.get(sink % names.len().max(1)) else {
                    continue;
                };
                let last = model.committed.last().copied().unwrap_or(0);
                let to = (model.positions[name] + u64::from(by)).min(last);
                trail.advance(name, to, vec![]).await.unwrap();
                model.positions.insert(name.clone(), to);
            }
            Op::Tick { hours } => clock.advance(u64::from(hours) * HOUR),
            Op::Sweep => {
                // Never later than the retention before the newest row (which no sweep
                // deletes), whatever the clock says.
                let newest = all_rows(trail.store()).last().map(|r| r.at);
                let report = trail.sweep_now().await.unwrap();
                let now = clock.now_ms();
                let cutoff = newest.map_or(now, |n| n.min(now)) - 24 * HOUR;
                prop_assert_eq!(report.cutoff, cutoff);
                let below = model.cursor().unwrap_or(u64::MAX);
                let rows = all_rows(trail.store());
                let left = rows
                    .iter()
                    .filter(|r| r.at < cutoff && r.seq < below)
                    .count();
                prop_assert_eq!(
                    left,
                    0,
                    "{}: an expired row below the cursor survived",
                    step
                );
                let held = rows
                    .iter()
                    .filter(|r| r.at < cutoff && r.seq >= below)
                    .count() as u64;
                prop_assert_eq!(
                    report.blocked_by_cursor,
                    held,
                    "{}: blocked_by_cursor",
                    step
                );
            }
            Op::Restart => {
                trail.shutdown().await;
                drop(trail);
                trail = start(dir.path(), &names, &clock);
            }
        }
        check(&trail, &model, &step)?;
    }
    trail.shutdown().await;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn pruning_never_passes_the_cursor_and_counters_stay_exact(
        sinks in 0usize..=2,
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(run(sinks, ops))?;
    }
}
