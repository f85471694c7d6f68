//! A window of rows with their inclusion proofs against one signed checkpoint, read page by
//! page: what `GET /admin/v1/audit` streams as NDJSON, so that a receiver checks every row
//! without the node.
//!
//! One checkpoint is chosen when the export starts and every proof is against its tree size,
//! so the pages agree with each other however many rows commit meanwhile. Rows after its size
//! cannot be proven against it and end the export; rows older than the tree (a store that had
//! rows before `audit.tree` was on) have no leaf and are not read. A page is read through the
//! trail's own query (`page_within`, index-driven), within the same bounded budget as a page
//! of the list, and each row's leaf input is the bytes the store holds, read again by key:
//! a decoded row cannot give them back.

use base64::prelude::*;
use serde::Serialize;

use super::checkpoint::SignedCheckpoint;
use super::proof::{b64, ProofError};
use super::{leaf_hash, Stored, TreeMeta};
use crate::audit::row::{page_within, Filter, Row};
use crate::audit::Trail;
use crate::store::{keys, Cf, Store};

/// What an export proves against: the checkpoint, and where its tree starts.
#[derive(Debug, Clone)]
pub struct ExportStart {
    /// The checkpoint every proof of the export is against.
    pub checkpoint: SignedCheckpoint,
    /// The seq of leaf 0: rows before it predate the tree.
    pub first: u64,
}

impl ExportStart {
    /// The last seq the checkpoint covers (`first - 1` for an empty tree).
    pub fn last(&self) -> u64 {
        (self.first + self.checkpoint.size).saturating_sub(1)
    }
}

/// A row with what proves it.
#[derive(Debug, Clone, Serialize)]
pub struct ProvenRow {
    /// The row, as `GET /admin/v1/audit/{seq}` serves it.
    pub row: Row,
    /// What its leaf hashes, base64: the row's key then its value, as stored.
    pub leaf_input: String,
    /// Its leaf in the checkpoint's tree.
    pub index: u64,
    /// The audit path from the leaf to the checkpoint's root (RFC 6962), base64.
    pub proof: Vec<String>,
}

/// Where an export goes after a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// More rows may match after this seq, within the checkpoint.
    After(u64),
    /// No row after the page matches: the window is done.
    End,
    /// A matching row (or the read) went past the checkpoint's size: more may match, but
    /// only a newer checkpoint proves them.
    PastCheckpoint,
}

/// One page of an export.
#[derive(Debug, Clone)]
pub struct ProvenPage {
    /// The rows, in seq order, each with its proof.
    pub rows: Vec<ProvenRow>,
    /// Where to go on.
    pub next: Next,
}

/// Up to `limit` rows after `after` that `filter` lets through, reading at most `budget`
/// rows or index entries, each proven against `start`'s checkpoint.
pub fn page(
    store: &Store,
    start: &ExportStart,
    after: u64,
    limit: usize,
    filter: &Filter,
    budget: usize,
) -> Result<ProvenPage, ProofError> {
    let (size, last) = (start.checkpoint.size, start.last());
    // Rows before the tree have no leaf to prove.
    let after = after.max(start.first.saturating_sub(1));
    let scanned = page_within(store, after, limit, filter, budget)?;
    let full = scanned.rows.len() >= limit;
    let mut rows = Vec::with_capacity(scanned.rows.len());
    let mut past = false;
    let mut walk = store.walk(Cf::Audit, &[keys::ROW]);
    let reader = Stored(store);
    let root = root(start)?;
    for row in scanned.rows {
        if row.seq > last {
            past = true;
            break;
        }
        walk.advance_to(&keys::row_seek(row.seq));
        let (key, value) = walk
            .entry()
            .filter(|(k, _)| keys::decode_row_key(k).is_some_and(|(s, _)| s == row.seq))
            .ok_or_else(|| ProofError::Gone(format!("row {} was pruned", row.seq)))?;
        let index = row.seq - start.first;
        let proof = tlog_tiles::prove_record(size, index, &reader).map_err(|e| {
            ProofError::Gone(format!(
                "a node of row {}'s proof was pruned ({e})",
                row.seq
            ))
        })?;
        // A leaf that is not the one the tree holds would give a proof that fails at the
        // receiver: said here instead, as the damage it is.
        let leaf = leaf_hash(key, value);
        if tlog_tiles::check_record(&proof, size, root, index, leaf).is_err() {
            return Err(ProofError::Store(crate::store::StoreError::Corrupt {
                what: format!("audit row {}", row.seq),
                detail: "its leaf does not match the tree at the checkpoint's size".into(),
            }));
        }
        rows.push(ProvenRow {
            leaf_input: BASE64_STANDARD.encode([key, value].concat()),
            index,
            proof: proof.iter().map(b64).collect(),
            row,
        });
    }
    walk.finish()?;
    let next = match (past, rows.last()) {
        (true, _) => Next::PastCheckpoint,
        (false, Some(row)) if full => Next::After(row.row.seq),
        _ => match scanned.cut_at {
            Some(seq) if seq >= last => Next::PastCheckpoint,
            Some(seq) => Next::After(seq),
            None => Next::End,
        },
    };
    Ok(ProvenPage { rows, next })
}

/// The checkpoint's root hash.
fn root(start: &ExportStart) -> Result<tlog_tiles::Hash, ProofError> {
    let bytes = BASE64_STANDARD
        .decode(&start.checkpoint.root)
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .ok_or_else(|| {
            ProofError::Store(crate::store::StoreError::Corrupt {
                what: "m:checkpoint".into(),
                detail: "its root is not a base64 SHA-256 hash".into(),
            })
        })?;
    Ok(tlog_tiles::Hash(bytes))
}

impl Trail {
    /// What an export proves against: the newest signed checkpoint (`None`: none signed
    /// yet), or [`ProofError::NoTree`] when `audit.tree` is off.
    pub async fn export_start(&self) -> Result<Option<ExportStart>, ProofError> {
        if !self.tree.enabled {
            return Err(ProofError::NoTree);
        }
        let store = self.store.clone();
        crate::store::blocking::run("an export's checkpoint", move || {
            let first = TreeMeta::read(&store)?.ok_or(ProofError::NoTree)?.origin;
            let start = SignedCheckpoint::newest(&store)?
                .map(|checkpoint| ExportStart { checkpoint, first });
            Ok::<_, ProofError>(start)
        })
        .await?
    }

    /// One page of an export ([`page`]), read on the blocking pool.
    pub async fn export_page(
        &self,
        start: ExportStart,
        after: u64,
        limit: usize,
        filter: Filter,
        budget: usize,
    ) -> Result<ProvenPage, ProofError> {
        let store = self.store.clone();
        crate::store::blocking::run("a page of an export", move || {
            page(&store, &start, after, limit, &filter, budget)
        })
        .await?
    }
}
