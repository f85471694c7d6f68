//! Reading the outbox: the flagged rows after a position, with their entities.
//!
//! Only flagged rows have an `o`+seq entity, so the `o` keys are an index of what is to be
//! published: scanning them skips every unflagged row without reading it.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};

use crate::audit;
use crate::store::{keys, Cf, Store, StoreError};
use crate::telemetry::lifecycle as telemetry;

/// What a lifecycle event is made of: the parts of its flagged row the event carries,
/// borrowed from the stored bytes where they hold no escapes. Decoded from the stored row
/// without the rest (who, the detail map and the hashes are skipped, not built): the
/// publisher reads every flagged row once per sink.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct EventRow<'a> {
    /// The row's seq (from its key).
    #[serde(skip)]
    pub seq: u64,
    /// The row's commit time, unix milliseconds (from its key).
    #[serde(skip)]
    pub at: u64,
    /// `<kind>.<verb>`, e.g. `route.update`.
    #[serde(borrow)]
    pub action: Cow<'a, str>,
    /// The tenant the subject belongs to.
    #[serde(borrow, deserialize_with = "optional_text")]
    pub tenant: Option<Cow<'a, str>>,
    /// The subject, e.g. `routes/r1`.
    #[serde(borrow)]
    pub resource: Cow<'a, str>,
    /// The subject's change counter after the change, where it has one.
    pub revision: Option<u64>,
    /// Whether the row is flagged for publication.
    pub publish: bool,
    /// A state-refresh row (`io.ankusa.<kind>.refreshed`).
    #[serde(default)]
    pub refresh: bool,
    /// The subject's version after the change.
    #[serde(default)]
    pub version: Option<u64>,
    /// The shared store that issued the version (`None`: this node's own).
    #[serde(borrow, default, deserialize_with = "optional_text")]
    pub store: Option<Cow<'a, str>>,
    /// The snapshot the row belongs to.
    #[serde(borrow, default, deserialize_with = "optional_text")]
    pub snapshot: Option<Cow<'a, str>>,
    /// The W3C `traceparent` of the change (the CloudEvents distributed-tracing extension).
    #[serde(borrow, default, deserialize_with = "optional_text")]
    pub traceparent: Option<Cow<'a, str>>,
    /// The W3C `tracestate` of the change.
    #[serde(borrow, default, deserialize_with = "optional_text")]
    pub tracestate: Option<Cow<'a, str>>,
}

/// An optional string, borrowed where it holds no escapes (`Option<Cow>` would always own).
fn optional_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    #[derive(Deserialize)]
    struct Text<'a>(#[serde(borrow)] Cow<'a, str>);
    Ok(Option::<Text<'de>>::deserialize(d)?.map(|t| t.0))
}

impl<'a> EventRow<'a> {
    /// The row with nothing borrowed.
    pub fn into_owned(self) -> EventRow<'static> {
        let own = |text: Cow<'a, str>| Cow::Owned(text.into_owned());
        EventRow {
            action: own(self.action),
            tenant: self.tenant.map(own),
            resource: own(self.resource),
            store: self.store.map(own),
            snapshot: self.snapshot.map(own),
            traceparent: self.traceparent.map(own),
            tracestate: self.tracestate.map(own),
            ..self
        }
    }

    /// Decode the row stored at `key` (which gives its seq and time).
    pub fn decode(key: &[u8], value: &'a [u8]) -> Result<EventRow<'a>, StoreError> {
        let (mut row, seq, at) = audit::decode_row_as::<EventRow<'a>>(key, value)?;
        row.seq = seq;
        row.at = at;
        Ok(row)
    }
}

/// How far a [`visit`] went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Visited {
    /// Outbox entities read (at most the limit), whether or not their row was visited.
    pub entities: usize,
    /// The seq of the last of them.
    pub last: Option<u64>,
}

impl Visited {
    /// The last seq a page of at most `limit` entities after `after` covers, and whether it
    /// was full (more may follow at once), with `committed` the last seq committed before the
    /// read began. A full page covers up to its last entity; one that is not full covers up
    /// to `committed` too (every row up to it was visible, so none after the page's entities
    /// is flagged). Moving a position over it lets it pass a run of changes that publish
    /// nothing.
    pub fn covered(&self, limit: usize, after: u64, committed: u64) -> (Option<u64>, bool) {
        let full = self.entities >= limit;
        if !full && committed > after {
            return (Some(self.last.unwrap_or(0).max(committed)), false);
        }
        (self.last, full)
    }
}

