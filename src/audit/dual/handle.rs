//! The dual write's handle and outcomes as its caller sees them: the [`Pending`] a begin
//! hands back, the [`Finish`] its caller reports, and what [`Trail::record`] did.
//!
//! A [`Pending`] dropped unfinished (its task was cancelled or panicked) sends its id to the
//! settlement task from its `Drop`, never blocking.

use tokio::sync::mpsc;

use super::requests::Settled;
use crate::audit::row::Stamp;
#[cfg(doc)]
use crate::audit::Trail;
use crate::telemetry;

/// How a dual write went, as its caller knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// The change took effect, at this version of its subject: the row says `ok` and its
    /// event is published.
    Applied(Stamp),
    /// The change did not take effect: the row says `failed`, no event.
    NotApplied,
    /// The caller cannot tell and no reconciler can: the row says `interrupted`.
    Unknown,
    /// The other store refused the change (a compare-and-set conflict): nothing changed, so,
    /// as for a refused commit, no row; the pending row is removed.
    Refused,
}

/// A begun change: its pending row is on disk. Hand it to [`Trail::finish`]; dropped
/// unfinished, it is settled by the node.
#[derive(Debug)]
pub struct Pending {
    id: u64,
    resource: String,
    abandoned: mpsc::UnboundedSender<u64>,
    armed: bool,
}

impl Pending {
    pub(crate) fn new(id: u64, resource: String, abandoned: mpsc::UnboundedSender<u64>) -> Self {
        Pending {
            id,
            resource,
            abandoned,
            armed: true,
        }
    }

    /// The pending row's id (`p`+id).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Its subject, e.g. `routes/r1`.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// It needs no settlement (finished, or never written).
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.armed {
            // Unbounded: a Drop never blocks. A closed channel means the trail is gone, and
            // the next boot settles the row.
            telemetry::dual::pending_abandoned(self.id, &self.resource);
            let _ = self.abandoned.send(self.id);
        }
    }
}

/// What [`Trail::record`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded<T> {
    /// The trail row (`None`: handed to settlement, or settled by it first).
    pub settled: Option<Settled>,
    /// What the change's `apply` returned.
    pub value: T,
}
