//! Inclusion and consistency proofs (RFC 6962 §2.1.1 and §2.1.2), read from the stored tree.
//!
//! The proofs' hashes come from the stored nodes of written batches only; callers pass the
//! tree's size as of the last written batch.

use base64::prelude::*;
use serde::Serialize;
use tlog_tiles::{Error as TlogError, Hash};

use super::{leaf_hash, Stored, TreeMeta};
use crate::store::{keys, Cf, Entry, Store, StoreError};

/// Why a proof cannot be given.
#[derive(Debug, thiserror::Error)]
pub enum ProofError {
    /// The store keeps no tree (`audit.tree = false`).
    #[error("the trail has no Merkle tree (audit.tree is off)")]
    NoTree,
    /// A size past the tree, or a row past the size: no such tree, or not in it (yet).
    #[error("{0}")]
    OutOfRange(String),
    /// Sizes that cannot be asked for whatever the tree: `from` after `to`, or 0.
    #[error("{0}")]
    Invalid(String),
    /// The row, or a node the proof needs, was pruned (or never was in the tree).
    #[error("{0}")]
    Gone(String),
    /// The store could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// That row `seq` is leaf `index` of the tree of `size` leaves with root `root`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InclusionProof {
    /// The row.
    pub seq: u64,
    /// Its leaf: `seq` minus the tree's first seq.
    pub index: u64,
    /// Leaves of the tree the proof is for.
    pub size: u64,
    /// The leaf hash of the row: SHA-256 of 0x00 and `leaf_input` (RFC 6962), base64.
    pub leaf_hash: String,
    /// What the leaf hashes, base64: the row's key as stored (`a`, the seq and the commit
    /// time in unix ms, each 8 bytes big-endian) then its value as stored (the row's JSON,
    /// the fields and values `GET /admin/v1/audit/{seq}` serves), so that anyone holding the
    /// proof and a checkpoint recomputes the leaf without the node.
    pub leaf_input: String,
    /// The root of the tree of `size` leaves, base64.
    pub root: String,
    /// The audit path, leaf to root, base64.
    pub proof: Vec<String>,
}

/// That the tree of `from` leaves is a prefix of the tree of `to` leaves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConsistencyProof {
    /// Leaves of the older tree.
    pub from: u64,
    /// Leaves of the newer tree.
    pub to: u64,
    /// The older tree's root, base64.
    pub from_root: String,
    /// The newer tree's root, base64.
    pub to_root: String,
    /// The consistency proof, base64.
    pub proof: Vec<String>,
}

/// The proof that row `seq` is in the tree of `size` leaves; `tree_size` is the tree's size as
/// of the last written batch.
pub fn inclusion(
    store: &Store,
    seq: u64,
    size: u64,
    tree_size: u64,
) -> Result<InclusionProof, ProofError> {
    let origin = TreeMeta::read(store)?.ok_or(ProofError::NoTree)?.origin;
    let index = seq.checked_sub(origin).ok_or_else(|| {
        ProofError::Gone(format!("row {seq} predates the tree (from seq {origin})"))
    })?;
    if size > tree_size {
        return Err(ProofError::OutOfRange(format!(
            "size {size} is past the tree's {tree_size} leaves"
        )));
    }
    if index >= size {
        return Err(ProofError::OutOfRange(format!(
            "row {seq} is not in the tree of {size} leaves (it is leaf {index})"
        )));
    }
    let (key, value) =
        row(store, seq)?.ok_or_else(|| ProofError::Gone(format!("row {seq} was pruned")))?;
    let reader = Stored(store);
    let proof = tlog_tiles::prove_record(size, index, &reader).map_err(|e| gone(seq, &e))?;
    let root = tlog_tiles::tree_hash(size, &reader).map_err(|e| gone(seq, &e))?;
    Ok(InclusionProof {
        seq,
        index,
        size,
        leaf_hash: b64(&leaf_hash(&key, &value)),
        leaf_input: BASE64_STANDARD.encode([key.as_slice(), value.as_slice()].concat()),
        root: b64(&root),
        proof: proof.iter().map(b64).collect(),
    })
}

/// The proof that the tree of `from` leaves is a prefix of the tree of `to` leaves.
pub fn consistency(
    store: &Store,
    from: u64,
    to: u64,
    tree_size: u64,
) -> Result<ConsistencyProof, ProofError> {
    TreeMeta::read(store)?.ok_or(ProofError::NoTree)?;
    if from == 0 || from > to {
        return Err(ProofError::Invalid(format!(
            "from must be between 1 and to ({to}), not {from}"
        )));
    }
    if to > tree_size {
        return Err(ProofError::OutOfRange(format!(
            "to {to} is past the tree's {tree_size} leaves"
        )));
    }
    let reader = Stored(store);
    let pruned = |e: TlogError| {
        ProofError::Gone(format!(
            "the tree of {from} leaves predates the oldest retained row ({e})"
        ))
    };
    let proof = if from == to {
        Vec::new()
    } else {
        tlog_tiles::prove_tree(to, from, &reader).map_err(pruned)?
    };
    let from_root = tlog_tiles::tree_hash(from, &reader).map_err(pruned)?;
    let to_root = tlog_tiles::tree_hash(to, &reader).map_err(pruned)?;
    Ok(ConsistencyProof {
        from,
        to,
        from_root: b64(&from_root),
        to_root: b64(&to_root),
        proof: proof.iter().map(b64).collect(),
    })
}

/// Row `seq`'s key and value.
fn row(store: &Store, seq: u64) -> Result<Option<Entry>, StoreError> {
    let mut found = None;
    store.scan(Cf::Audit, &[keys::ROW], &keys::row_seek(seq), |k, v| {
        if keys::decode_row_key(k).is_some_and(|(s, _)| s == seq) {
            found = Some((k.to_vec(), v.to_vec()));
        }
        false
    })?;
    Ok(found)
}

fn gone(seq: u64, e: &TlogError) -> ProofError {
    ProofError::Gone(format!("a node of the proof of row {seq} was pruned ({e})"))
}

/// A hash in base64 (standard alphabet, padded), as checkpoints write roots.
pub fn b64(h: &Hash) -> String {
    BASE64_STANDARD.encode(h.0)
}
