//! Dead letters: events a sink refused for good, kept per sink in seq order so an operator
//! can look at them, send them again (same ids), or drop them.
//!
//! The publisher writes a dead letter in the same batch that moves its sink past the event
//! (through the writer); this module reads them and removes them. They live in their own
//! column family, never in the trail.

use ankusa_sinks::{Delivery, Event, Outcome, Sink};
use rocksdb::WriteBatch;
use serde::Serialize;
use serde_json::Value;

use crate::store::{keys, Cf, Store, StoreError};

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

/// Remove dead letter `seq` of `sink`; `false` if there was none.
pub fn drop_letter(store: &Store, sink: &str, seq: u64) -> Result<bool, StoreError> {
    let key = keys::dead_letter_key(sink, seq);
    if store.get(Cf::DeadLetters, &key)?.is_none() {
        return Ok(false);
    }
    let mut batch = WriteBatch::default();
    batch.delete_cf(store.cf(Cf::DeadLetters), key);
    store.write(batch, true)?;
    Ok(true)
}

/// Send `sink`'s dead letters again through `target`, in seq order with their original ids,
/// removing each one delivered; stop at the first that fails again.
pub async fn redrive(store: &Store, sink: &str, target: &dyn Sink) -> Result<Redriven, StoreError> {
    let mut report = Redriven::default();
    let mut after = 0;
    loop {
        let letters = {
            let (store, sink) = (store.clone(), sink.to_owned());
            tokio::task::spawn_blocking(move || list(&store, &sink, after, 100))
                .await
                .map_err(|e| StoreError::Unavailable(e.to_string()))??
        };
        if letters.is_empty() {
            return Ok(report);
        }
        for letter in letters {
            after = letter.seq;
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
            if outcome.first() != Some(&Outcome::Delivered) {
                report.remaining = count(store, sink)?;
                return Ok(report);
            }
            drop_letter(store, sink, letter.seq)?;
            report.delivered += 1;
        }
    }
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
