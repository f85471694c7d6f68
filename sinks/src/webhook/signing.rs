//! Standard Webhooks signatures (<https://www.standardwebhooks.com/>).
//!
//! Receivers verify `webhook-signature` = `v1,<base64 HMAC-SHA256(key, "{id}.{ts}.{body}")>`
//! over the exact bytes they received, and dedupe on `webhook-id`. Several secrets may be
//! configured at once so that a key can be rotated without a window of failed verifications:
//! every request carries one signature per secret, and the receiver accepts any that matches.
//! `Signer` has no accessor and a redacted `Debug`; `parse_secret` and `message_mac` are the
//! same computation for a receiver that verifies (`ankusa follow webhook`).
//!
//! The signature covers the body only, and a binary-mode request carries the event's
//! attributes in `ce-*` headers outside it. So a binary request's `webhook-id` is a digest of
//! those headers ([`binary_message_id`]): the MAC covers the id, the id covers the headers,
//! and changing any of them breaks the signature. Structured and batch requests carry whole
//! events in the body; their ids are the event's id and [`batch_id`](super::sink::batch_id).

use base64::engine::general_purpose::{STANDARD as BASE64, URL_SAFE_NO_PAD};
use base64::Engine;
use hmac::{Hmac, Mac};
use reqwest::header::{HeaderMap, CONTENT_TYPE};
use sha2::{Digest, Sha256};

use crate::SinkError;

/// The prefix of a Standard Webhooks secret; the rest is the base64 of the key.
const SECRET_PREFIX: &str = "whsec_";

/// Signs request bodies with every configured key. Each key's HMAC state is made once (the
/// key schedule is two SHA-256 blocks) and copied for every signature.
#[derive(Clone)]
pub(crate) struct Signer {
    keys: Vec<Hmac<Sha256>>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signer {{ keys: <{} redacted> }}", self.keys.len())
    }
}

