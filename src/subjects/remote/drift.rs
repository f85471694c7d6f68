//! The drift check: every subject in a shared store checked against what the fleet wrote, so that a
//! change made around Ankusa (a hand edit with `redis-cli`, a key made by hand, a copy from
//! another store) is in the trail and reaches the replicas.
//!
//! Each write signs the subject with the fleet's secret (see `redis/drift.rs`); a pass scans
//! every subject of the kind, whichever node wrote it, and for each one found otherwise:
//!
//! 1. adopts it in the store at a new version, if it is still as found (a compare-and-set:
//!    of nodes checking at once, one adopts it), marked until its rows are written;
//! 2. writes a system row `<kind>.drift` (the MAC the fleet's write left, the MAC of what is
//!    there, the version found; its `after_hash` the state found) and a `<kind>.refresh` row
//!    (`detail.reason = "drift"`) whose `refreshed` event carries the state at the new
//!    version, so that every replica takes it by the contract's rule;
//! 3. drops the mark. A crash before that leaves it: the next pass writes the rows again.
//!
//! A subject deleted by hand (its hash gone, its id still in its tenant's index) gets its drift
//! row and a refresh row whose event says it is gone, at the store's version read with its
//! absence, then leaves the index; a crash before that only repeats the rows.
//!
//! A subject whose JSON is not one (or is another subject's, or whose `rev` is not a
//! number) cannot be published: it gets its drift row once per process, no event, and
//! replicas keep its last state. Passes run every `verify_interval` and on demand (`POST /admin/v1/stores/verify`),
//! one at a time on a node; nodes that check at once may both publish a drift another left
//! marked (the same state at the same version: a replica takes it once).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{present, resource, Remote, RemoteSubject};
use crate::audit::{Change, CommitError, Context, Known, Refresh, Stamp};
use crate::store::StoreError;
use crate::telemetry;

/// Hashes scanned per page.
pub const PAGE: usize = 1000;

/// A subject the scan found otherwise than the fleet wrote it.
#[derive(Debug, Clone)]
pub struct Drifted<T> {
    /// Its tenant.
    pub tenant: String,
    /// Its id.
    pub id: String,
    /// The subject its JSON is (`None`: not one of this kind, or of another revision).
    pub subject: Option<T>,
    /// Its revision as stored.
    pub rev: Option<String>,
    /// Its JSON as stored.
    pub json: Option<String>,
    /// The version stored beside it.
    pub version: u64,
    /// The MAC stored beside it (what the fleet's last write of it signed).
    pub expected: Option<String>,
    /// The MAC of what is there (`None`: nothing is, the subject is gone).
    pub actual: Option<String>,
    /// Adopted already, its rows not yet written (a pass cut short).
    pub marked: bool,
}

/// One page of a drift scan.
#[derive(Debug)]
pub struct DriftPage<T> {
    /// Where the next page starts (0: the scan is done).
    pub next: u64,
    /// Subjects scanned.
    pub scanned: u64,
    /// Those found drifted.
    pub drifted: Vec<Drifted<T>>,
}

impl<T> Default for DriftPage<T> {
    fn default() -> Self {
        DriftPage {
            next: 0,
            scanned: 0,
            drifted: Vec::new(),
        }
    }
}

/// What one pass over a kind found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The kind.
    pub kind: &'static str,
    /// Subjects scanned.
    pub scanned: u64,
    /// Subjects found drifted.
    pub drifted: u64,
    /// Drifts published (adopted, rows written).
    pub published: u64,
    /// How long the pass took, ms.
    pub elapsed_ms: u64,
}

/// A kind the drift check covers.
#[async_trait::async_trait]
pub trait Verifiable: Send + Sync {
    /// Its kind.
    fn kind(&self) -> &'static str;
    /// One pass over every subject of the kind.
    async fn verify(&self) -> Result<Report, StoreError>;
}

/// What a node's passes over a kind share: one pass at a time (a pass that met another's mark
/// would publish its drift again), and the drifts already reported that cannot be published,
/// per process: (tenant, id, MAC found).
#[derive(Debug, Clone, Default)]
pub(crate) struct Passes {
    one: Arc<tokio::sync::Mutex<()>>,
    reported: Arc<Mutex<HashSet<(String, String, String)>>>,
}

impl Passes {
    fn reported(&self) -> std::sync::MutexGuard<'_, HashSet<(String, String, String)>> {
        self.reported.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait::async_trait]
impl<T: RemoteSubject> Verifiable for Remote<T> {
    fn kind(&self) -> &'static str {
        T::KIND
    }

    async fn verify(&self) -> Result<Report, StoreError> {
        let _one = self.passes.one.lock().await;
        let started = Instant::now();
        let mut report = Report {
            kind: T::KIND,
            ..Report::default()
        };
        let mut next = 0;
        loop {
            let page = self.store.drift_page(next, PAGE).await?;
            report.scanned += page.scanned;
            for drifted in page.drifted {
                report.drifted += 1;
                if self.drifted(drifted).await? {
                    report.published += 1;
                }
            }
            next = page.next;
            if next == 0 {
                break;
            }
        }
        // Subjects deleted by hand: listed in their tenant's index, their hash gone.
        for tenant in self.store.tenants().await? {
            let mut after: Option<String> = None;
            loop {
                let (gone, last) = self
                    .store
                    .gone_page(&tenant, after.as_deref(), PAGE)
                    .await?;
                for id in gone {
                    report.drifted += 1;
                    if self.drifted_gone(&tenant, &id).await? {
                        report.published += 1;
                    }
                }
                match last {
                    Some(last) => after = Some(last),
                    None => break,
                }
            }
        }
        report.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        telemetry::remote::drift_checked(&report);
        Ok(report)
    }
}

