//! API-managed sources: `id`, `tenant`, `kind`, a write-only `secret` and a `config`
//! object, in the `sources` column family.
//!
//! The secret is kept only as a salted [`Verifier`] (see [`super::secret`]) and reads as
//! `"[redacted]"`. Sources are the one local kind with lifecycle events: each change's row
//! carries the redacted source as its outbox entity. An update is a patch: the fields it
//! names replace the stored ones (`config` as a whole), the others stay, so a secret never
//! has to be sent again to change something else. A secret that is sent is always set anew,
//! with its row, so that no answer tells whether it was the one already set.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::key::check_name;
use super::redact::secret_fields;
use super::remote::RemoteSubject;
use super::secret::{Secret, Verifier, MAX_SECRET_LEN};
use super::{
    apply, char_len, check_if_match, commit_change, is_object_key, load, remove, require,
    unchanged, ChangeResult, Effect, IfMatch, Kind, Subject, SubjectError,
};
use crate::audit::{Context, Trail};

/// The most top-level keys a source's `config` may have.
pub const MAX_CONFIG_KEYS: usize = 256;

/// A source as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// Its id within the tenant.
    pub id: String,
    /// Its tenant.
    pub tenant: String,
    /// What kind of source it is (`webhook`, `kafka`, ...).
    pub kind: String,
    /// The verifier of its secret, if one is set. Secret: see [`super::redact`].
    pub secret: Option<Verifier>,
    /// Its settings.
    pub config: Map<String, Value>,
    /// Its change counter.
    pub revision: u64,
}

impl RemoteSubject for Source {
    const KIND: &'static str = "source";
    const PLURAL: &'static str = "sources";
    const SECRET_FIELDS: &'static [&'static str] = secret_fields(Kind::Source);

    fn tenant(&self) -> &str {
        &self.tenant
    }

    fn id(&self) -> &str {
        &self.id
    }

    fn revision(&self) -> u64 {
        self.revision
    }

    fn set_revision(&mut self, revision: u64) {
        self.revision = revision;
    }
}

impl Subject for Source {
    const KIND: Kind = Kind::Source;
    const LIFECYCLE: bool = true;

    fn tenant(&self) -> &str {
        &self.tenant
    }

    fn id(&self) -> &str {
        &self.id
    }

    fn revision(&self) -> u64 {
        self.revision
    }
}

/// The body of a create.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewSource {
    /// The new source's id.
    pub id: String,
    /// Its kind.
    pub kind: String,
    /// Its secret (write-only).
    #[serde(default, deserialize_with = "super::present")]
    pub secret: Option<Secret>,
    /// Its settings (default: empty).
    #[serde(default)]
    pub config: Map<String, Value>,
}

/// The body of an update: the fields to replace.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourcePatch {
    /// A new kind.
    #[serde(default, deserialize_with = "super::present")]
    pub kind: Option<String>,
    /// A new secret.
    #[serde(default, deserialize_with = "super::present")]
    pub secret: Option<Secret>,
    /// A new config (replaces the whole object).
    #[serde(default, deserialize_with = "super::present")]
    pub config: Option<Map<String, Value>>,
}

/// Create source `input.id` of `tenant`; `Exists` if it is there.
pub async fn create(trail: &Trail, ctx: Context, tenant: String, input: NewSource) -> ChangeResult {
    commit_change(trail, ctx, move |tx| {
        check_new(&tenant, &input)?;
        if load::<Source>(tx, &tenant, &input.id)?.is_some() {
            return Err(SubjectError::Exists {
                resource: Kind::Source.resource(&input.id),
            }
            .into());
        }
        let id = input.id.clone();
        let (source, detail) = created(tenant.clone(), input);
        let effect = Effect {
            verb: "create",
            before: None,
            after: Some(source),
            detail,
        };
        apply(tx, &tenant, &id, effect)
    })
    .await
}

/// Check a create's tenant and input.
pub(crate) fn check_new(tenant: &str, input: &NewSource) -> Result<(), SubjectError> {
    check_name("tenant", tenant)?;
    check_name("id", &input.id)?;
    check_kind(&input.kind)?;
    check_config(&input.config)?;
    if let Some(secret) = &input.secret {
        check_secret(secret)?;
    }
    Ok(())
}

/// The source a create makes (revision 1; the secret only as its verifier) and its row's
/// detail.
pub(crate) fn created(tenant: String, input: NewSource) -> (Source, Map<String, Value>) {
    let mut detail = Map::new();
    detail.insert("config_keys".into(), input.config.len().into());
    let source = Source {
        id: input.id,
        tenant,
        kind: input.kind,
        secret: input.secret.as_ref().map(Verifier::new),
        config: input.config,
        revision: 1,
    };
    (source, detail)
}

/// Apply `patch` to source `id` of `tenant`. A patch that changes nothing writes no row; one
/// that names a secret always changes it.
pub async fn update(
    trail: &Trail,
    ctx: Context,
    tenant: String,
    id: String,
    patch: SourcePatch,
    if_match: Option<IfMatch>,
) -> ChangeResult {
    commit_change(trail, ctx, move |tx| {
        check_name("tenant", &tenant)?;
        check_name("id", &id)?;
        check_patch(&patch)?;
        let before: Source = require(tx, &tenant, &id)?;
        check_if_match(
            if_match,
            || Kind::Source.resource(&id),
            Some(before.revision),
        )?;
        let Some((after, detail)) = patched(&before, patch) else {
            return Err(unchanged(&before));
        };
        let effect = Effect {
            verb: "update",
            before: Some(before),
            after: Some(after),
            detail,
        };
        apply(tx, &tenant, &id, effect)
    })
    .await
}

