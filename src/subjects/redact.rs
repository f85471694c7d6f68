//! Redaction: the one place that says which fields of each subject kind are secret, and the
//! only way to build the view of a subject that leaves the node.
//!
//! Every read of the admin API and every lifecycle outbox entity is a [`Redacted`] or the bytes
//! of one ([`state_and_view`]), and only this module makes them. A secret field that is set reads as
//! `"[redacted]"` (so the view keeps the subject's shape and shows *that* a secret is set);
//! one that is not set reads as `null`.

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

use super::{Kind, Subject};
use crate::audit::State;

/// What a secret field that is set reads as.
pub const REDACTED: &str = "[redacted]";

/// The secret fields of a subject kind.
pub const fn secret_fields(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Source => &["secret"],
        Kind::Override | Kind::Quarantine | Kind::Replay => &[],
    }
}

/// A subject with its secret fields redacted: what the API returns and what a lifecycle
/// event carries.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Redacted(Value);

impl Redacted {
    /// The view as JSON.
    pub fn as_value(&self) -> &Value {
        &self.0
    }

    /// The view encoded as JSON: the body of the API's answer and its event's entity, the
    /// same bytes.
    pub fn to_json(&self) -> Bytes {
        crate::audit::encode_json(&self.0)
    }

    /// The view as JSON, owned.
    pub fn into_value(self) -> Value {
        self.0
    }

    /// The view with its `revision` set (the entity of a delete, at the delete's revision).
    pub(crate) fn with_revision(mut self, revision: u64) -> Redacted {
        if let Value::Object(map) = &mut self.0 {
            map.insert("revision".to_owned(), revision.into());
        }
        self
    }
}

/// The secret fields of a route: none today (a destination with credentials in it is
/// refused), but a route's views are made here all the same, so that one added later is
/// redacted everywhere at once.
pub const ROUTE_SECRET_FIELDS: &[&str] = &[];

/// The redacted view of `subject`.
pub fn redact<S: Subject>(subject: &S) -> Result<Redacted, serde_json::Error> {
    redact_fields(subject, secret_fields(S::KIND))
}

/// The redacted view of a subject whose secret fields are `fields` (one of this module's
/// lists).
pub fn redact_fields<T: Serialize>(
    subject: &T,
    fields: &[&str],
) -> Result<Redacted, serde_json::Error> {
    let mut value = serde_json::to_value(subject)?;
    redact_value(&mut value, fields);
    Ok(Redacted(value))
}

/// What a change needs of the subject it writes, from one encoding: its state, for the row's
/// hash, and the JSON of its redacted view (`fields` its secret fields), for the answer and
/// the event. The view's bytes are those of `redact_fields(subject, fields)?.to_json()` (a JSON
/// map's keys are sorted, as in the canonical encoding); with no secret set, they are the
/// encoded state itself.
pub fn state_and_view<T: Serialize>(
    subject: &T,
    fields: &[&str],
) -> Result<(State, Bytes), serde_json::Error> {
    let mut value = serde_json::to_value(subject)?;
    let state = State::of(&value);
    if !fields.iter().any(|field| secret_set(&value, field)) {
        let view = state.encoded().clone();
        return Ok((state, view));
    }
    redact_value(&mut value, fields);
    Ok((state, crate::audit::encode_json(&value)))
}

/// Redact the secret `fields` that are set in `value`.
fn redact_value(value: &mut Value, fields: &[&str]) {
    for field in fields {
        if secret_set(value, field) {
            value[*field] = Value::String(REDACTED.to_owned());
        }
    }
}

/// Whether secret `field` is set in `value` (present and not null).
fn secret_set(value: &Value, field: &str) -> bool {
    value.get(field).is_some_and(|v| !v.is_null())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subjects::secret::{Secret, Verifier};
    use crate::subjects::sources::Source;
    use serde_json::json;

    fn source(secret: Option<Verifier>) -> Source {
        Source {
            id: "s1".into(),
            tenant: "t1".into(),
            kind: "webhook".into(),
            secret,
            config: serde_json::Map::from_iter([("url".to_owned(), json!("https://h/x"))]),
            revision: 2,
        }
    }

    #[test]
    fn a_source_reads_with_its_secret_redacted_and_its_shape_kept() {
        let verifier = Verifier::new(&Secret::new("hunter2"));
        let mut source = source(Some(verifier.clone()));
        let view = redact(&source).unwrap().into_value();
        assert_eq!(view["secret"], json!(REDACTED));
        let text = view.to_string();
        assert!(!text.contains(&verifier.salt) && !text.contains(&verifier.sha256));
        source.secret = None;
        assert_eq!(redact(&source).unwrap().into_value()["secret"], Value::Null);
    }

    #[test]
    fn a_change_s_view_is_the_redacted_view_s_bytes_and_its_state_the_whole_subject() {
        let verifier = Verifier::new(&Secret::new("hunter2"));
        let salt = verifier.salt.clone();
        for secret in [Some(verifier), None] {
            let source = source(secret);
            let (state, view) = state_and_view(&source, secret_fields(Kind::Source)).unwrap();
            assert_eq!(view, redact(&source).unwrap().to_json());
            assert!(!String::from_utf8_lossy(&view).contains(&salt));
            assert_eq!(state, State::of_subject(&source).unwrap());
        }
        let route = crate::subjects::routes::Route {
            id: "r1".into(),
            tenant: "t1".into(),
            source: "s1".into(),
            destination: "https://h/x".into(),
            filter: serde_json::Map::from_iter([
                ("b".to_owned(), json!(1)),
                ("a".to_owned(), json!("é")),
            ]),
            enabled: true,
            revision: 1,
        };
        let (state, view) = state_and_view(&route, ROUTE_SECRET_FIELDS).unwrap();
        assert_eq!(
            view,
            redact_fields(&route, ROUTE_SECRET_FIELDS)
                .unwrap()
                .to_json()
        );
        assert_eq!(
            view,
            r#"{"destination":"https://h/x","enabled":true,"filter":{"a":"é","b":1},"id":"r1","revision":1,"source":"s1","tenant":"t1"}"#.as_bytes()
        );
        assert_eq!(state.encoded(), &view);
    }
}
