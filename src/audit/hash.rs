//! Before/after hashes: HMAC-SHA256 keyed with the store's `m:audit_key` over a canonical
//! encoding of the subject.
//!
//! Keyed, so that someone with `audit:read` can see *that* a secret changed but cannot test a
//! guess against the hash. Canonical (sorted keys, no whitespace, encoded here rather than
//! trusting the JSON map's iteration order), so that the same subject always hashes the same
//! whatever order its fields were built in. The key never leaves this type.

use bytes::Bytes;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

/// Length of `m:audit_key`.
pub const KEY_LEN: usize = 32;

/// Hashes subjects with the store's audit key.
#[derive(Clone)]
pub struct SubjectHasher {
    mac: Hmac<Sha256>,
}

impl std::fmt::Debug for SubjectHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SubjectHasher([key withheld])")
    }
}

impl SubjectHasher {
    /// A hasher keyed with `key` (the store's `m:audit_key`).
    pub fn new(key: &[u8; KEY_LEN]) -> SubjectHasher {
        SubjectHasher {
            mac: Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length"),
        }
    }

    /// The hex HMAC of `subject`'s canonical encoding; `None` for an absent subject.
    pub fn hash(&self, subject: Option<&Value>) -> Option<String> {
        self.hash_state(subject.map(State::of).as_ref())
    }

    /// The hex HMAC of a state; `None` for an absent subject.
    pub fn hash_state(&self, state: Option<&State>) -> Option<String> {
        let mut mac = self.mac.clone();
        mac.update(&state?.0);
        Some(hex::encode(mac.finalize().into_bytes()))
    }
}

/// A subject's state as its hash takes it: its canonical encoding. A change's states are
/// encoded where the change is described, so that the writer is handed one buffer to hash
/// rather than a tree of values, made on another thread, to walk and free.
#[derive(Clone, PartialEq, Eq)]
pub struct State(Bytes);

impl State {
    /// The state of `subject`, through its JSON value (whose map sorts the keys).
    pub fn of_subject<T: serde::Serialize>(subject: &T) -> Result<State, serde_json::Error> {
        Ok(State::of(&serde_json::to_value(subject)?))
    }

    /// The state of a subject whose serde output is already its canonical encoding: struct
    /// fields declared in bytewise order of their names, every map in it a `serde_json::Map`.
    /// Written straight from it, with no JSON value in between; such a type's tests hold it to
    /// [`State::of_subject`].
    pub fn of_sorted<T: serde::Serialize>(subject: &T) -> Result<State, serde_json::Error> {
        let mut buf = Vec::with_capacity(256);
        serde_json::to_writer(&mut buf, subject)?;
        Ok(State(buf.into()))
    }

    /// The state of a subject whose JSON is `subject` (a JSON value's maps are sorted).
    pub fn of(subject: &Value) -> State {
        State::of_sorted(subject).expect("a JSON value always serializes")
    }

    /// The canonical encoding (secrets included: only for a view with no secret set).
    pub(crate) fn encoded(&self) -> &Bytes {
        &self.0
    }
}

impl std::fmt::Debug for State {
    // A state holds the subject whole, secrets included.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "State([{} bytes withheld])", self.0.len())
    }
}

/// Append the canonical JSON encoding of `v` to `out`: object keys sorted bytewise, no
/// insignificant whitespace, strings and numbers as serde_json writes them. serde_json's map
/// keeps its keys in that order (its `preserve_order` feature is off; a test here fails if a
/// dependency turns it on), so its own writer is the encoding.
pub fn canonical(v: &Value, out: &mut Vec<u8>) {
    serde_json::to_writer(out, v).expect("writing JSON to a Vec cannot fail");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hasher(byte: u8) -> SubjectHasher {
        SubjectHasher::new(&[byte; KEY_LEN])
    }

    #[test]
    fn canonical_encoding_sorts_keys_at_every_depth() {
        let mut out = vec![];
        canonical(
            &json!({"b": 1, "a": {"z": [true, null], "y": "s"}}),
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"a":{"y":"s","z":[true,null]},"b":1}"#
        );
        // Bytewise: an upper case letter before a lower case one, a multi-byte character last,
        // whatever order the input had.
        let parsed: Value = serde_json::from_str(r#"{"é":3,"a":2,"Z":1,"aa":4}"#).unwrap();
        let mut out = vec![];
        canonical(&parsed, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"Z":1,"a":2,"aa":4,"é":3}"#
        );
    }

    #[test]
    fn hash_is_keyed_and_order_independent() {
        let a = json!({"id": "s1", "secret": "hunter2"});
        let b: Value = serde_json::from_str(r#"{"secret":"hunter2","id":"s1"}"#).unwrap();
        assert_eq!(hasher(1).hash(Some(&a)), hasher(1).hash(Some(&b)));
        assert_ne!(hasher(1).hash(Some(&a)), hasher(2).hash(Some(&a)));
        let changed = json!({"id": "s1", "secret": "hunter3"});
        assert_ne!(hasher(1).hash(Some(&a)), hasher(1).hash(Some(&changed)));
        assert_eq!(hasher(1).hash(None), None);
        let state = State::of(&a);
        assert_eq!(hasher(1).hash_state(Some(&state)), hasher(1).hash(Some(&b)));
        assert!(!format!("{state:?}").contains("hunter2"));
    }

    #[test]
    fn hash_is_hmac_sha256_hex() {
        // Known answer: HMAC-SHA256(key = 32 x 0x01, message = `{"a":1}`).
        let mut mac = Hmac::<Sha256>::new_from_slice(&[1u8; KEY_LEN]).unwrap();
        mac.update(br#"{"a":1}"#);
        let expected = hex::encode(mac.finalize().into_bytes());
        assert_eq!(hasher(1).hash(Some(&json!({"a": 1}))), Some(expected));
        assert_eq!(hasher(1).hash(Some(&json!({"a": 1}))).unwrap().len(), 64);
    }
}
