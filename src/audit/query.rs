//! Reading the trail through its index entries (`audit::index`): a page of the rows a filter
//! names, in seq order, in time proportional to the entries it walks rather than to the
//! trail.
//!
//! One index drives the walk (the most selective the filter names: the subject, the actor, a
//! result other than `ok`, the tenant); each entry's row is read and the whole filter checked
//! on it. A time window bounds the walk by seq: a row's commit time never goes back (the
//! writer stamps each row at least its predecessor's), so the rows of `[from, until)` are
//! those between the first entry of the time index at `from` and the first at `until`.

use super::row::{decode_row, Filter, RowResult, Scanned};
use crate::store::{keys, keys::Index, Cf, Store, StoreError};

/// Whether `filter` names something an index answers.
pub(crate) fn indexed(filter: &Filter) -> bool {
    driving(filter).is_some() || filter.from.is_some() || filter.until.is_some()
}

/// Rows closer than this to the last one read are stepped to rather than sought.
const ROW_STEPS: u64 = 8;

/// The index that drives a walk for `filter`, the most selective first.
fn driving(filter: &Filter) -> Option<Index<'_>> {
    let result = match filter.result {
        Some(RowResult::Failed) => Some(Index::Result(1)),
        Some(RowResult::Interrupted) => Some(Index::Result(2)),
        // Most rows: a walk of the rows themselves is as short.
        Some(RowResult::Ok) | None => None,
    };
    filter
        .subject
        .as_deref()
        .map(Index::Subject)
        .or(filter.actor.as_deref().map(Index::Actor))
        .or(result)
        .or(filter.tenant.as_deref().map(Index::Tenant))
}

/// The seqs `[lo, hi]` of the rows committed in `[from, until)` (`lo > hi`: none).
fn window(store: &Store, from: Option<u64>, until: Option<u64>) -> Result<(u64, u64), StoreError> {
    let first_at = |at: u64| -> Result<Option<u64>, StoreError> {
        let prefix = [keys::INDEX, b't'];
        let mut walk = store.walk(Cf::Audit, &prefix);
        walk.seek(&Index::Time(at).prefix().unwrap_or_default());
        let seq = walk.entry().and_then(|(k, _)| keys::decode_index_seq(k));
        walk.finish()?;
        Ok(seq)
    };
    let lo = match from {
        Some(from) => first_at(from)?.unwrap_or(u64::MAX),
        None => 0,
    };
    let hi = match until {
        Some(until) => first_at(until)?.map_or(u64::MAX, |seq| seq.saturating_sub(1)),
        None => u64::MAX,
    };
    Ok((lo, hi))
}

/// [`super::row::page_within`] for a filter an index answers: up to `limit` rows after
/// `after`, walking at most `budget` index entries (or rows, for a time window alone).
pub(crate) fn page(
    store: &Store,
    after: u64,
    limit: usize,
    filter: &Filter,
    budget: usize,
) -> Result<Scanned, StoreError> {
    let mut scanned = Scanned::default();
    let (lo, hi) = window(store, filter.from, filter.until)?;
    let start = after.max(lo.saturating_sub(1));
    if start >= hi {
        return Ok(scanned);
    }
    // The walk: index entries naming seqs, or the rows themselves.
    let (prefix, from_key) = match driving(filter) {
        Some(index) => match (index.prefix(), index.key(start + 1)) {
            (Some(prefix), Some(key)) => (prefix, key),
            // A text no entry can hold: no row has it.
            _ => return Ok(scanned),
        },
        None => (vec![keys::ROW], keys::row_seek(start + 1).to_vec()),
    };
    let on_rows = prefix == [keys::ROW];
    let mut walk = store.walk(Cf::Audit, &prefix);
    // The rows an index names are read into the block cache; a walk of the rows themselves
    // is a scan, which would only evict what is there.
    let mut rows = match on_rows {
        true => store.walk(Cf::Audit, &[keys::ROW]),
        false => store.seeks(Cf::Audit, &[keys::ROW]),
    };
    walk.seek(&from_key);
    let (mut read, mut last) = (0, start);
    while let Some((key, _)) = walk.entry() {
        let seq = match on_rows {
            true => keys::decode_row_key(key).map(|(seq, _)| seq),
            false => keys::decode_index_seq(key),
        };
        let Some(seq) = seq else {
            walk.next();
            continue;
        };
        if seq > hi {
            break;
        }
        read += 1;
        // Rows an index names far apart (an actor's over months) are a seek each; stepping
        // towards them first would only add the steps.
        match seq > last.saturating_add(ROW_STEPS) {
            true => rows.seek(&keys::row_seek(seq)),
            false => rows.advance_to(&keys::row_seek(seq)),
        }
        last = seq;
        // An entry without its row would be damage: it names nothing, and is passed over.
        if let Some((k, v)) = rows.entry() {
            if keys::decode_row_key(k).is_some_and(|(s, _)| s == seq) {
                let row = decode_row(k, v)?;
                if filter.matches(&row) {
                    scanned.rows.push(row);
                }
            }
        }
        if scanned.rows.len() >= limit {
            break;
        }
        if read >= budget {
            scanned.cut_at = Some(seq);
            break;
        }
        walk.next();
    }
    walk.finish()?;
    rows.finish()?;
    Ok(scanned)
}
