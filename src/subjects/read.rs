//! Reading subjects back: one by id, or a page of one tenant's in id order.
//!
//! These block on RocksDB: async callers run them in `spawn_blocking`. They return only
//! [`Redacted`] views, so no read can hand out a secret.

use super::key::{check_name, id_of, subject_key, tenant_prefix};
use super::redact::{redact, Redacted};
use super::{Subject, SubjectError};
use crate::store::{Store, StoreError};

/// The most subjects one page holds.
pub const MAX_PAGE: usize = 1000;

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// A tenant or id is not acceptable.
    #[error(transparent)]
    Invalid(#[from] SubjectError),
    /// The store could not be read, or had a value that does not decode.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One page of subjects.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// The subjects, in id order.
    pub items: Vec<Redacted>,
    /// The id to pass as `after` for the next page (`None`: this was the last).
    pub next: Option<String>,
}

/// Subject `id` of `tenant`, redacted.
pub fn get<S: Subject>(
    store: &Store,
    tenant: &str,
    id: &str,
) -> Result<Option<Redacted>, ReadError> {
    check_name("tenant", tenant)?;
    check_name(S::KIND.id_field(), id)?;
    match store.get(S::KIND.cf(), &subject_key(tenant, id))? {
        None => Ok(None),
        Some(bytes) => Ok(Some(decode::<S>(&bytes, id)?)),
    }
}

/// Up to `limit` (at most [`MAX_PAGE`]) subjects of `tenant` with ids after `after`.
pub fn list<S: Subject>(
    store: &Store,
    tenant: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<Page, ReadError> {
    check_name("tenant", tenant)?;
    let prefix = tenant_prefix(tenant);
    let from = match after {
        Some(after) => {
            check_name("after", after)?;
            // The smallest key greater than `after`'s own.
            let mut k = subject_key(tenant, after);
            k.push(0);
            k
        }
        None => prefix.clone(),
    };
    let limit = limit.clamp(1, MAX_PAGE);
    let mut items = Vec::new();
    let mut ids = Vec::new();
    let mut failure = None;
    store.scan(S::KIND.cf(), &prefix, &from, |k, v| {
        let id = id_of(k, tenant).unwrap_or_default().to_owned();
        match decode::<S>(v, &id) {
            Ok(view) => {
                items.push(view);
                ids.push(id);
                items.len() <= limit
            }
            Err(e) => {
                failure = Some(e);
                false
            }
        }
    })?;
    if let Some(e) = failure {
        return Err(e.into());
    }
    let next = if items.len() > limit {
        items.truncate(limit);
        ids.get(limit - 1).cloned()
    } else {
        None
    };
    Ok(Page { items, next })
}

fn decode<S: Subject>(bytes: &[u8], id: &str) -> Result<Redacted, StoreError> {
    let corrupt = |detail: String| StoreError::Corrupt {
        what: S::KIND.resource(id),
        detail,
    };
    let subject: S = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    redact(&subject).map_err(|e| corrupt(e.to_string()))
}
