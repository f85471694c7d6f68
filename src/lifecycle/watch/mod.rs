//! Watching the lifecycle events over HTTP (`GET /admin/v1/lifecycle/events`): pages of the
//! outbox after a position, in seq order, never before they are committed, the same bytes
//! every time an event is served.
//!
//! Watchers that are caught up share one reader: the [`tail`] task builds each committed
//! event once and wakes them. A watcher behind the tail reads the outbox a page at a time
//! ([`read`]): it costs reads, and its memory is one page. A watcher never moves a sink's
//! position or holds retention back: when the rows after its position are deleted (or the
//! store was restored behind it) it hears [`WatchError::Gone`] and relists from a snapshot.

pub mod filter;
mod read;
mod tail;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde_json::value::RawValue;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use self::filter::{Filter, FilterError};
use self::read::Outbox;
use self::tail::{Shared, Tail};
use crate::audit::Trail;
use crate::store::StoreError;
use crate::telemetry;

/// One event as watchers get it: its structured JSON, and what filters look at.
#[derive(Debug)]
pub struct Served {
    /// The row's seq (the SSE `id`).
    pub seq: u64,
    /// The event's type.
    pub ty: String,
    /// The subject's tenant.
    pub tenant: Option<String>,
    /// The event, as the sinks' structured mode writes it.
    pub json: Box<RawValue>,
}

/// What a watcher is served.
#[derive(Debug)]
pub struct Page {
    /// The events, in seq order (maybe none).
    pub events: Vec<Arc<Served>>,
    /// Where to resume: every event up to it was served or filtered out.
    pub position: u64,
    /// The incarnation of the store at `position`.
    pub incarnation: Uuid,
    /// The trail's last committed seq when the page was read.
    pub latest: u64,
}

/// Why a position cannot be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoneWhy {
    /// Rows after it were deleted (retention, a ceiling).
    Deleted,
    /// It is past the node's last seq (the store was restored behind it).
    PastTheEnd,
    /// Its seq belongs to another incarnation now (the store was restored behind it).
    OtherIncarnation,
}

/// Why a watcher was not served.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The events after the position are not all here: relist.
    #[error("{}", gone_message(*.why, *.oldest))]
    Gone {
        /// Why.
        why: GoneWhy,
        /// The lowest position served.
        oldest: u64,
        /// The incarnation at `oldest`.
        incarnation: Uuid,
    },
    /// `[api] max_watchers` watch already.
    #[error("{0} watchers already (api.max_watchers); retry shortly")]
    Full(usize),
    /// The outbox could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn gone_message(why: GoneWhy, oldest: u64) -> String {
    let what = match why {
        GoneWhy::Deleted => "the events after it were deleted by retention or a ceiling",
        GoneWhy::PastTheEnd => "it is past this node's last seq (the store was restored)",
        GoneWhy::OtherIncarnation => {
            "its seq was written again in another incarnation (the store was restored)"
        }
    };
    format!(
        "the position cannot be served: {what}. Resume from position {oldest} and ask for a \
         snapshot (POST /admin/v1/lifecycle/snapshot) to relist"
    )
}

/// A watcher as `GET /admin/v1/lifecycle` lists it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct WatcherStatus {
    /// The watcher's number, in order of arrival.
    pub id: u64,
    /// Its position.
    pub position: u64,
    /// The trail's last seq minus its position.
    pub lag: u64,
}

/// The node's watch: shared by every watcher. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Watch(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    /// For the oldest row the trail keeps.
    trail: Trail,
    outbox: Outbox,
    committed: watch::Receiver<u64>,
    shared: Arc<Shared>,
    permits: Arc<Semaphore>,
    max: usize,
    /// Each watcher's position, by id.
    watchers: Mutex<BTreeMap<u64, Arc<AtomicU64>>>,
    next_id: AtomicU64,
    /// When the last watcher left (none watch now), for the tail's idle.
    left: Mutex<Option<Instant>>,
    stop: CancellationToken,
}

impl Inner {
    /// Whether the rows after `after` are all still in the trail, as of the writer's last
    /// write. The tail may still hold events whose rows retention deleted: they are not
    /// served, so that every watcher hears `Gone` by the same rule, the trail's.
    fn kept(&self, after: u64) -> bool {
        after.saturating_add(1) >= self.trail.stats().usage.from
    }

    /// Whether the tail serves what follows `after`.
    fn in_tail(&self, after: u64) -> bool {
        let from = self
            .shared
            .tail
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .from;
        from <= after && self.kept(after)
    }
}