impl<T: RemoteSubject> Remote<T> {
    /// Handle one drifted subject under its lock (this node's own changes of it wait): adopt
    /// it, write its rows, drop its mark. Whether its refreshed event was written.
    async fn drifted(&self, d: Drifted<T>) -> Result<bool, StoreError> {
        let _held = self.locks.lock(&d.tenant, &d.id).await;
        let Some(subject) = d.subject.clone() else {
            let seen = (
                d.tenant.clone(),
                d.id.clone(),
                d.actual.clone().unwrap_or_default(),
            );
            if self.passes.reported().contains(&seen) {
                return Ok(false);
            }
            let store = self.store.version().await?.store;
            self.drift_row(&d, store, None).await?;
            self.passes.reported().insert(seen);
            return Ok(false);
        };
        let stamp = if d.marked {
            let store = self.store.version().await?.store;
            Stamp {
                version: d.version,
                store,
            }
        } else {
            match self.store.adopt(&d).await? {
                Some(stamp) => stamp,
                // Changed meanwhile (a change, or another node adopted it).
                None => return Ok(false),
            }
        };
        let mut subject = subject;
        if let Some(rev) = d.rev.as_deref().and_then(|r| r.parse().ok()) {
            subject.set_revision(rev);
        }
        let present = present(&subject)?;
        self.drift_row(&d, stamp.store.clone(), Some(present.state.clone()))
            .await?;
        self.trail
            .refresh(Refresh {
                kind: T::KIND.to_owned(),
                tenant: d.tenant.clone(),
                resource: resource::<T>(&d.id),
                present: Some(present),
                revision: Some(subject.revision()),
                stamp: Some(stamp.clone()),
                snapshot: None,
                reason: Some("drift"),
                known: None,
            })
            .await?;
        self.store.unmark(&d, stamp.version).await?;
        Ok(true)
    }

    /// Handle subject `id` of `tenant`, listed in its index with its hash gone, under its
    /// lock: read its absence and the store's version in one step (a change that makes it
    /// again takes a greater one), write its drift row and a refresh row whose event tells
    /// replicas it is gone, then drop it from the index. Whether the event was written.
    async fn drifted_gone(&self, tenant: &str, id: &str) -> Result<bool, StoreError> {
        let _held = self.locks.lock(tenant, id).await;
        let found = self.store.get(tenant, id).await?;
        if found.subject.is_some() {
            return Ok(false);
        }
        let d = Drifted::<T> {
            tenant: tenant.to_owned(),
            id: id.to_owned(),
            subject: None,
            rev: None,
            json: None,
            version: found.stamp.version,
            expected: None,
            actual: None,
            marked: false,
        };
        let change = self
            .drift_change(&d, found.stamp.store.clone(), None)
            .detail("gone", true);
        self.commit_drift(change).await?;
        self.trail
            .refresh(Refresh {
                kind: T::KIND.to_owned(),
                tenant: tenant.to_owned(),
                resource: resource::<T>(id),
                present: None,
                revision: None,
                stamp: Some(found.stamp),
                snapshot: None,
                reason: Some("drift"),
                // Whatever the trail last said of it, replicas are told it is gone.
                known: Some(Known::Unknown),
            })
            .await?;
        self.store.unindex(tenant, id).await?;
        Ok(true)
    }

    /// The system row `<kind>.drift` of `d`, found in the store named `store`; its
    /// `after_hash` the state found, when it is one.
    async fn drift_row(
        &self,
        d: &Drifted<T>,
        store: Option<String>,
        found: Option<Value>,
    ) -> Result<(), StoreError> {
        let change = self.drift_change(d, store, found);
        self.commit_drift(change).await
    }

    /// The change of `d`'s drift row.
    fn drift_change(&self, d: &Drifted<T>, store: Option<String>, found: Option<Value>) -> Change {
        telemetry::remote::drift_found(T::KIND, &d.tenant, &d.id, d.version);
        Change::new(format!("{}.drift", T::KIND), resource::<T>(&d.id))
            .tenant(d.tenant.clone())
            .detail("store", store)
            .detail("version", d.version)
            .detail("expected_mac", d.expected.clone())
            .detail("found_mac", d.actual.clone())
            .detail("readable", found.is_some())
            .states(None, found)
    }

    /// Commit a drift row, a system row.
    async fn commit_drift(&self, change: Change) -> Result<(), StoreError> {
        self.trail
            .commit(Context::system(), move |_| {
                Ok::<_, CommitError<()>>((change, ()))
            })
            .await
            .map(|_| ())
            .map_err(|e: CommitError<()>| StoreError::NotRecorded {
                what: "a drift row",
                backlog: matches!(e, CommitError::AuditBacklog),
            })
    }
}

/// Run a pass over `kind` every `interval` (never when it is zero) until `stop`; a pass that
/// fails is logged and tried again at the next interval.
pub fn watch(
    kind: Arc<dyn Verifiable>,
    interval: Duration,
    stop: CancellationToken,
) -> Option<JoinHandle<()>> {
    if interval.is_zero() {
        return None;
    }
    Some(tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = stop.cancelled() => return,
            }
            tokio::select! {
                done = kind.verify() => {
                    if let Err(e) = done {
                        telemetry::remote::drift_failed(kind.kind(), &e, interval);
                    }
                }
                _ = stop.cancelled() => return,
            }
        }
    }))
}
