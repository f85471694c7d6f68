//! The refresh after a restore: a state-refresh row for every remote subject whose present
//! state differs from what the restored trail says.
//!
//! A restore rolls the trail back, not the route store (nor Redis sources): the changes the
//! lost store made after the backup are still there, while a consumer that saw
//! `instance.restored` forgets the events that told it of them. So, at the first boot after a
//! restore (`m:refresh_pending`, left in the incarnation's batch), once the stores are open and
//! settlement has been through the pending rows an earlier run left, this task:
//!
//! 1. scans the trail once for what it says of every subject of the kinds still to do
//!    ([`Trail::remote_states`]);
//! 2. walks every subject of each store (tenant by tenant, a page at a time) and offers its
//!    present state to the writer, which writes a `<kind>.refresh` row (event
//!    `io.ankusa.<kind>.refreshed`, its entity the redacted present state) where the hashes
//!    differ, or where the trail could not tell (an `interrupted` row, no row at all);
//! 3. offers every subject the trail knows and the store no longer has as absent: where the
//!    trail says it exists (or cannot tell), the refresh row's entity is `null`, which a
//!    consumer reads as "delete it";
//! 4. opens the kind's [`Gate`] (its changes wait while it is closed, and are refused with
//!    `StoreUnavailable` after [`RefreshOptions::hold`]: a change between a read and its
//!    refresh row would be overwritten, for every consumer, by an older state);
//! 5. once every kind is done, deletes the marker through the writer.
//!
//! A store that cannot be read (or a trail that cannot be written) is retried every
//! [`RefreshOptions::retry`] until shutdown; the node serves meanwhile. A crash leaves the
//! marker and the refresh rows already written, which say the state they published: the next
//! boot writes rows only for what still differs.
//!
//! Only this node's trail is corrected: nodes sharing one Redis each publish their own
//! changes, and a consumer of one node's events cannot see another's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use tokio_util::sync::CancellationToken;

use super::{resource, Gate, Remote, RemoteSubject};
use crate::audit::{Known, Refresh, Stamp, Trail, TrailStates};
use crate::store::StoreError;
use crate::subjects::snapshot::{Reason, Snapshots};
use crate::telemetry;

/// How the refresh runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefreshOptions {
    /// Between two attempts when a store cannot be read or the trail cannot be written
    /// (`[settlement] interval`).
    pub retry: Duration,
    /// How long a change of a kind not yet refreshed waits before it is refused.
    pub hold: Duration,
    /// Subjects read, and offered to the writer together, at a time.
    pub page: usize,
}

impl RefreshOptions {
    /// How long a change waits for a refresh before 503 `store_unavailable`.
    pub const HOLD: Duration = Duration::from_secs(5);
    /// Subjects per page.
    pub const PAGE: usize = 100;

    /// Retried every `retry`, with the default hold and page.
    pub fn new(retry: Duration) -> RefreshOptions {
        RefreshOptions {
            retry,
            hold: Self::HOLD,
            page: Self::PAGE,
        }
    }
}

/// What one kind's pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Subjects compared: every one in the store, and every one only the trail knows.
    pub checked: u64,
    /// Refresh rows written.
    pub refreshed: u64,
}

/// What a finished refresh did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Trail rows scanned, over every attempt.
    pub rows_scanned: u64,
    /// Each kind's counts, in the order they finished (of the attempt that finished them).
    pub kinds: Vec<(&'static str, Counts)>,
}

/// One remote kind, as the refresh sees it.
#[async_trait::async_trait]
pub trait Refreshable: Send + Sync {
    /// Its kind (`route`, `source`).
    fn kind(&self) -> &'static str;
    /// The gate its changes pass.
    fn gate(&self) -> &Gate;
    /// Offer every subject it holds, and every one `states` knows and it lacks, `page` at a
    /// time; refresh rows are written where the trail is wrong.
    async fn refresh(&self, states: &mut TrailStates, page: usize) -> Result<Counts, StoreError>;
}

#[async_trait::async_trait]
impl<T: RemoteSubject> Refreshable for Remote<T> {
    fn kind(&self) -> &'static str {
        T::KIND
    }

    fn gate(&self) -> &Gate {
        &self.gate
    }

    async fn refresh(&self, states: &mut TrailStates, page: usize) -> Result<Counts, StoreError> {
        let page = page.max(1);
        let mut counts = Counts::default();
        let mut pages = self.pages(page).await?;
        while let Some((tenant, subjects)) = pages.next().await? {
            let mut offers = Vec::with_capacity(subjects.len());
            for (subject, stamp) in subjects {
                let resource = resource::<T>(subject.id());
                let known = states.take(T::KIND, &tenant, &resource);
                offers.push(offer(&subject, stamp, resource, known)?);
            }
            self.offer(offers, &mut counts).await?;
        }
        let rest = states.rest(T::KIND);
        for chunk in rest.chunks(page) {
            let mut gone = Vec::with_capacity(chunk.len());
            for (tenant, resource, known) in chunk {
                gone.push(self.gone(tenant, resource, known).await?);
            }
            self.offer(gone, &mut counts).await?;
        }
        Ok(counts)
    }
}

