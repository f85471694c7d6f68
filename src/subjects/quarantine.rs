//! Quarantine entries: a tenant's `resource` (e.g. `sources/s1`) held back until `until`,
//! with a `reason`, in the `quarantine` column family.
//!
//! Entries are added and removed, never edited: a new decision is a new entry. The row's
//! `detail` carries `until` (a filter an auditor searches by), never the free-text reason.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Map;

use super::key::check_name;
use super::{
    apply, check_text, commit_change, load, remove, ChangeResult, Effect, IfMatch, Kind, Subject,
    SubjectError,
};
use crate::audit::{Context, Trail};

/// The longest `reason`, in characters.
pub const MAX_REASON_LEN: usize = 512;
/// How far ahead `until` may be.
pub const MAX_DAYS: i64 = 3660;

/// A quarantine entry as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quarantine {
    /// Its id within the tenant.
    pub id: String,
    /// Its tenant.
    pub tenant: String,
    /// What is quarantined: `<collection>/<id>`.
    pub resource: String,
    /// Why.
    pub reason: String,
    /// Until when (RFC 3339).
    pub until: DateTime<Utc>,
    /// Its change counter.
    pub revision: u64,
}

impl Subject for Quarantine {
    const KIND: Kind = Kind::Quarantine;

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

/// The body of an add.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewQuarantine {
    /// The entry's id.
    pub id: String,
    /// What to quarantine: `<collection>/<id>`, e.g. `sources/s1`.
    pub resource: String,
    /// Why.
    pub reason: String,
    /// Until when: in the future, at most [`MAX_DAYS`] ahead.
    pub until: DateTime<Utc>,
}

/// Add entry `input.id` to `tenant`'s quarantine (`quarantine.add`).
pub async fn add(
    trail: &Trail,
    ctx: Context,
    tenant: String,
    input: NewQuarantine,
) -> ChangeResult {
    commit_change(trail, ctx, move |tx| {
        check_name("tenant", &tenant)?;
        check_name("id", &input.id)?;
        check_resource(&input.resource)?;
        check_text("reason", &input.reason, MAX_REASON_LEN)?;
        check_until(input.until, Utc::now())?;
        if load::<Quarantine>(tx, &tenant, &input.id)?.is_some() {
            return Err(SubjectError::Exists {
                resource: Kind::Quarantine.resource(&input.id),
            }
            .into());
        }
        let mut detail = Map::new();
        detail.insert("until".into(), input.until.to_rfc3339().into());
        let entry = Quarantine {
            id: input.id.clone(),
            tenant: tenant.clone(),
            resource: input.resource,
            reason: input.reason,
            until: input.until,
            revision: 1,
        };
        let effect = Effect {
            verb: "add",
            before: None,
            after: Some(entry),
            detail,
        };
        apply(tx, &tenant, &input.id, effect)
    })
    .await
}

/// Remove entry `id` from `tenant`'s quarantine (`quarantine.remove`).
pub async fn remove_entry(
    trail: &Trail,
    ctx: Context,
    tenant: String,
    id: String,
    if_match: Option<IfMatch>,
) -> ChangeResult {
    commit_change(trail, ctx, move |tx| {
        remove::<Quarantine>(tx, &tenant, &id, if_match, "remove")
    })
    .await
}

/// `<collection>/<id>`: a lowercase collection name and a valid id.
fn check_resource(resource: &str) -> Result<(), SubjectError> {
    let bad = || {
        SubjectError::invalid(
            "resource",
            "must be <collection>/<id>, e.g. sources/s1 (collection: 1 to 32 of a-z -)",
        )
    };
    let (collection, id) = resource.split_once('/').ok_or_else(bad)?;
    let collection_ok = (1..=32).contains(&collection.len())
        && collection
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b == b'-');
    if !collection_ok {
        return Err(bad());
    }
    check_name("resource", id)
}

fn check_until(until: DateTime<Utc>, now: DateTime<Utc>) -> Result<(), SubjectError> {
    if until <= now {
        return Err(SubjectError::invalid("until", "must be in the future"));
    }
    if until > now + Duration::days(MAX_DAYS) {
        return Err(SubjectError::invalid(
            "until",
            format!("must be at most {MAX_DAYS} days ahead"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_and_until_are_checked() {
        check_resource("sources/s1").unwrap();
        for bad in [
            "sources",
            "sources/",
            "/s1",
            "Sources/s1",
            "sources/../x",
            "a/b/c",
        ] {
            assert!(check_resource(bad).is_err(), "{bad}");
        }
        let now = Utc::now();
        assert!(check_until(now, now).is_err());
        assert!(check_until(now + Duration::days(MAX_DAYS + 1), now).is_err());
        check_until(now + Duration::hours(1), now).unwrap();
    }
}
