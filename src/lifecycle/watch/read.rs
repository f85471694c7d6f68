//! Reading the outbox for watchers: events built and serialized once, and whether the rows
//! after a position are still there.
//!
//! Runs on the blocking pool (it walks RocksDB): the tail reads the newest events for every
//! watcher that is caught up, and a watcher behind the tail reads its own pages here.

use std::sync::Arc;

use cloudevents::AttributesReader;

use super::filter::Filter;
use super::Served;
use crate::audit::History;
use crate::lifecycle::event;
use crate::lifecycle::outbox::visit;
use crate::store::{keys, Cf, Store, StoreError};
use crate::telemetry;

/// Most outbox entities one watcher's call reads while its filter admits none: it answers
/// with the position it reached rather than hold a blocking thread for a whole backlog.
const MAX_ENTITIES_PER_CALL: usize = 8192;

/// The outbox and what its events are built with.
#[derive(Debug, Clone)]
pub(super) struct Outbox {
    pub(super) store: Store,
    pub(super) history: History,
    pub(super) source: String,
}

/// Events read after a position, and the position they cover.
#[derive(Debug, Default)]
pub(super) struct Read {
    /// The events, in seq order.
    pub(super) events: Vec<Arc<Served>>,
    /// Every flagged row up to it was read.
    pub(super) position: u64,
    /// Whether the read stopped at its limit (more may follow at once).
    pub(super) full: bool,
}

/// Up to `limit` outbox entities after `after` and up to `committed` (the last seq committed
/// before the read): each built into its event, serialized as the sinks' structured mode
/// writes it (so every watcher and every retry gets the same bytes).
pub(super) fn read(
    outbox: &Outbox,
    after: u64,
    limit: usize,
    committed: u64,
) -> Result<Read, StoreError> {
    let mut events = Vec::with_capacity(limit.min(1024));
    let visited = visit(
        &outbox.store,
        after,
        limit,
        |row, entity| match event::build(&row, entity, &outbox.history, &outbox.source) {
            Ok(built) => match serialize(&built) {
                Ok(json) => events.push(Arc::new(Served {
                    seq: row.seq,
                    ty: built.ty().to_owned(),
                    tenant: row.tenant.as_deref().map(str::to_owned),
                    json,
                })),
                Err(e) => telemetry::lifecycle::event_not_built(&event::EventError {
                    seq: row.seq,
                    detail: e.to_string(),
                }),
            },
            Err(e) => telemetry::lifecycle::event_not_built(&e),
        },
    )?;
    let (last, mut full) = visited.covered(limit, after, committed);
    let mut position = last.unwrap_or(after).max(after);
    // Rows written after `committed` was read are not served yet: every watcher hears of a
    // seq only once the trail has said it is committed, and a position never passes it.
    if position > committed {
        events.retain(|e| e.seq <= committed);
        position = committed.max(after);
        full = false;
    }
    Ok(Read {
        events,
        position,
        full,
    })
}

/// A built event in the sinks' structured JSON.
fn serialize(
    built: &cloudevents::Event,
) -> Result<Box<serde_json::value::RawValue>, serde_json::Error> {
    serde_json::value::to_raw_value(&ankusa_sinks::structured_value(built)?)
}

/// A watcher's page behind the tail: up to `limit` events its filter admits after `after`,
/// reading pages of the outbox until one admits something, the outbox is read up to
/// `committed`, or [`MAX_ENTITIES_PER_CALL`] were read. `Ok(Err(oldest))` when rows after
/// `after` were deleted: the position cannot be served, `oldest` is the lowest that can.
pub(super) fn behind(
    outbox: &Outbox,
    mut after: u64,
    filter: &Filter,
    limit: usize,
    committed: u64,
) -> Result<Result<Read, u64>, StoreError> {
    let start = after;
    let mut served = Read {
        position: after,
        ..Read::default()
    };
    let mut budget = MAX_ENTITIES_PER_CALL;
    loop {
        let page = read(outbox, after, limit.min(budget), committed)?;
        budget = budget.saturating_sub(limit);
        after = page.position;
        for event in page.events {
            if served.events.len() == limit {
                break;
            }
            if filter.admits(&event) {
                // A full page: the position stops at the last event served.
                served.position = event.seq;
                served.events.push(event);
            }
        }
        if served.events.len() < limit {
            served.position = after;
        }
        if !served.events.is_empty() || !page.full || budget == 0 {
            served.full = page.full;
            break;
        }
    }
    // Read after the page: deletions go oldest first, so when the row after `start` is
    // still here, none the page needed was deleted before it was read.
    Ok(match oldest_if_gone(&outbox.store, start, committed)? {
        Some(oldest) => Err(oldest),
        None => Ok(served),
    })
}

/// `Some(oldest)` when rows after position `after` were deleted (`oldest` the lowest
/// position still served: the seq before the oldest row); `None` while row `after + 1` is
/// there, or nothing after `after` is committed. Every committed seq has its row until
/// retention or a ceiling deletes it, oldest first.
pub(super) fn oldest_if_gone(
    store: &Store,
    after: u64,
    committed: u64,
) -> Result<Option<u64>, StoreError> {
    if after >= committed {
        return Ok(None);
    }
    let mut rows = store.walk(Cf::Audit, &[keys::ROW]);
    rows.seek(&keys::row_seek(after + 1));
    let first = rows.entry().and_then(|(k, _)| keys::decode_row_key(k));
    rows.finish()?;
    Ok(match first {
        Some((seq, _)) if seq == after + 1 => None,
        Some((seq, _)) => Some(seq - 1),
        None => Some(committed),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::audit::{Change, CommitError, Context, SystemClock, Trail, TrailOptions};

    #[tokio::test]
    async fn nothing_past_the_committed_seq_is_served_and_the_position_stays_at_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let options = TrailOptions {
            lifecycle: true,
            ..TrailOptions::default()
        };
        let trail = Trail::start(store.clone(), options, Arc::new(SystemClock)).unwrap();
        for i in 1..=3 {
            trail
                .commit(Context::system(), move |_tx| {
                    let c = Change::new("route.create", format!("routes/r{i}"))
                        .entity(json!({"id": i}));
                    Ok::<_, CommitError<()>>((c, ()))
                })
                .await
                .unwrap();
        }
        let outbox = Outbox {
            store: store.clone(),
            history: trail.history().clone(),
            source: "urn:test".into(),
        };
        // Row 3 is in the store, but the trail has said only 2 is committed.
        let read = read(&outbox, 0, 10, 2).unwrap();
        let seqs: Vec<u64> = read.events.iter().map(|e| e.seq).collect();
        assert_eq!((seqs, read.position, read.full), (vec![1, 2], 2, false));
        let read = super::read(&outbox, 2, 10, 2).unwrap();
        assert_eq!((read.events.len(), read.position), (0, 2));
        let read = super::read(&outbox, 0, 10, 3).unwrap();
        assert_eq!((read.events.len(), read.position), (3, 3));
        trail.shutdown().await;
    }
}
