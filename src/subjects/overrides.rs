//! Rate-limit overrides: a tenant's `rate` (requests per second) and optional `burst` for
//! one `key` (a client, a route, whatever the limiter keys on), in the `overrides` column
//! family.
//!
//! An override is set (created or replaced) and deleted; setting the values it already has
//! is no change and writes no row. The row's `detail` carries the rate, which is not a
//! secret and is what an auditor wants to see.

use serde::{Deserialize, Serialize};
use serde_json::Map;

use super::key::check_name;
use super::SubjectError;
use super::{
    apply, check_if_match, commit_change, load, remove, unchanged, ChangeResult, Effect, IfMatch,
    Kind, Subject,
};
use crate::audit::{Context, Trail};

/// The highest `rate` accepted, in requests per second.
pub const MAX_RATE: u32 = 1_000_000;
/// The highest `burst` accepted.
pub const MAX_BURST: u32 = 10_000_000;

/// An override as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Override {
    /// What the limiter keys on.
    pub key: String,
    /// Its tenant.
    pub tenant: String,
    /// Requests per second.
    pub rate: u32,
    /// Requests allowed in one burst above the rate.
    pub burst: Option<u32>,
    /// Its change counter.
    pub revision: u64,
}

impl Subject for Override {
    const KIND: Kind = Kind::Override;

    fn tenant(&self) -> &str {
        &self.tenant
    }

    fn id(&self) -> &str {
        &self.key
    }

    fn revision(&self) -> u64 {
        self.revision
    }
}

/// The body of a set. `rate` and `burst` are integers, read as JSON Schema reads them: `1.0`
/// is the integer 1 (a generated client may write it so), `1.5` is refused.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetOverride {
    /// Requests per second, 1 to [`MAX_RATE`].
    #[serde(deserialize_with = "integral::u32")]
    pub rate: u32,
    /// Burst, 1 to [`MAX_BURST`].
    #[serde(default, deserialize_with = "integral::optional_u32")]
    pub burst: Option<u32>,
}

/// Integers that may be written with a zero fraction (`1.0`, `1e3`).
mod integral {
    use serde::de::{Deserializer, Error, Unexpected};
    use serde::Deserialize;

    /// A `u32`, from an integer or a float with no fraction.
    pub fn u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        from_number(serde_json::Number::deserialize(d)?)
    }

    /// A field that may be left out but, present, holds a `u32` (`null` is refused, as
    /// the document refuses it).
    pub fn optional_u32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
        u32(d).map(Some)
    }

    fn from_number<E: Error>(n: serde_json::Number) -> Result<u32, E> {
        let expected = &"u32";
        if let Some(i) = n.as_u64() {
            return u32::try_from(i)
                .map_err(|_| E::invalid_value(Unexpected::Unsigned(i), expected));
        }
        if let Some(i) = n.as_i64() {
            return Err(E::invalid_value(Unexpected::Signed(i), expected));
        }
        let f = n.as_f64().unwrap_or(f64::NAN);
        if f.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&f) {
            // Integral and in range: the cast is exact.
            return Ok(f as u32);
        }
        Err(E::invalid_type(Unexpected::Float(f), expected))
    }
}

/// Create or replace the override of `key` for `tenant` (`override.set`).
pub async fn set(
    trail: &Trail,
    ctx: Context,
    tenant: String,
    key: String,
    input: SetOverride,
    if_match: Option<IfMatch>,
) -> ChangeResult {
    commit_change(trail, ctx, move |tx| {
        check_name("tenant", &tenant)?;
        check_name("key", &key)?;
        check_input(&input)?;
        let before: Option<Override> = load(tx, &tenant, &key)?;
        check_if_match(
            if_match,
            || Kind::Override.resource(&key),
            before.as_ref().map(|b| b.revision),
        )?;
        let after = Override {
            key: key.clone(),
            tenant: tenant.clone(),
            rate: input.rate,
            burst: input.burst,
            revision: before.as_ref().map_or(1, |b| b.revision + 1),
        };
        if let Some(before) = &before {
            if before.rate == after.rate && before.burst == after.burst {
                return Err(unchanged(before));
            }
        }
        let mut detail = Map::new();
        detail.insert("rate".into(), input.rate.into());
        if let Some(burst) = input.burst {
            detail.insert("burst".into(), burst.into());
        }
        let effect = Effect {
            verb: "set",
            before,
            after: Some(after),
            detail,
        };
        apply(tx, &tenant, &key, effect)
    })
    .await
}

/// Delete the override of `key` for `tenant` (`override.delete`).
pub async fn delete(
    trail: &Trail,
    ctx: Context,
    tenant: String,
    key: String,
    if_match: Option<IfMatch>,
) -> ChangeResult {
    commit_change(trail, ctx, move |tx| {
        remove::<Override>(tx, &tenant, &key, if_match, "delete")
    })
    .await
}

fn check_input(input: &SetOverride) -> Result<(), SubjectError> {
    if !(1..=MAX_RATE).contains(&input.rate) {
        return Err(SubjectError::invalid(
            "rate",
            format!("must be 1 to {MAX_RATE} requests per second"),
        ));
    }
    if input.burst.is_some_and(|b| !(1..=MAX_BURST).contains(&b)) {
        return Err(SubjectError::invalid(
            "burst",
            format!("must be 1 to {MAX_BURST}"),
        ));
    }
    Ok(())
}
