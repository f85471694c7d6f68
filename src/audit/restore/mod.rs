//! Restores: the first boot of a restored store, the incarnations that keep event ids
//! unique across restores, and the refresh of the subjects a restore did not roll back.
//!
//! `first_boot.rs` runs first in `Trail::start`, before the writer boots: on a store a
//! restore marked (`m:incarnation_pending`) it starts a new incarnation and writes its
//! `instance.restore` row and `m:refresh_pending` in one synced batch. `incarnation.rs` maps
//! a seq to the incarnation its event id is keyed with. `refresh.rs` is the trail's half of
//! the refresh `m:refresh_pending` asks for: what the trail says of every remote subject, and
//! the state-refresh rows that correct it.
//!
//! The `Trail` methods of this part (the refresh) are here.

pub(crate) mod first_boot;
pub(crate) mod incarnation;
pub(crate) mod refresh;

use refresh::{states, Refresh, RefreshReq, Refreshed, TrailStates};

use crate::audit::writer::Request;
use crate::audit::Trail;
use crate::store::StoreError;

impl Trail {
    /// The first seq of the restored incarnation whose remote subjects are still to be
    /// refreshed (`m:refresh_pending`), as of boot.
    pub fn refresh_pending(&self) -> Option<u64> {
        self.refresh_pending
    }

    /// What the trail says of every subject of `kinds` (see [`TrailStates`]), off the
    /// runtime.
    pub async fn remote_states(&self, kinds: Vec<String>) -> Result<TrailStates, StoreError> {
        let (store, from) = (self.store.clone(), self.usage().from);
        crate::store::blocking::try_run("the trail's scan for the refresh", move || {
            states(&store, from, &kinds)
        })
        .await
    }

    /// Write `refresh`'s state-refresh row if its present state is not what the trail says:
    /// `Ok(None)` when it is.
    pub async fn refresh(&self, refresh: Refresh) -> Result<Option<Refreshed>, StoreError> {
        self.ask(|reply| Request::Refresh(Box::new(RefreshReq { refresh, reply })))
            .await
    }

    /// Delete `m:refresh_pending`: every remote kind is refreshed.
    pub async fn refresh_done(&self) -> Result<(), StoreError> {
        self.ask(Request::RefreshDone).await
    }
}