/// Visit up to `limit` flagged rows with seq greater than `after`, in seq order, each with its
/// redacted entity: the stored JSON bytes, spliced into the event's data as they are. Both
/// are lent from the store's walks, so a page is read without a copy of either.
///
/// The entity bytes are not parsed here: the writer stored them as `serde_json` wrote them,
/// in the batch of their row, and every block read is checked against its checksum. A damaged
/// store (an entity whose row is gone, unflagged, or does not decode) has that entity passed
/// over and logged: it counts toward the limit but is not visited.
pub fn visit(
    store: &Store,
    after: u64,
    limit: usize,
    mut each: impl FnMut(EventRow<'_>, &[u8]),
) -> Result<Visited, StoreError> {
    let mut visited = Visited::default();
    if after == u64::MAX || limit == 0 {
        return Ok(visited);
    }
    // Only flagged rows have an entity: the outbox walk leads, the rows' walk steps (or
    // seeks) to each entity's row.
    let mut entities = store.walk(Cf::Audit, &[keys::OUTBOX]);
    let mut rows = store.walk(Cf::Audit, &[keys::ROW]);
    entities.seek(&keys::outbox_key(after + 1));
    while visited.entities < limit {
        let Some((key, entity)) = entities.entry() else {
            break;
        };
        if let Some(seq) = keys::decode_seq_key(keys::OUTBOX, key) {
            visited.entities += 1;
            visited.last = Some(seq);
            rows.advance_to(&keys::row_seek(seq));
            match rows.entry() {
                // The walk lands on the next row when this one is gone: exact hits only.
                Some((k, v)) if keys::decode_row_key(k).map(|(s, _)| s) == Some(seq) => {
                    match EventRow::decode(k, v) {
                        Ok(row) if row.publish => each(row, entity),
                        Ok(_) => telemetry::outbox_damaged(
                            seq,
                            "outbox entity of an unflagged row",
                            None,
                        ),
                        // Damage too: skipped, rather than every sink stopped at it for good.
                        Err(e) => {
                            telemetry::outbox_damaged(seq, "outbox row does not decode", Some(&e))
                        }
                    }
                }
                // An entity without its flagged row: retention deletes both in one batch,
                // so this is damage; skip it rather than publish an event no row explains.
                _ => telemetry::outbox_damaged(seq, "outbox entity without a flagged row", None),
            }
        }
        entities.next();
    }
    entities.finish()?;
    rows.finish()?;
    Ok(visited)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rocksdb::WriteBatch;
    use serde_json::{json, Value};

    use super::*;
    use crate::audit::{Change, CommitError, Context, SystemClock, Trail, TrailOptions};

    async fn change(trail: &Trail, resource: &str, tenant: Option<&str>, flagged: bool) {
        let (resource, tenant) = (resource.to_owned(), tenant.map(str::to_owned));
        trail
            .commit(Context::system(), move |_tx| {
                let mut c = Change::new("route.create", resource.clone());
                if let Some(t) = tenant {
                    c = c.tenant(t);
                }
                if flagged {
                    c = c.entity(json!({"id": resource}));
                }
                Ok::<_, CommitError<()>>((c, ()))
            })
            .await
            .unwrap();
    }

    fn open(dir: &std::path::Path) -> (Store, Trail) {
        let store = Store::open(dir).unwrap();
        let trail = Trail::start(
            store.clone(),
            TrailOptions::default(),
            Arc::new(SystemClock),
        )
        .unwrap();
        (store, trail)
    }

    /// What a visit saw: each row (owned) with its entity, and how far it went.
    fn read(store: &Store, after: u64, limit: usize) -> (Vec<(EventRow<'static>, Value)>, Visited) {
        let mut seen = vec![];
        let visited = visit(store, after, limit, |row, entity| {
            seen.push((row.into_owned(), serde_json::from_slice(entity).unwrap()));
        })
        .unwrap();
        (seen, visited)
    }

    fn seqs(seen: &[(EventRow<'static>, Value)]) -> Vec<u64> {
        seen.iter().map(|(r, _)| r.seq).collect()
    }

    #[tokio::test]
    async fn visits_flagged_rows_in_order_and_passes_over_a_missing_row() {
        let dir = tempfile::tempdir().unwrap();
        let (store, trail) = open(dir.path());
        for (i, flagged) in [(1, true), (2, false), (3, true), (4, true), (5, true)] {
            change(&trail, &format!("routes/r{i}"), Some("t1"), flagged).await;
        }
        let (seen, visited) = read(&store, 0, 10);
        assert_eq!(seqs(&seen), vec![1, 3, 4, 5]);
        assert_eq!(
            visited,
            Visited {
                entities: 4,
                last: Some(5)
            }
        );
        // The parts of the full row an event carries.
        let (first, entity) = &read(&store, 0, 1).0[0];
        let row = crate::audit::get(&store, 1).unwrap().unwrap();
        let expected = EventRow {
            seq: row.seq,
            at: row.at,
            action: row.action.into(),
            tenant: row.tenant.map(Cow::Owned),
            resource: row.resource.into(),
            revision: row.revision,
            publish: row.publish,
            refresh: row.refresh,
            version: row.version,
            store: row.store.map(Cow::Owned),
            snapshot: row.snapshot.map(Cow::Owned),
            traceparent: row.traceparent.map(Cow::Owned),
            tracestate: row.tracestate.map(Cow::Owned),
        };
        assert_eq!((first, first.resource.as_ref()), (&expected, "routes/r1"));
        assert_eq!(entity, &json!({"id": "routes/r1"}));
        assert_eq!(read(&store, 3, 1).0[0].1, json!({"id": "routes/r4"}));
        // Damage: row 4 gone, its entity left behind. Rows 3 and 5 still pair with theirs.
        let row4 = crate::audit::get(&store, 4).unwrap().unwrap();
        let mut batch = WriteBatch::default();
        batch.delete_cf(store.cf(Cf::Audit), keys::row_key(4, row4.at));
        store.write(batch, true).unwrap();
        let (seen, visited) = read(&store, 0, 10);
        let pairs: Vec<(u64, Value)> = seen.into_iter().map(|(r, e)| (r.seq, e)).collect();
        assert_eq!(
            pairs,
            vec![
                (1, json!({"id": "routes/r1"})),
                (3, json!({"id": "routes/r3"})),
                (5, json!({"id": "routes/r5"}))
            ]
        );
        assert_eq!(
            visited,
            Visited {
                entities: 4,
                last: Some(5)
            }
        );
        // The limit counts entities, the damaged one too: a page of 3 ends at 4, so the
        // next one starts after it rather than skipping 5.
        let (seen, visited) = read(&store, 0, 3);
        assert_eq!(seqs(&seen), vec![1, 3]);
        assert_eq!(
            visited,
            Visited {
                entities: 3,
                last: Some(4)
            }
        );
        assert_eq!(seqs(&read(&store, 4, 3).0), vec![5]);
        // Damage: row 3 no longer decodes. It is passed over like the missing one.
        let row3 = crate::audit::get(&store, 3).unwrap().unwrap();
        let mut batch = WriteBatch::default();
        batch.put_cf(store.cf(Cf::Audit), keys::row_key(3, row3.at), b"not json");
        store.write(batch, true).unwrap();
        let (seen, visited) = read(&store, 0, 10);
        assert_eq!(seqs(&seen), vec![1, 5]);
        assert_eq!(visited.last, Some(5));
        trail.shutdown().await;
    }

    #[tokio::test]
    async fn text_with_escapes_decodes_as_owned_and_the_rest_is_borrowed() {
        let dir = tempfile::tempdir().unwrap();
        let (store, trail) = open(dir.path());
        change(&trail, "routes/r\"1\u{e9}", Some("t\\1"), true).await;
        change(&trail, "routes/r2", None, true).await;
        change(&trail, "routes/r3", Some("t3"), true).await;
        let mut seen = vec![];
        visit(&store, 0, 10, |row, _| {
            seen.push((
                row.resource.to_string(),
                matches!(row.resource, Cow::Borrowed(_)),
                row.tenant
                    .as_ref()
                    .map(|t| (t.to_string(), matches!(t, Cow::Borrowed(_)))),
                matches!(row.action, Cow::Borrowed(_)),
            ))
        })
        .unwrap();
        assert_eq!(
            seen,
            vec![
                (
                    "routes/r\"1\u{e9}".to_owned(),
                    false,
                    Some(("t\\1".to_owned(), false)),
                    true
                ),
                ("routes/r2".to_owned(), true, None, true),
                (
                    "routes/r3".to_owned(),
                    true,
                    Some(("t3".to_owned(), true)),
                    true
                ),
            ]
        );
        trail.shutdown().await;
    }
}