impl tail::Watched for Inner {
    fn watched_since(&self, now: Instant, idle: Duration) -> bool {
        if self.permits.available_permits() < self.max {
            return true;
        }
        let left = *self.left.lock().unwrap_or_else(|p| p.into_inner());
        left.is_some_and(|left| now.duration_since(left) < idle)
    }
}

impl Watch {
    /// The watch of `trail`'s outbox, events with `source` as their source, for at most
    /// `max_watchers` at once; its tail runs (the task returned) until `stop`, which also
    /// ends every wait.
    pub fn start(
        trail: &Trail,
        source: &str,
        max_watchers: usize,
        stop: CancellationToken,
    ) -> (Watch, tokio::task::JoinHandle<()>) {
        let committed = trail.committed();
        let at = *committed.borrow();
        let shared = Arc::new(Shared {
            tail: std::sync::RwLock::new(Tail::at(at)),
            moved: watch::Sender::new(at),
        });
        let outbox = Outbox {
            store: trail.store().clone(),
            history: trail.history().clone(),
            source: source.to_owned(),
        };
        let inner = Arc::new(Inner {
            trail: trail.clone(),
            outbox: outbox.clone(),
            committed: committed.clone(),
            shared: shared.clone(),
            permits: Arc::new(Semaphore::new(max_watchers)),
            max: max_watchers,
            watchers: Mutex::new(BTreeMap::new()),
            next_id: AtomicU64::new(1),
            left: Mutex::new(None),
            stop: stop.clone(),
        });
        let tail = tokio::spawn(tail::follow(shared, outbox, committed, inner.clone(), stop));
        (Watch(inner), tail)
    }

    /// A new watcher, or [`WatchError::Full`].
    pub fn join(&self) -> Result<Watcher, WatchError> {
        let permit = self.0.permits.clone().try_acquire_owned().map_err(|_| {
            telemetry::watch::refused();
            WatchError::Full(self.0.max)
        })?;
        let id = self.0.next_id.fetch_add(1, Ordering::Relaxed);
        let position = Arc::new(AtomicU64::new(0));
        self.lock_watchers().insert(id, position.clone());
        telemetry::watch::joined();
        Ok(Watcher {
            watch: self.clone(),
            id,
            position,
            _permit: permit,
        })
    }

    /// Every watcher's position and lag, by arrival.
    pub fn statuses(&self) -> Vec<WatcherStatus> {
        let latest = *self.0.committed.borrow();
        self.lock_watchers()
            .iter()
            .map(|(id, position)| {
                let position = position.load(Ordering::Relaxed);
                WatcherStatus {
                    id: *id,
                    position,
                    lag: latest.saturating_sub(position),
                }
            })
            .collect()
    }

    /// The incarnation of the store at `position`.
    pub fn incarnation(&self, position: u64) -> Uuid {
        self.0.outbox.history.of(position).id
    }

    /// Whether the node is stopping (streams end there).
    pub fn is_stopping(&self) -> bool {
        self.0.stop.is_cancelled()
    }

    fn lock_watchers(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<AtomicU64>>> {
        self.0.watchers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where what a watcher at `after` in `incarnation` shares with this store ends, once the
    /// store was restored behind it: the seq before the incarnation that replaced the
    /// watcher's (or, when its incarnation is not known here, the one `after` falls in). So
    /// it resumes before all the restored store wrote since, its own snapshot included.
    fn shared_end(&self, after: u64, incarnation: Option<Uuid>, latest: u64) -> u64 {
        let history = &self.0.outbox.history;
        let known = incarnation.and_then(|id| history.0.iter().position(|i| i.id == id));
        let replaced = match known {
            Some(k) => history.0.get(k + 1).map(|i| i.from),
            None => Some(history.of(after.min(latest)).from),
        };
        replaced
            .map_or(latest, |from| from.saturating_sub(1))
            .min(after)
            .min(latest)
    }

    fn gone(&self, why: GoneWhy, oldest: u64) -> WatchError {
        WatchError::Gone {
            why,
            oldest,
            incarnation: self.incarnation(oldest),
        }
    }
}

/// One watcher (a long-poll or a stream): holds its place under `max_watchers` until dropped.
#[derive(Debug)]
pub struct Watcher {
    watch: Watch,
    id: u64,
    position: Arc<AtomicU64>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.watch.lock_watchers().remove(&self.id);
        *self.watch.0.left.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        telemetry::watch::left();
    }
}

impl Watcher {
    /// Whether position `after`, served in `incarnation` (when the watcher knows it), can be
    /// served from: [`WatchError::Gone`] when it is past the last seq or its seq now belongs
    /// to another incarnation (the store was restored behind it: it resumes where this
    /// store's timeline left its own), or when the rows after it were deleted (as
    /// [`Watcher::next`] finds too, for rows deleted later), so that a stream hears it as its
    /// answer's status.
    pub async fn check(&self, after: u64, incarnation: Option<Uuid>) -> Result<(), WatchError> {
        let inner = &self.watch.0;
        let latest = *inner.committed.borrow();
        let restored = if after > latest {
            Some(GoneWhy::PastTheEnd)
        } else if incarnation.is_some_and(|id| id != self.watch.incarnation(after)) {
            Some(GoneWhy::OtherIncarnation)
        } else {
            None
        };
        let from = match restored {
            Some(_) => self.watch.shared_end(after, incarnation, latest),
            None if inner.in_tail(after) => return Ok(()),
            None => after,
        };
        let store = inner.outbox.store.clone();
        let deleted = crate::store::blocking::run("a watcher's position", move || {
            read::oldest_if_gone(&store, from, latest)
        })
        .await??;
        match (restored, deleted) {
            (_, Some(oldest)) => Err(self.watch.gone(GoneWhy::Deleted, oldest)),
            (Some(why), None) => Err(self.watch.gone(why, from)),
            (None, None) => Ok(()),
        }
    }