/// Delete source `id` of `tenant`.
pub async fn delete(
    trail: &Trail,
    ctx: Context,
    tenant: String,
    id: String,
    if_match: Option<IfMatch>,
) -> ChangeResult {
    commit_change(trail, ctx, move |tx| {
        remove::<Source>(tx, &tenant, &id, if_match, "delete")
    })
    .await
}

/// `patch` applied to `before`: the source after (at the next revision) and its row's detail,
/// or `None` when it changes nothing. A secret it names is a change even when it is the one
/// set already (see the comment inside).
pub(crate) fn patched(before: &Source, patch: SourcePatch) -> Option<(Source, Map<String, Value>)> {
    let mut after = before.clone();
    let mut fields = 0u32;
    if let Some(kind) = patch.kind.filter(|k| *k != before.kind) {
        after.kind = kind;
        fields += 1;
    }
    // A secret sent is always a change, never compared with the one kept: "unchanged" would
    // answer 200 where a change can be refused (a full backlog, a closed gate), and so tell
    // an `admin:write` caller whether a guess was right. The fresh salt makes a new verifier.
    if let Some(secret) = patch.secret {
        after.secret = Some(Verifier::new(&secret));
        fields += 1;
    }
    if let Some(config) = patch.config.filter(|c| *c != before.config) {
        after.config = config;
        fields += 1;
    }
    if fields == 0 {
        return None;
    }
    after.revision = before.revision + 1;
    let mut detail = Map::new();
    detail.insert("fields".into(), fields.into());
    Some((after, detail))
}

/// Check a patch's fields; it must name one.
pub(crate) fn check_patch(patch: &SourcePatch) -> Result<(), SubjectError> {
    if patch.kind.is_none() && patch.secret.is_none() && patch.config.is_none() {
        return Err(SubjectError::invalid(
            "body",
            "names no field to change (kind, secret, config)",
        ));
    }
    if let Some(kind) = &patch.kind {
        check_kind(kind)?;
    }
    if let Some(secret) = &patch.secret {
        check_secret(secret)?;
    }
    if let Some(config) = &patch.config {
        check_config(config)?;
    }
    Ok(())
}

fn check_kind(kind: &str) -> Result<(), SubjectError> {
    let ok = (1..=64).contains(&kind.len())
        && kind
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(SubjectError::invalid(
            "kind",
            "must be 1 to 64 characters of a-z 0-9 . _ -",
        ))
    }
}

fn check_secret(secret: &Secret) -> Result<(), SubjectError> {
    if secret.is_empty() || secret.chars() > MAX_SECRET_LEN {
        return Err(SubjectError::invalid(
            "secret",
            format!("must be 1 to {MAX_SECRET_LEN} characters"),
        ));
    }
    Ok(())
}

fn check_config(config: &Map<String, Value>) -> Result<(), SubjectError> {
    if config.len() > MAX_CONFIG_KEYS {
        return Err(SubjectError::invalid(
            "config",
            format!("has more than {MAX_CONFIG_KEYS} keys"),
        ));
    }
    if let Some(k) = config.keys().find(|k| !is_object_key(k)) {
        return Err(SubjectError::invalid(
            "config",
            format!(
                "key of {} characters: keys must be 1 to 128 characters without control characters",
                char_len(k)
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(secret: &str) -> Source {
        Source {
            id: "s1".into(),
            tenant: "t1".into(),
            kind: "webhook".into(),
            secret: Some(Verifier::new(&Secret::new(secret))),
            config: Map::new(),
            revision: 1,
        }
    }

    fn secret_patch(secret: &str) -> SourcePatch {
        SourcePatch {
            secret: Some(Secret::new(secret)),
            ..SourcePatch::default()
        }
    }

    #[test]
    fn a_patch_naming_a_secret_is_a_change_whether_or_not_it_matches() {
        let before = source("hunter2");
        let same = patched(&before, secret_patch("hunter2")).expect("the same secret");
        let other = patched(&before, secret_patch("hunter3")).expect("another secret");
        for (after, detail) in [&same, &other] {
            assert_eq!(after.revision, 2);
            assert_eq!(detail, &Map::from_iter([("fields".into(), 1.into())]));
            assert_ne!(after.secret, before.secret, "a fresh verifier");
        }
        assert!(same
            .0
            .secret
            .as_ref()
            .unwrap()
            .matches(&Secret::new("hunter2")));
        assert!(other
            .0
            .secret
            .as_ref()
            .unwrap()
            .matches(&Secret::new("hunter3")));
        // Without a secret, the same values are still no change.
        let unchanged = SourcePatch {
            kind: Some("webhook".into()),
            config: Some(Map::new()),
            ..SourcePatch::default()
        };
        assert!(patched(&before, unchanged).is_none());
    }
}
