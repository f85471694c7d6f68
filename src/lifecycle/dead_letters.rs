//! Dead letters: events a sink refused for good, kept per sink in seq order so an operator
//! can look at them, send them again (same ids), or drop them.
//!
//! The publisher writes a dead letter ([`encode`]) in the same batch that moves its sink past
//! the event (through the writer); this module reads them and removes them, each removal with
//! its audit row in one batch (it changes the node's operational state). They live in their
//! own column family, never in the trail. Their layout is known here only.
//!
//! A sink holds at most `lifecycle.max_dead_letters`. They are not counted into the trail's
//! ceilings: those prune the oldest rows to make room, and a dead letter must never be
//! pruned (it is the only copy of an event its sink passed over), so a full trail would only
//! refuse operators' changes, never stop the sink that fills it. Instead [`LetterCount`] counts
//! each sink's letters, and at the ceiling the sink stops before the next event it would
//! dead-letter until an operator removes some: no event is passed over without its letter.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ankusa_sinks::{Delivery, Event, Outcome, Sink};
use cloudevents::AttributesReader;
use serde::Serialize;
use serde_json::{json, Value};

use crate::audit::{Change, CommitError, Context, Trail};
use crate::store::{keys, Cf, Entry, Store, StoreError};
use crate::telemetry;

/// How many dead letters one sink holds: counted from the store when the publisher starts,
/// then kept by the sink's lane (which adds what it dead-letters, before the letters are
/// durable) and the operator's removals (which take away what they removed). So it is
/// never below what the store holds, and the lane never dead-letters past the ceiling.
/// Shared by clones; each change is reported as the sink's gauge.
#[derive(Debug, Clone)]
pub struct LetterCount {
    sink: Arc<str>,
    count: Arc<AtomicU64>,
}

impl LetterCount {
    /// Sink `sink`'s count, starting at `count` (what the store holds).
    pub(crate) fn new(sink: &str, count: u64) -> LetterCount {
        telemetry::lifecycle::dead_letters_counted(sink, count);
        LetterCount {
            sink: sink.into(),
            count: Arc::new(AtomicU64::new(count)),
        }
    }

    /// The sink's name.
    pub fn sink(&self) -> &str {
        &self.sink
    }

    /// How many dead letters the sink holds.
    pub fn get(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    /// How many more the sink may hold under `max`.
    pub(crate) fn room(&self, max: u64) -> u64 {
        max.saturating_sub(self.get())
    }

    /// `n` more dead letters, handed over to be written.
    pub(crate) fn add(&self, n: u64) {
        if n > 0 {
            let now = self.count.fetch_add(n, Ordering::SeqCst).saturating_add(n);
            telemetry::lifecycle::dead_letters_counted(&self.sink, now);
        }
    }

    /// `n` dead letters fewer, removed by an operator.
    fn remove(&self, n: u64) {
        let less = |c: u64| Some(c.saturating_sub(n));
        let before = self
            .count
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, less);
        let now = before.map_or(0, |c| c.saturating_sub(n));
        telemetry::lifecycle::dead_letters_counted(&self.sink, now);
    }
}

/// One dead letter.
#[derive(Debug, Clone, Serialize)]
pub struct DeadLetter {
    /// The row the event was built from.
    pub seq: u64,
    /// Why the sink refused it.
    pub reason: String,
    /// The row's commit time (unix ms).
    pub at: u64,
    /// The event, in CloudEvents structured (JSON) form.
    pub event: Value,
}

/// What a redrive did.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Redriven {
    /// Delivered now, and removed.
    pub delivered: u64,
    /// Still refused or failing, and kept (the redrive stops at the first).
    pub remaining: u64,
    /// Why the redrive stopped before it tried every letter, when a letter was delivered but
    /// its removal row could not be written (`store_unavailable`; the backlog never refuses
    /// it): that letter is kept, and sent again (same id) by the next redrive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<&'static str>,
}

/// The dead letter of `d`, which `sink` refused for good: the event (structured mode) and why
/// it was refused, keyed by sink and seq; `at` is its row's commit time.
pub fn encode(sink: &str, d: &Delivery, reason: &str, at: u64) -> Entry {
    let event = ankusa_sinks::structured_value(&d.event)
        .unwrap_or_else(|e| json!({"id": d.event.id(), "unencodable": e.to_string()}));
    let value = json!({
        "sink": sink,
        "seq": d.seq,
        "reason": reason,
        "at": at,
        "event": event,
    });
    (
        keys::dead_letter_key(sink, d.seq),
        serde_json::to_vec(&value).expect("a dead letter always serializes"),
    )
}

