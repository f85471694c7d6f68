//! The snapshot of this node's own sources (`[sources] store = "local"`): each item is a row
//! the writer commits after reading the source in its group, so the item states what the
//! store holds at the item's seq, and its version (the incarnation's base + that seq) is
//! above the floor, which is the version of the last row committed when the snapshot began.

use futures::future::join_all;

use super::{stopping, unrecorded, SnapshotKind, Written};
use crate::audit::{CommitError, Context, Stamp, Trail};
use crate::store::{Cf, StoreError};
use crate::subjects::sources::Source;
use crate::subjects::{snapshot_item, SubjectError};

/// The sources in this node's store, as a snapshot kind.
#[derive(Debug, Clone)]
pub struct LocalSources {
    trail: Trail,
}

impl LocalSources {
    /// The sources of `trail`'s store.
    pub fn new(trail: Trail) -> LocalSources {
        LocalSources { trail }
    }

    /// Up to `limit` source keys (`<tenant>/<id>`) after `after`, in key order.
    async fn keys(&self, after: Option<Vec<u8>>, limit: usize) -> Result<Vec<Vec<u8>>, StoreError> {
        let store = self.trail.store().clone();
        crate::store::blocking::try_run("a page of source keys", move || {
            let mut keys = Vec::with_capacity(limit);
            let from = after.clone().unwrap_or_default();
            store.scan(Cf::Sources, b"", &from, |k, _| {
                if after.as_deref() != Some(k) {
                    keys.push(k.to_vec());
                }
                keys.len() < limit
            })?;
            Ok(keys)
        })
        .await
    }

    /// Commit the item of the source at `key`; whether it still existed.
    async fn item(&self, key: Vec<u8>, id: String) -> Result<bool, StoreError> {
        let text = String::from_utf8_lossy(&key).into_owned();
        let Some((tenant, subject)) = text.split_once('/') else {
            return Ok(false);
        };
        let (tenant, subject) = (tenant.to_owned(), subject.to_owned());
        let written = self
            .trail
            .commit(Context::system(), move |tx| {
                match snapshot_item::<Source>(tx, &tenant, &subject, &id)? {
                    Some(change) => Ok((change, ())),
                    // Deleted since it was listed: its delete is its event.
                    None => Err(CommitError::Refused(SubjectError::NotFound {
                        resource: subject,
                    })),
                }
            })
            .await;
        match written {
            Ok(_) => Ok(true),
            Err(CommitError::Refused(_)) => Ok(false),
            Err(e) => Err(unrecorded(e)),
        }
    }
}

#[async_trait::async_trait]
impl SnapshotKind for LocalSources {
    fn kind(&self) -> &'static str {
        "source"
    }

    async fn floor(&self) -> Result<Stamp, StoreError> {
        let last = *self.trail.committed().borrow();
        Ok(Stamp {
            version: self.trail.history().current().version(last),
            store: None,
        })
    }

    async fn items(
        &self,
        id: &str,
        page: usize,
        // The node's own store loses nothing it published: a restore opens an incarnation
        // whose versions are above every earlier one.
        _lifted: Option<u64>,
        written: &Written<'_>,
    ) -> Result<u64, StoreError> {
        let mut count = 0;
        let mut after = None;
        loop {
            let keys = self.keys(after.clone(), page).await?;
            let Some(last) = keys.last().cloned() else {
                return Ok(count);
            };
            let items = keys.into_iter().map(|k| self.item(k, id.to_owned()));
            let mut n = 0;
            for item in join_all(items).await {
                n += u64::from(item?);
            }
            count += n;
            if !written(n) {
                return Err(stopping());
            }
            after = Some(last);
        }
    }
}
