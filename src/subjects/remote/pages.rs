//! A walk over every subject of a remote store, tenant by tenant, a page at a time, each at
//! the version the store listed it at: how a restore's refresh and a snapshot read a store.

use super::{Remote, RemoteSubject};
use crate::audit::Stamp;
use crate::store::StoreError;

impl<T: RemoteSubject> Remote<T> {
    /// A walk over every subject of every tenant, `page` at a time, each at the version the
    /// store listed it at: how a restore's refresh and a snapshot read the store.
    pub(crate) async fn pages(&self, page: usize) -> Result<Pages<'_, T>, StoreError> {
        Ok(Pages {
            remote: self,
            store: self.store.version().await?.store,
            tenants: self.store.tenants().await?.into(),
            after: None,
            page: page.max(1),
        })
    }
}

/// Every subject of a remote store, a page at a time ([`Remote::pages`]).
pub(crate) struct Pages<'a, T: RemoteSubject> {
    remote: &'a Remote<T>,
    /// The store's name, for the stamps.
    store: Option<String>,
    /// The tenants left, the one being read first.
    tenants: std::collections::VecDeque<String>,
    /// The last id read of the first tenant (`None`: from its start).
    after: Option<String>,
    page: usize,
}

impl<T: RemoteSubject> Pages<'_, T> {
    /// The next page, with its tenant; `None` at the end.
    pub(crate) async fn next(&mut self) -> Result<Option<(String, Vec<(T, Stamp)>)>, StoreError> {
        while let Some(tenant) = self.tenants.front().cloned() {
            let store = &self.remote.store;
            let listed = store
                .list(&tenant, self.after.as_deref(), self.page)
                .await?;
            if listed.len() < self.page {
                self.tenants.pop_front();
                self.after = None;
            } else {
                self.after = listed.last().map(|s| s.subject.id().to_owned());
            }
            if listed.is_empty() {
                continue;
            }
            let stamped = listed
                .into_iter()
                .map(|found| {
                    let stamp = Stamp {
                        version: found.version,
                        store: self.store.clone(),
                    };
                    (found.subject, stamp)
                })
                .collect();
            return Ok(Some((tenant, stamped)));
        }
        Ok(None)
    }
}
