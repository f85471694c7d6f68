//! The snapshot of a kind kept in a remote store: every subject of every tenant, paged, each
//! offered to the writer as a refresh row of the snapshot at the version the store listed it
//! at (or, after a loss, at the snapshot's floor). Listed outside the subject's lock: a change of the subject may land on either side of
//! its item, and its version says which is newer.

use futures::future::join_all;

use super::refresh::offer;
use super::{resource, Remote, RemoteSubject};
use crate::audit::Stamp;
use crate::store::StoreError;
use crate::subjects::snapshot::{stopping, SnapshotKind, Written};

#[async_trait::async_trait]
impl<T: RemoteSubject> SnapshotKind for Remote<T> {
    fn kind(&self) -> &'static str {
        T::KIND
    }

    async fn floor(&self) -> Result<Stamp, StoreError> {
        self.store.version().await
    }

    async fn items(
        &self,
        id: &str,
        page: usize,
        lifted: Option<u64>,
        written: &Written<'_>,
    ) -> Result<u64, StoreError> {
        let mut count = 0;
        let mut pages = self.pages(page).await?;
        while let Some((_, subjects)) = pages.next().await? {
            let mut items = Vec::with_capacity(subjects.len());
            for (subject, mut stamp) in subjects {
                if let Some(version) = lifted {
                    stamp.version = version;
                }
                let name = resource::<T>(subject.id());
                let mut item = offer(&subject, stamp, name, None)?;
                item.snapshot = Some(id.to_owned());
                items.push(self.trail.refresh(item));
            }
            let mut n = 0;
            for item in join_all(items).await {
                n += u64::from(item?.is_some());
            }
            count += n;
            if !written(n) {
                return Err(stopping());
            }
        }
        Ok(count)
    }
}
