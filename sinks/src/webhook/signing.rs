//! Standard Webhooks signatures (<https://www.standardwebhooks.com/>).
//!
//! Receivers verify `webhook-signature` = `v1,<base64 HMAC-SHA256(key, "{id}.{ts}.{body}")>`
//! over the exact bytes they received, and dedupe on `webhook-id`. Several secrets may be
//! configured at once so that a key can be rotated without a window of failed verifications:
//! every request carries one signature per secret, and the receiver accepts any that matches.
//! `Signer` has no accessor and a redacted `Debug`; `parse_secret` and `message_mac` are the
//! same computation for a receiver that verifies (`ankusa follow webhook`).

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

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