impl<T: RemoteSubject> Remote<T> {
    /// The refresh of a subject the trail knows and the store's listing lacked: read again,
    /// with the version its state is at (the store's version, when it is still gone).
    async fn gone(
        &self,
        tenant: &str,
        resource: &str,
        known: &Known,
    ) -> Result<Refresh, StoreError> {
        let id = resource.split_once('/').map_or(resource, |(_, id)| id);
        let found = self.store.get(tenant, id).await?;
        Ok(match found.subject {
            Some(s) => offer(
                &s.subject,
                found.stamp,
                resource.to_owned(),
                Some(known.clone()),
            )?,
            None => Refresh {
                kind: T::KIND.to_owned(),
                tenant: tenant.to_owned(),
                resource: resource.to_owned(),
                present: None,
                revision: None,
                known: Some(known.clone()),
                stamp: Some(found.stamp),
                snapshot: None,
                reason: None,
            },
        })
    }

    /// Offer `refreshes` to the writer together (one group commit serves them).
    async fn offer(&self, refreshes: Vec<Refresh>, counts: &mut Counts) -> Result<(), StoreError> {
        counts.checked += refreshes.len() as u64;
        let written = join_all(refreshes.into_iter().map(|r| self.trail.refresh(r))).await;
        for row in written {
            if row?.is_some() {
                counts.refreshed += 1;
                // A crash between refresh rows (tests arm it to stop the task here).
                fail::fail_point!("remote::refresh::after_row");
            }
        }
        Ok(())
    }
}

/// `subject`'s present state, at version `stamp`, as a refresh offer.
pub(crate) fn offer<T: RemoteSubject>(
    subject: &T,
    stamp: Stamp,
    resource: String,
    known: Option<Known>,
) -> Result<Refresh, StoreError> {
    Ok(Refresh {
        kind: T::KIND.to_owned(),
        tenant: subject.tenant().to_owned(),
        resource,
        present: Some(super::present(subject)?),
        revision: Some(subject.revision()),
        known,
        stamp: Some(stamp),
        snapshot: None,
        reason: None,
    })
}

/// If the trail's store carries `m:refresh_pending`, close the gates of `kinds` (before the
/// node serves) and start refreshing them; `None` when there is nothing to do. The task ends
/// when the refresh is done (with its report) or at `shutdown` (`None`: the marker stays for
/// the next boot).
pub fn start(
    trail: &Trail,
    kinds: Vec<Arc<dyn Refreshable>>,
    options: RefreshOptions,
    then: Option<Snapshots>,
    shutdown: CancellationToken,
) -> Option<tokio::task::JoinHandle<Option<Report>>> {
    let restored_from = trail.refresh_pending()?;
    for kind in &kinds {
        kind.gate().close(options.hold);
    }
    let names: Vec<&str> = kinds.iter().map(|k| k.kind()).collect();
    telemetry::remote::refresh_started(restored_from, &names);
    let trail = trail.clone();
    Some(tokio::spawn(async move {
        tokio::select! {
            // Settlement first tries every pending row an earlier run left (one the store
            // keeps refusing is tried again beside the refresh).
            _ = trail.boot_settled() => {}
            _ = shutdown.cancelled() => return None,
        }
        run(&trail, (kinds, then), options, &shutdown).await
    }))
}

/// Attempt until every kind is refreshed, `then` a snapshot of every kind is taken (a
/// restore rolled this node's own sources back too, and consumers hold what the lost store
/// published), and the marker is gone, or until `shutdown`.
async fn run(
    trail: &Trail,
    (mut left, then): (Vec<Arc<dyn Refreshable>>, Option<Snapshots>),
    options: RefreshOptions,
    shutdown: &CancellationToken,
) -> Option<Report> {
    let mut report = Report::default();
    loop {
        let attempt = async {
            attempt(trail, &mut left, &mut report, options.page).await?;
            match &then {
                Some(snapshots) => match snapshots.take(Reason::Restore, None).await {
                    Ok(Some(_)) => Ok(()),
                    Ok(None) => Err(("snapshot", StoreError::Busy("a snapshot"))),
                    Err(e) => Err(("snapshot", e)),
                },
                None => Ok(()),
            }
        };
        let attempt = tokio::select! {
            attempt = attempt => attempt,
            _ = shutdown.cancelled() => return None,
        };
        let failed = match attempt {
            Ok(()) => match trail.refresh_done().await {
                Ok(()) => {
                    telemetry::remote::refresh_done();
                    return Some(report);
                }
                Err(e) => ("marker", e),
            },
            Err(failed) => failed,
        };
        telemetry::remote::refresh_failed(failed.0, &failed.1, options.retry);
        tokio::select! {
            _ = tokio::time::sleep(options.retry) => {}
            _ = shutdown.cancelled() => return None,
        }
    }
}

/// One pass: scan the trail for the kinds `left`, then refresh them one by one, opening each
/// kind's gate (and taking it off `left`) as it is done.
async fn attempt(
    trail: &Trail,
    left: &mut Vec<Arc<dyn Refreshable>>,
    report: &mut Report,
    page: usize,
) -> Result<(), (&'static str, StoreError)> {
    if left.is_empty() {
        // Every kind is refreshed (a retry of the snapshot that follows): no scan.
        return Ok(());
    }
    let started = Instant::now();
    let kinds = left.iter().map(|k| k.kind().to_owned()).collect();
    let mut states = trail.remote_states(kinds).await.map_err(|e| ("trail", e))?;
    telemetry::remote::refresh_scanned(states.rows, states.len(), started.elapsed());
    report.rows_scanned += states.rows;
    while let Some(kind) = left.first().cloned() {
        let counts = kind
            .refresh(&mut states, page)
            .await
            .map_err(|e| (kind.kind(), e))?;
        kind.gate().open();
        telemetry::remote::refresh_kind_done(kind.kind(), counts.checked, counts.refreshed);
        report.kinds.push((kind.kind(), counts));
        left.remove(0);
    }
    Ok(())
}