impl Signer {
    /// Parses `whsec_<base64>` secrets; errors name the field (`secrets[i]`), never the value.
    pub(crate) fn new(secrets: &[String]) -> Result<Self, SinkError> {
        if secrets.is_empty() {
            return Err(SinkError::Config(
                "secrets must hold at least one whsec_ secret".into(),
            ));
        }
        let keys = secrets
            .iter()
            .enumerate()
            .map(|(i, secret)| {
                parse_secret(secret).ok_or_else(|| {
                    SinkError::Config(format!(
                        "secrets[{i}] must be whsec_ followed by a non-empty base64 key"
                    ))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Signer { keys })
    }

    /// The `webhook-signature` header value for message `id` sent at `timestamp` (unix
    /// seconds) with `body`: one `v1,<base64>` per key, space-separated.
    pub(crate) fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut header = String::with_capacity(self.keys.len() * 48);
        let timestamp = timestamp.to_string();
        for key in &self.keys {
            let mac = message_mac(key, id, &timestamp, body);
            if !header.is_empty() {
                header.push(' ');
            }
            header.push_str("v1,");
            header.push_str(&BASE64.encode(mac.finalize().into_bytes()));
        }
        header
    }
}

/// The MAC of message `id` sent at `timestamp` (unix seconds, as the header carries it) with
/// `body`, under `key`: HMAC-SHA256 of `{id}.{timestamp}.{body}`. The sink signs with it and
/// a receiver (`ankusa follow webhook`) verifies with it.
pub fn message_mac(key: &Hmac<Sha256>, id: &str, timestamp: &str, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = key.clone();
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The `webhook-id` of a binary-mode request with `headers`: `msg_` + base64url (no padding)
/// of SHA-256 over its CloudEvents headers in canonical form. Those are every `ce-*` header
/// and `content-type`, each as `name:value\n` (name in lowercase, value as sent), sorted by
/// name. `None` when one of them appears twice: a receiver could then read either value.
pub fn binary_message_id(headers: &HeaderMap) -> Option<String> {
    let mut fields: Vec<(&str, &[u8])> = Vec::with_capacity(16);
    for name in headers.keys() {
        let name = name.as_str();
        if name != CONTENT_TYPE.as_str() && !name.starts_with("ce-") {
            continue;
        }
        let mut values = headers.get_all(name).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return None;
        };
        fields.push((name, value.as_bytes()));
    }
    fields.sort_unstable();
    let mut digest = Sha256::new();
    for (name, value) in fields {
        digest.update(name.as_bytes());
        digest.update(b":");
        digest.update(value);
        digest.update(b"\n");
    }
    Some(format!("msg_{}", URL_SAFE_NO_PAD.encode(digest.finalize())))
}

/// The keyed HMAC of a `whsec_<base64>` secret, if it is one.
pub fn parse_secret(secret: &str) -> Option<Hmac<Sha256>> {
    let key = BASE64.decode(secret.strip_prefix(SECRET_PREFIX)?).ok()?;
    if key.is_empty() {
        return None;
    }
    // HMAC accepts keys of any length.
    Hmac::<Sha256>::new_from_slice(&key).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_standard_webhooks_reference_vector() {
        // The example of the Standard Webhooks reference libraries.
        let signer = Signer::new(&["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()]).unwrap();
        let sig = signer.sign(
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn one_signature_per_secret_in_order() {
        let a = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_string();
        let b = format!("whsec_{}", BASE64.encode(b"another key"));
        let both = Signer::new(&[a.clone(), b.clone()])
            .unwrap()
            .sign("id", 1, b"x");
        let first = Signer::new(&[a]).unwrap().sign("id", 1, b"x");
        let second = Signer::new(&[b]).unwrap().sign("id", 1, b"x");
        assert_eq!(both, format!("{first} {second}"));
        assert_ne!(first, second);
    }

    #[test]
    fn malformed_secrets_are_refused_without_echoing_them() {
        for bad in [
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_",
            "whsec_not*base64!",
        ] {
            let err = Signer::new(&["whsec_YWJj".into(), bad.into()])
                .unwrap_err()
                .to_string();
            assert!(err.contains("secrets[1]"), "{err}");
            assert!(!err.contains(bad.trim_start_matches("whsec_")) || bad == "whsec_");
        }
        assert!(Signer::new(&[])
            .unwrap_err()
            .to_string()
            .contains("secrets"));
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn a_binary_id_is_the_digest_of_the_ce_headers_in_canonical_form() {
        let sent = headers(&[
            ("ce-type", "io.ankusa.route.created"),
            ("content-type", "application/json"),
            ("ce-id", "e1"),
            ("traceparent", "00-aa-bb-01"),
            ("webhook-timestamp", "1"),
        ]);
        // The canonical form, computed by hand: only ce-* and content-type, sorted.
        let canonical =
            "ce-id:e1\nce-type:io.ankusa.route.created\ncontent-type:application/json\n";
        let expected = format!(
            "msg_{}",
            URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()))
        );
        assert_eq!(binary_message_id(&sent), Some(expected.clone()));
        // Headers outside the form change nothing; any header inside it changes the id.
        let mut other = sent.clone();
        other.insert("traceparent", "00-cc-dd-01".parse().unwrap());
        assert_eq!(binary_message_id(&other), Some(expected.clone()));
        for (name, value) in [
            ("ce-type", "io.ankusa.route.deleted"),
            ("content-type", "text/plain"),
            ("ce-id", "e2"),
        ] {
            let mut changed = sent.clone();
            changed.insert(name, value.parse().unwrap());
            assert_ne!(
                binary_message_id(&changed),
                Some(expected.clone()),
                "{name}"
            );
        }
        let mut added = sent.clone();
        added.insert("ce-subjectversion", "1".parse().unwrap());
        assert_ne!(binary_message_id(&added), Some(expected));
        // A repeated attribute header binds nothing.
        let mut twice = sent.clone();
        twice.append("ce-type", "io.ankusa.route.deleted".parse().unwrap());
        assert_eq!(binary_message_id(&twice), None);
    }

    #[test]
    fn debug_does_not_show_keys() {
        let signer = Signer::new(&["whsec_c2VjcmV0LWtleQ==".into()]).unwrap();
        let shown = format!("{signer:?}");
        assert!(
            !shown.contains("secret") && !shown.contains("115"),
            "{shown}"
        );
    }
}