    /// The next page after `after`: at once when an event follows it (or the tail has moved
    /// past events `filter` left out), else when one is committed, or empty at `until` or
    /// when the node stops.
    pub async fn next(
        &self,
        mut after: u64,
        filter: &Filter,
        limit: usize,
        until: Instant,
    ) -> Result<Page, WatchError> {
        let inner = &self.watch.0;
        let mut moved = inner.shared.moved.subscribe();
        loop {
            moved.borrow_and_update();
            let last = Instant::now() >= until || inner.stop.is_cancelled();
            let page = self.page(after, filter, limit, last).await?;
            self.position.store(page.position, Ordering::Relaxed);
            let behind_tail = page.position < *moved.borrow();
            if !page.events.is_empty() || last {
                telemetry::watch::served(
                    page.events.len(),
                    page.latest.saturating_sub(page.position),
                );
                return Ok(page);
            }
            after = page.position;
            if behind_tail {
                continue;
            }
            tokio::select! {
                changed = moved.changed() => if changed.is_err() { return Ok(page) },
                () = tokio::time::sleep_until(until) => {}
                () = inner.stop.cancelled() => {}
            }
        }
    }

    /// One page after `after`: from the tail when it holds what follows, else the outbox.
    /// A `last` page (no wait follows) is complete up to the commit it names: what the tail
    /// has not read yet is read from the outbox.
    async fn page(
        &self,
        after: u64,
        filter: &Filter,
        limit: usize,
        last: bool,
    ) -> Result<Page, WatchError> {
        let inner = &self.watch.0;
        let latest = *inner.committed.borrow();
        let from_tail = {
            let tail = inner.shared.tail.read().unwrap_or_else(|p| p.into_inner());
            (tail.from <= after && inner.kept(after)).then(|| tail.after(after, filter, limit))
        };
        let (events, position) = match from_tail {
            Some((mut events, position)) => {
                if last && events.len() < limit && position < latest {
                    // Rows after the tail's end were all there a moment ago: a deletion
                    // since is found by the next call.
                    if let Ok(more) = self
                        .read(position, filter, limit - events.len(), latest)
                        .await?
                    {
                        events.extend(more.events);
                        (events, more.position)
                    } else {
                        (events, position)
                    }
                } else {
                    (events, position)
                }
            }
            None => match self.read(after, filter, limit, latest).await? {
                Ok(read) => (read.events, read.position),
                Err(oldest) => return Err(self.watch.gone(GoneWhy::Deleted, oldest)),
            },
        };
        Ok(Page {
            events,
            position,
            incarnation: self.watch.incarnation(position),
            // The tail may have read a commit after `latest` was.
            latest: latest.max(position),
        })
    }

    /// The outbox after `after` up to `latest`, read on the blocking pool (`Err(oldest)`:
    /// rows after `after` were deleted).
    async fn read(
        &self,
        after: u64,
        filter: &Filter,
        limit: usize,
        latest: u64,
    ) -> Result<Result<read::Read, u64>, WatchError> {
        let (outbox, filter) = (self.watch.0.outbox.clone(), filter.clone());
        let read = crate::store::blocking::run("a watcher's page", move || {
            read::behind(&outbox, after, &filter, limit, latest)
        })
        .await??;
        Ok(read)
    }
}
