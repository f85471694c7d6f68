//! Signed checkpoints: the tree's (origin, size, root) in the C2SP `tlog-checkpoint` form,
//! signed with the store's Ed25519 key as a C2SP signed note.
//!
//! The key is made once per store (`m:checkpoint_key`, the signed-note key texts) and,
//! like `m:audit_key`, never leaves the node: only its verifier key is printed (`ankusa audit
//! key`). The key's name is `ankusa.audit/<first incarnation id>`, the same for the store's
//! whole life; a checkpoint's origin is `ankusa.audit/<incarnation id>` of the incarnation that
//! signed it, so a store restored from a backup (a new incarnation, re-issuing seqs) signs
//! under a new origin and a witness never sees two roots for one (origin, size).

use base64::prelude::*;
use serde::{Deserialize, Serialize};
use signed_note::{Note, Signer, StandardSigner, StandardVerifier, VerifierList};
use tlog_tiles::{Checkpoint, Hash};
use uuid::Uuid;

use crate::store::{keys, keys::meta, Cf, Store, StoreError};

/// What every origin and key name starts with.
const ORIGIN_PREFIX: &str = "ankusa.audit/";

/// The origin of the checkpoints an incarnation signs.
pub fn origin(incarnation: Uuid) -> String {
    format!("{ORIGIN_PREFIX}{incarnation}")
}

/// The incarnation an origin names, if it is one of this node's.
pub fn incarnation_of(origin: &str) -> Option<Uuid> {
    origin.strip_prefix(ORIGIN_PREFIX)?.parse().ok()
}

/// A checkpoint as the node keeps and publishes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedCheckpoint {
    /// The origin: the log's identity, `ankusa.audit/<incarnation id>`.
    pub origin: String,
    /// Rows in the tree: the checkpoint covers the tree's leaves `0..size`.
    pub size: u64,
    /// The tree's root hash, base64.
    pub root: String,
    /// The signed note: the checkpoint text, a blank line and the signature line.
    pub checkpoint: String,
}

impl SignedCheckpoint {
    /// Encoded, as `m:checkpoint` holds it.
    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a checkpoint always serializes")
    }

    /// `m:checkpoint`: the newest checkpoint the store signed.
    pub fn newest(store: &Store) -> Result<Option<SignedCheckpoint>, StoreError> {
        store.meta_json(meta::CHECKPOINT)
    }
}

/// The store's checkpoint signing key (`m:checkpoint_key`).
pub struct CheckpointKey {
    signer: StandardSigner,
    verifier: String,
}

impl std::fmt::Debug for CheckpointKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the signing key.
        f.debug_struct("CheckpointKey")
            .field("verifier", &self.verifier)
            .finish()
    }
}

impl CheckpointKey {
    /// `m:checkpoint_key`, made into `batch` when the store has none yet, named after the
    /// store's first incarnation.
    pub(crate) fn load_or_make(
        store: &Store,
        batch: &mut rocksdb::WriteBatch,
        first_incarnation: Uuid,
    ) -> Result<CheckpointKey, StoreError> {
        if let Some(key) = CheckpointKey::load(store)? {
            return Ok(key);
        }
        let (signer, verifier) =
            signed_note::generate_key(&mut rand_core::OsRng, &origin(first_incarnation));
        let stored = StoredKey { signer, verifier };
        let bytes = serde_json::to_vec(&stored).expect("a key always serializes");
        batch.put_cf(
            store.cf(Cf::Audit),
            keys::meta_key(meta::CHECKPOINT_KEY),
            bytes,
        );
        CheckpointKey::from_stored(stored)
    }

    /// `m:checkpoint_key`, if the store has one.
    pub fn load(store: &Store) -> Result<Option<CheckpointKey>, StoreError> {
        store
            .meta_json::<StoredKey>(meta::CHECKPOINT_KEY)?
            .map(CheckpointKey::from_stored)
            .transpose()
    }

    fn from_stored(stored: StoredKey) -> Result<CheckpointKey, StoreError> {
        let signer = StandardSigner::new(&stored.signer).map_err(|e| damaged(&e.to_string()))?;
        Ok(CheckpointKey {
            signer,
            verifier: stored.verifier,
        })
    }

    /// The verifier key, in the signed-note text form (`<name>+<id>+<key>`): what a witness
    /// or `ankusa audit verify --key` checks checkpoints with.
    pub fn verifier_key(&self) -> &str {
        &self.verifier
    }

    /// Sign the checkpoint of the tree of `size` leaves with root `root`, under `origin`.
    pub(crate) fn sign(&self, origin: &str, size: u64, root: Hash) -> SignedCheckpoint {
        let text = Checkpoint::new(origin, size, root, "")
            .expect("an origin of this node is a valid checkpoint origin")
            .to_bytes();
        let mut note = Note::new(&text, &[]).expect("a checkpoint text is a valid note text");
        note.add_sigs(&[&self.signer as &dyn Signer])
            .expect("an Ed25519 signer always signs");
        SignedCheckpoint {
            origin: origin.to_owned(),
            size,
            root: BASE64_STANDARD.encode(root.0),
            checkpoint: String::from_utf8(note.to_bytes()).expect("a note is text"),
        }
    }
}

/// `m:checkpoint_key`: both halves, in the signed-note text forms.
#[derive(Serialize, Deserialize)]
struct StoredKey {
    signer: String,
    verifier: String,
}

fn damaged(detail: &str) -> StoreError {
    StoreError::Corrupt {
        what: "m:checkpoint_key".into(),
        detail: detail.into(),
    }
}

/// Why a checkpoint text was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Not a signed note, or its text not a checkpoint.
    #[error("not a signed checkpoint: {0}")]
    Malformed(String),
    /// No valid signature of the given key.
    #[error("its signature does not verify with the key {0}")]
    Unsigned(String),
    /// The verifier key text is not one.
    #[error("not a verifier key: {0}")]
    BadKey(String),
}

/// A checkpoint read from its signed-note text and verified with `verifier_key`.
#[derive(Debug, Clone, PartialEq)]
pub struct Verified {
    /// The log it is of.
    pub origin: String,
    /// Leaves it covers.
    pub size: u64,
    /// The root it signs.
    pub root: Hash,
}

/// Parse a signed checkpoint and check its signature with `verifier_key` (signed-note text).
pub fn verify_note(note: &str, verifier_key: &str) -> Result<Verified, CheckpointError> {
    let verifier =
        StandardVerifier::new(verifier_key).map_err(|e| CheckpointError::BadKey(e.to_string()))?;
    let note =
        Note::from_bytes(note.as_bytes()).map_err(|e| CheckpointError::Malformed(e.to_string()))?;
    let list = VerifierList::new(vec![Box::new(verifier)]);
    note.verify(&list)
        .map_err(|_| CheckpointError::Unsigned(verifier_key.to_owned()))?;
    let checkpoint = Checkpoint::from_bytes(note.text())
        .map_err(|e| CheckpointError::Malformed(e.to_string()))?;
    Ok(Verified {
        origin: checkpoint.origin().to_owned(),
        size: checkpoint.size(),
        root: *checkpoint.hash(),
    })
}
