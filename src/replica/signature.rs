//! Verifying Standard Webhooks signatures (<https://www.standardwebhooks.com/>), the
//! receiving side of `sinks/src/webhook/signing.rs`.
//!
//! `webhook-signature` holds one or more space-separated `v1,<base64 HMAC-SHA256(key,
//! "{id}.{ts}.{body}")>` (one per secret the sender signs with, so keys rotate without a
//! gap); a request is genuine if any of them matches any configured key. The comparison is
//! the `hmac` crate's constant-time `verify_slice`. A timestamp more than five minutes from
//! now is refused, so a captured request cannot be replayed later. Keys never leave this
//! module: [`Verifier`] has no accessor and a redacted `Debug`.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use ankusa_sinks::webhook::signing::{message_mac, parse_secret};

/// How far a request's timestamp may be from now, in seconds.
pub const TOLERANCE_SECS: i64 = 5 * 60;

/// Verifies requests against every configured key.
#[derive(Clone)]
pub struct Verifier {
    keys: Vec<Hmac<Sha256>>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Verifier {{ keys: <{} redacted> }}", self.keys.len())
    }
}

/// Why a request is not genuine (the receiver answers 401; the reason is logged, never a
/// signature or a key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// A `webhook-*` header is missing or not text.
    #[error("missing {0} header")]
    Missing(&'static str),
    /// `webhook-timestamp` is not unix seconds.
    #[error("webhook-timestamp is not unix seconds")]
    BadTimestamp,
    /// The timestamp is more than five minutes from now.
    #[error("webhook-timestamp is more than 5 minutes from now")]
    Stale,
    /// No signature matches.
    #[error("no signature matches")]
    Mismatch,
}

/// The three headers of a signed request.
#[derive(Debug, Clone, Copy)]
pub struct Signed<'a> {
    /// `webhook-id`.
    pub id: Option<&'a str>,
    /// `webhook-timestamp`.
    pub timestamp: Option<&'a str>,
    /// `webhook-signature`.
    pub signature: Option<&'a str>,
}

impl Verifier {
    /// Parses `whsec_<base64>` secrets; errors name the position (`secret 2`), never the value.
    pub fn new(secrets: &[String]) -> Result<Verifier, String> {
        if secrets.is_empty() {
            return Err("at least one whsec_ secret is needed".into());
        }
        let keys = secrets
            .iter()
            .enumerate()
            .map(|(i, secret)| {
                parse_secret(secret).ok_or_else(|| {
                    format!(
                        "secret {} must be whsec_ followed by a non-empty base64 key",
                        i + 1
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Verifier { keys })
    }

    /// Whether `headers`, received at `now` (unix seconds), can sign a genuine request: all
    /// three there and the timestamp fresh. Checked before a body is read.
    pub fn check_headers(headers: Signed<'_>, now: i64) -> Result<(), Refused> {
        headers.id.ok_or(Refused::Missing("webhook-id"))?;
        let timestamp = headers
            .timestamp
            .ok_or(Refused::Missing("webhook-timestamp"))?;
        headers
            .signature
            .ok_or(Refused::Missing("webhook-signature"))?;
        let ts: i64 = timestamp
            .trim()
            .parse()
            .map_err(|_| Refused::BadTimestamp)?;
        if now.abs_diff(ts) > TOLERANCE_SECS as u64 {
            return Err(Refused::Stale);
        }
        Ok(())
    }

    /// Whether `body`, received with `headers` at `now` (unix seconds), is genuine.
    pub fn verify(&self, headers: Signed<'_>, body: &[u8], now: i64) -> Result<(), Refused> {
        Verifier::check_headers(headers, now)?;
        let (Some(id), Some(timestamp), Some(signature)) =
            (headers.id, headers.timestamp, headers.signature)
        else {
            return Err(Refused::Missing("webhook-id"));
        };
        let candidates: Vec<Vec<u8>> = signature
            .split(' ')
            .filter_map(|s| s.strip_prefix("v1,"))
            .filter_map(|s| BASE64.decode(s).ok())
            .collect();
        for key in &self.keys {
            let mac = message_mac(key, id, timestamp, body);
            if candidates
                .iter()
                .any(|c| mac.clone().verify_slice(c).is_ok())
            {
                return Ok(());
            }
        }
        Err(Refused::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks reference libraries.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: &str = "1614265330";
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn signed(signature: &str) -> Signed<'_> {
        Signed {
            id: Some(ID),
            timestamp: Some(TS),
            signature: Some(signature),
        }
    }

    #[test]
    fn the_reference_vector_verifies() {
        let v = Verifier::new(&[SECRET.into()]).unwrap();
        assert_eq!(v.verify(signed(SIG), BODY, 1614265330), Ok(()));
        let other = format!("v1,{} {SIG}", BASE64.encode([0u8; 32]));
        assert_eq!(
            v.verify(signed(&other), BODY, 1614265330),
            Ok(()),
            "any of several"
        );
        let rotated = Verifier::new(&["whsec_YWJj".into(), SECRET.into()]).unwrap();
        assert_eq!(
            rotated.verify(signed(SIG), BODY, 1614265330),
            Ok(()),
            "any key"
        );
    }

    #[test]
    fn anything_else_is_refused() {
        let v = Verifier::new(&[SECRET.into()]).unwrap();
        let now = 1614265330;
        assert_eq!(v.verify(signed(SIG), b"{}", now), Err(Refused::Mismatch));
        assert_eq!(
            v.verify(signed("v2,abc not-base64"), BODY, now),
            Err(Refused::Mismatch)
        );
        assert_eq!(v.verify(signed(SIG), BODY, now + 301), Err(Refused::Stale));
        assert_eq!(v.verify(signed(SIG), BODY, now - 301), Err(Refused::Stale));
        assert_eq!(v.verify(signed(SIG), BODY, now + 300), Ok(()));
        let no_id = Signed {
            id: None,
            ..signed(SIG)
        };
        assert_eq!(
            v.verify(no_id, BODY, now),
            Err(Refused::Missing("webhook-id"))
        );
        let bad_ts = Signed {
            timestamp: Some("soon"),
            ..signed(SIG)
        };
        assert_eq!(v.verify(bad_ts, BODY, now), Err(Refused::BadTimestamp));
        let wrong = Verifier::new(&["whsec_YWJj".into()]).unwrap();
        assert_eq!(wrong.verify(signed(SIG), BODY, now), Err(Refused::Mismatch));
    }

    #[test]
    fn bad_secrets_are_refused_without_echoing_them() {
        for bad in ["MfKQ9r8G", "whsec_", "whsec_not*base64!"] {
            let e = Verifier::new(&[SECRET.into(), bad.into()]).unwrap_err();
            assert_eq!(
                e,
                "secret 2 must be whsec_ followed by a non-empty base64 key"
            );
        }
        let v = Verifier::new(&[SECRET.into()]).unwrap();
        assert_eq!(format!("{v:?}"), "Verifier { keys: <1 redacted> }");
    }
}
