//! A lane's outbox reader: pages of events read and built on the blocking pool, in seq order.
//!
//! Reading RocksDB and building events must not run on a tokio worker, and the lane should
//! not wait for a read while the sink is busy: so a reader is a blocking task that reads a
//! page, hands it over through a small channel, and goes on with the next page after a full
//! one. The lane drops a reader to stop it (a retry starts a new one from the position); the
//! task notices at its next hand-over.

use ankusa_sinks::Delivery;
use tokio::sync::{mpsc, watch};
use tokio_util::task::TaskTracker;

use crate::audit::History;
use crate::lifecycle::event;
use crate::lifecycle::outbox::visit;
use crate::store::{Store, StoreError};
use crate::telemetry;

/// A page of the outbox, its events built off the runtime while the previous page was in
/// flight.
#[derive(Default)]
pub(super) struct Page {
    /// The events, in seq order.
    pub(super) deliveries: Vec<Delivery>,
    /// Each event's row commit time (unix ms), aligned with `deliveries`.
    pub(super) ats: Vec<u64>,
    /// The last seq the page covers: its last outbox entity (whether or not its event could
    /// be built), or, when the page is not full, the last committed seq (every row up to it
    /// was visible, so none after the page's rows is flagged). Moving the position over it lets
    /// retention and the backlog ceiling see past a run of changes that publish nothing.
    pub(super) last: Option<u64>,
    /// Whether the page holds as many entities as a page may: more may follow at once.
    pub(super) full: bool,
}

/// Most events a page makes room for before it is read: the page of a large batch grows as
/// it fills instead of taking its whole size up front.
const MAX_PREALLOCATED: usize = 4096;

/// How many pages a reader may have ready before the lane takes them; one more is being
/// read meanwhile. Reading runs on its own thread, beside the lane's submissions.
const READ_AHEAD: usize = 1;

/// The outbox as a reader sees it: where it is and what its events are built with (the
/// lane's parts, copied into the reader's task).
pub(super) struct Outbox {
    /// The store holding the outbox.
    pub(super) store: Store,
    /// The incarnations, which key each event's id.
    pub(super) history: History,
    /// The node's URI: every event's `source`.
    pub(super) source: String,
    /// Most events in a page.
    pub(super) limit: usize,
    /// The trail's committed-seq watch: a page that is not full covers up to its value.
    pub(super) committed: watch::Receiver<u64>,
}

/// Pages being read (and their events built) on the blocking pool, in seq order: after a full
/// page the reader goes on with the next one, up to [`READ_AHEAD`] pages ahead of the lane; it
/// stops after a page that is not full, and when dropped.
pub(super) struct Reader {
    pages: mpsc::Receiver<Result<Page, StoreError>>,
}

impl Reader {
    /// Start reading the pages after `after` and building their events, in a task of
    /// `readers` (which the lane awaits when it ends).
    pub(super) fn start(readers: &TaskTracker, outbox: Outbox, after: u64) -> Reader {
        let (pages, taken) = mpsc::channel(READ_AHEAD);
        drop(readers.spawn_blocking(move || read_on(outbox, after, pages)));
        Reader { pages: taken }
    }

    /// The next page.
    pub(super) async fn next(&mut self) -> Result<Page, StoreError> {
        self.pages
            .recv()
            .await
            .unwrap_or(Err(StoreError::Stopped("the outbox reader")))
    }
}

/// The reader's task: hand over page after page until one is not full, or the lane is gone.
fn read_on(outbox: Outbox, mut after: u64, pages: mpsc::Sender<Result<Page, StoreError>>) {
    loop {
        // Read before the outbox: every row up to it is already in the store.
        let up_to = *outbox.committed.borrow();
        let page = read_page(&outbox, after, up_to);
        let next = match &page {
            Ok(page) if page.full => page.last,
            _ => None,
        };
        // The lane dropped the reader (a retry starts again from its position).
        if pages.blocking_send(page).is_err() {
            return;
        }
        match next {
            Some(last) => after = last,
            None => return,
        }
    }
}

/// The page of up to `outbox.limit` events after `after`, with `committed` the last seq
/// committed before the read began.
fn read_page(outbox: &Outbox, after: u64, committed: u64) -> Result<Page, StoreError> {
    let limit = outbox.limit;
    let mut page = Page {
        deliveries: Vec::with_capacity(limit.min(MAX_PREALLOCATED)),
        ats: Vec::with_capacity(limit.min(MAX_PREALLOCATED)),
        ..Page::default()
    };
    let visited = visit(
        &outbox.store,
        after,
        limit,
        |row, entity| match event::build(&row, entity, &outbox.history, &outbox.source) {
            Ok(event) => {
                page.ats.push(row.at);
                page.deliveries.push(Delivery {
                    seq: row.seq,
                    event,
                });
            }
            Err(e) => telemetry::lifecycle::event_not_built(&e),
        },
    )?;
    (page.last, page.full) = visited.covered(limit, after, committed);
    Ok(page)
}
