//! Write-only secrets: what a caller sends ([`Secret`]) and what the node keeps
//! ([`Verifier`]).
//!
//! A source's secret must appear nowhere the node writes: not in a row, not in a response, not
//! in a log line and not in the RocksDB files (whose WAL is plain bytes). So the store keeps a
//! verifier: a random salt and SHA-256(salt ‖ secret). It can tell whether a presented
//! secret is the one that was set (to authenticate the source), it changes whenever a secret
//! is set (so the row's hashes show that it was), and it gives the secret back to no one. An
//! update never asks it whether a sent secret is the one already set: the answer would show
//! in the response (see `sources::patched`). A feature that needs the
//! plaintext later (signing outbound requests) needs a key kept outside the data dir.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The longest secret accepted, in characters.
pub const MAX_SECRET_LEN: usize = 4096;

/// A secret as a caller sent it. Its `Debug` never shows it, and it cannot be serialized:
/// it only ever becomes a [`Verifier`].
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

impl Secret {
    /// A secret from its text (tests and tools; requests deserialize it).
    pub fn new(secret: impl Into<String>) -> Secret {
        Secret(secret.into())
    }

    /// The secret's length in bytes (for validation messages, never the bytes).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The secret's length in characters, as the API's limit counts it.
    pub fn chars(&self) -> usize {
        self.0.chars().count()
    }

    /// Whether the secret is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What the store keeps of a secret: a salt and the salted SHA-256, both hex.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verifier {
    /// 16 random bytes, hex: the same secret set twice gives different verifiers.
    pub salt: String,
    /// SHA-256(salt ‖ secret), hex.
    pub sha256: String,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Verifier([redacted])")
    }
}

impl Verifier {
    /// A verifier of `secret` with a fresh random salt.
    pub fn new(secret: &Secret) -> Verifier {
        let salt: [u8; 16] = rand::random();
        Verifier {
            salt: hex::encode(salt),
            sha256: hex::encode(digest(&salt, secret)),
        }
    }

    /// Whether `secret` is the one this verifier was made from (constant time).
    pub fn matches(&self, secret: &Secret) -> bool {
        let (Ok(salt), Ok(expected)) = (hex::decode(&self.salt), hex::decode(&self.sha256)) else {
            return false;
        };
        digest(&salt, secret).as_slice().ct_eq(&expected).into()
    }
}

fn digest(salt: &[u8], secret: &Secret) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(salt);
    h.update(secret.0.as_bytes());
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifier_matches_only_its_secret_and_never_shows_it() {
        let s = Secret::new("hunter2");
        let v = Verifier::new(&s);
        assert!(v.matches(&s));
        assert!(!v.matches(&Secret::new("hunter3")));
        assert_ne!(
            Verifier::new(&s),
            v,
            "salted: the same secret twice differs"
        );
        let shown = format!("{s:?} {v:?} {}", serde_json::to_string(&v).unwrap());
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
