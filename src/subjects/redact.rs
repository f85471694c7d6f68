//! Redaction: the one place that says which fields of each subject kind are secret, and the
//! only way to build the view of a subject that leaves the node.
//!
//! Every read of the admin API and every lifecycle outbox entity is a [`Redacted`], and a
//! `Redacted` can only be made by [`redact`]. A secret field that is set reads as
//! `"[redacted]"` (so the view keeps the subject's shape and shows *that* a secret is set);
//! one that is not set reads as `null`.

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

use super::{Kind, Subject};

/// What a secret field that is set reads as.
pub const REDACTED: &str = "[redacted]";

/// The secret fields of a subject kind.
pub fn secret_fields(kind: Kind) -> &'static [&'static str] {
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

/// The redacted view of a route (routes live in the route store, not in a column family).
pub fn redact_route(route: &super::routes::Route) -> Result<Redacted, serde_json::Error> {
    redact_fields(route, ROUTE_SECRET_FIELDS)
}

fn redact_fields<T: Serialize>(
    subject: &T,
    fields: &[&str],
) -> Result<Redacted, serde_json::Error> {
    let mut value = serde_json::to_value(subject)?;
    if let Value::Object(map) = &mut value {
        for field in fields {
            if let Some(v) = map.get_mut(*field) {
                if !v.is_null() {
                    *v = Value::String(REDACTED.to_owned());
                }
            }
        }
    }
    Ok(Redacted(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subjects::secret::{Secret, Verifier};
    use crate::subjects::sources::Source;
    use serde_json::json;

    #[test]
    fn a_source_reads_with_its_secret_redacted_and_its_shape_kept() {
        let verifier = Verifier::new(&Secret::new("hunter2"));
        let mut source = Source {
            id: "s1".into(),
            tenant: "t1".into(),
            kind: "webhook".into(),
            secret: Some(verifier.clone()),
            config: serde_json::Map::new(),
            revision: 1,
        };
        let view = redact(&source).unwrap().into_value();
        assert_eq!(view["secret"], json!(REDACTED));
        let text = view.to_string();
        assert!(!text.contains(&verifier.salt) && !text.contains(&verifier.sha256));
        source.secret = None;
        assert_eq!(redact(&source).unwrap().into_value()["secret"], Value::Null);
    }
}
