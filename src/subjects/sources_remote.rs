//! Sources kept in Redis (`[sources] store = "redis"`), shared by a fleet of nodes, instead of
//! in this node's `sources` column family.
//!
//! The same model, validation and redaction as local sources (`sources.rs`), but every change
//! is a dual write (`remote::Remote::write`): a pending row, Redis's compare-and-set on the
//! revision, then the row. The secret is still kept only as its salted verifier, in Redis too.

use std::sync::Arc;

use super::key::check_name;
use super::remote::redis::RedisStore;
use super::remote::{Remote, RemoteStore};
use super::sources::{check_new, check_patch, created, patched, NewSource, Source, SourcePatch};
use super::{ChangeResult, IfMatch};
use crate::audit::{Context, Trail};
use crate::config::{SourceStoreKind, SourcesConfig};
use crate::store::StoreError;

/// Sources in a remote store, their changes recorded in a trail.
#[derive(Debug, Clone)]
pub struct RemoteSources(Remote<Source>);

impl RemoteSources {
    /// Sources kept in `store`, their changes recorded in `trail`.
    pub fn new(store: Arc<dyn RemoteStore<Source>>, trail: Trail) -> RemoteSources {
        RemoteSources(Remote::new(store, trail))
    }

    /// The sources `[sources]` configures: `None` when they are local.
    pub fn open(
        config: &SourcesConfig,
        trail: &Trail,
    ) -> Result<Option<RemoteSources>, StoreError> {
        match config.store {
            SourceStoreKind::Local => Ok(None),
            SourceStoreKind::Redis => {
                let store = RedisStore::<Source>::open(&config.redis())?;
                Ok(Some(RemoteSources::new(Arc::new(store), trail.clone())))
            }
        }
    }

    /// The remote-subject handle underneath (its gate, and the refresh after a restore).
    pub fn remote(&self) -> &Remote<Source> {
        &self.0
    }

    /// Create source `input.id` of `tenant` (`source.create`); `Exists` if it is there.
    pub async fn create(&self, ctx: Context, tenant: String, input: NewSource) -> ChangeResult {
        check_new(&tenant, &input)?;
        self.0.absent(&tenant, &input.id).await?;
        let (source, detail) = created(tenant, input);
        self.0
            .write(ctx, "create", None, Some(source), detail)
            .await
    }

    /// Apply `patch` to source `id` of `tenant` (`source.update`). A patch that changes
    /// nothing writes no row; one that names a secret always changes it (see `patched`).
    pub async fn update(
        &self,
        ctx: Context,
        tenant: String,
        id: String,
        patch: SourcePatch,
        if_match: Option<IfMatch>,
    ) -> ChangeResult {
        check_name("tenant", &tenant)?;
        check_name("id", &id)?;
        check_patch(&patch)?;
        let before = self.0.current(&tenant, &id, if_match).await?;
        let Some((after, detail)) = patched(&before.subject, patch) else {
            return Remote::unchanged(&before.subject);
        };
        self.0
            .write(ctx, "update", Some(before), Some(after), detail)
            .await
    }

    /// Delete source `id` of `tenant` (`source.delete`).
    pub async fn delete(
        &self,
        ctx: Context,
        tenant: String,
        id: String,
        if_match: Option<IfMatch>,
    ) -> ChangeResult {
        self.0.delete(ctx, &tenant, &id, if_match).await
    }
}