/// Up to `limit` dead letters of `sink` with seq greater than `after`, in seq order.
pub fn list(
    store: &Store,
    sink: &str,
    after: u64,
    limit: usize,
) -> Result<Vec<DeadLetter>, StoreError> {
    let prefix = keys::dead_letter_prefix(sink);
    let from = keys::dead_letter_key(sink, after.saturating_add(1));
    let mut out = Vec::new();
    let mut failure = None;
    store.scan(Cf::DeadLetters, &prefix, &from, |k, v| {
        match decode(sink, k, v) {
            Ok(letter) => out.push(letter),
            Err(e) => failure = Some(e),
        }
        failure.is_none() && out.len() < limit
    })?;
    match failure {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Why a dead letter could not be removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no such dead letter")]
pub struct NoSuchLetter;

/// Remove dead letter `seq` of the sink `counted` counts for good, with its audit row
/// (`dead_letter.drop`) in the same batch. Returns the row's seq.
pub async fn drop_letter(
    trail: &Trail,
    ctx: Context,
    counted: &LetterCount,
    seq: u64,
) -> Result<u64, CommitError<NoSuchLetter>> {
    remove(trail, ctx, counted, seq, "dead_letter.drop").await
}

/// Send the dead letters of the sink `counted` counts again through `target`, in seq order with
/// their original ids; each one delivered is removed with an audit row
/// (`dead_letter.redrive`). Stops at the first that fails again, or whose row cannot be
/// written: an error only if nothing was removed yet, otherwise the report says why it
/// stopped.
pub async fn redrive(
    trail: &Trail,
    ctx: Context,
    counted: &LetterCount,
    target: &dyn Sink,
) -> Result<Redriven, CommitError<NoSuchLetter>> {
    let sink = counted.sink();
    let mut report = Redriven::default();
    let mut after = 0;
    loop {
        let letters = {
            let (store, sink) = (trail.store().clone(), sink.to_owned());
            crate::store::blocking::try_run("a page of dead letters", move || {
                list(&store, &sink, after, 100)
            })
            .await?
        };
        if letters.is_empty() {
            return Ok(report);
        }
        for letter in letters {
            after = letter.seq;
            if !resend(sink, &letter, target).await? {
                report.remaining = remaining(trail, sink).await?;
                return Ok(report);
            }
            match remove(
                trail,
                ctx.clone(),
                counted,
                letter.seq,
                "dead_letter.redrive",
            )
            .await
            {
                Ok(_) => report.delivered += 1,
                Err(e) if report.delivered == 0 => return Err(e),
                Err(e) => {
                    report.stopped = Some(match e {
                        CommitError::AuditBacklog => "audit_backlog",
                        _ => "store_unavailable",
                    });
                    // The letter just delivered is kept: at least one remains.
                    report.remaining = remaining(trail, sink).await.map_or(1, |n| n.max(1));
                    return Ok(report);
                }
            }
        }
    }
}

/// Send `letter` of `sink` again through `target`, with its original id: whether it was
/// delivered.
async fn resend(sink: &str, letter: &DeadLetter, target: &dyn Sink) -> Result<bool, StoreError> {
    let event: Event =
        serde_json::from_value(letter.event.clone()).map_err(|e| StoreError::Corrupt {
            what: format!("dead letter {sink}/{}", letter.seq),
            detail: e.to_string(),
        })?;
    let outcome = target
        .send(&[Delivery {
            seq: letter.seq,
            event,
        }])
        .await;
    Ok(outcome.first() == Some(&Outcome::Delivered))
}

/// How many dead letters `sink` still has, read off the runtime.
async fn remaining(trail: &Trail, sink: &str) -> Result<u64, StoreError> {
    let (store, sink) = (trail.store().clone(), sink.to_owned());
    crate::store::blocking::try_run("counting dead letters", move || count(&store, &sink)).await
}

/// Remove dead letter `seq` of the sink `counted` counts with its `action` row, in one batch,
/// and count it out. Never refused by the backlog or the ceilings ([`Context::relieving`]):
/// a sink stopped at its dead-letter ceiling, or a backlog full behind it, waits for exactly
/// this.
async fn remove(
    trail: &Trail,
    ctx: Context,
    counted: &LetterCount,
    seq: u64,
    action: &'static str,
) -> Result<u64, CommitError<NoSuchLetter>> {
    let sink = counted.sink().to_owned();
    let committed = trail
        .commit(ctx.relieving(), move |tx| {
            let key = keys::dead_letter_key(&sink, seq);
            if tx.get(Cf::DeadLetters, &key)?.is_none() {
                return Err(CommitError::Refused(NoSuchLetter));
            }
            tx.delete(Cf::DeadLetters, key)?;
            let change = Change::new(action, format!("sinks/{sink}/dead-letters/{seq}"))
                .detail("sink", sink.clone())
                .detail("seq", seq);
            Ok((change, ()))
        })
        .await?;
    counted.remove(1);
    Ok(committed.seq)
}

/// How many dead letters `sink` has.
pub fn count(store: &Store, sink: &str) -> Result<u64, StoreError> {
    let prefix = keys::dead_letter_prefix(sink);
    let mut n = 0;
    store.scan(Cf::DeadLetters, &prefix, &prefix, |_, _| {
        n += 1;
        true
    })?;
    Ok(n)
}

fn decode(sink: &str, key: &[u8], value: &[u8]) -> Result<DeadLetter, StoreError> {
    let corrupt = |detail: String| StoreError::Corrupt {
        what: format!("dead letter {}", hex::encode(key)),
        detail,
    };
    let seq = keys::decode_dead_letter_key(sink, key).ok_or_else(|| corrupt("bad key".into()))?;
    let v: Value = serde_json::from_slice(value).map_err(|e| corrupt(e.to_string()))?;
    Ok(DeadLetter {
        seq,
        reason: v["reason"].as_str().unwrap_or_default().to_owned(),
        at: v["at"].as_u64().unwrap_or(0),
        event: v["event"].clone(),
    })
}
