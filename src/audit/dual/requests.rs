//! What a dual write's steps send the writer, and how the writer answers them.
//!
//! A begin, a finish and a settlement each travel to the writer as a request and are taken
//! into a group; the [`Answer`] waits there until the group's batch is written (or not), so
//! that no caller hears of a pending row or a trail row that is not on disk.

use tokio::sync::{mpsc, oneshot};

use super::handle::{Finish, Pending};
use super::settle::Presence;
use crate::audit::context::Context;
use crate::audit::row::{Change, Row, RowResult};
use crate::audit::writer::sync::row_as_written;
use crate::store::StoreError;
use crate::telemetry;

/// Why a begin was refused. Nothing of it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The ceilings or the outbox backlog.
    Backlog,
    /// The store could not be read or written.
    Unavailable,
}

/// What a finish or a settlement wrote: the trail row its pending row became.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    /// The trail row's seq.
    pub seq: u64,
    /// What the row says the change did.
    pub result: RowResult,
    /// Flagged for a state-refresh event.
    pub refresh: bool,
}

/// The answer to a finish or a settlement: `None` when the pending row was already gone
/// (finished or settled by another path), or left no row.
pub(crate) type SettleReply = oneshot::Sender<Result<Option<Settled>, StoreError>>;

/// Write a pending row.
pub(crate) struct Begin {
    pub ctx: Context,
    pub change: Change,
    /// Where the `Pending` sends its id if it is dropped unfinished.
    pub abandoned: mpsc::UnboundedSender<u64>,
    pub reply: oneshot::Sender<Result<Pending, Refusal>>,
}

/// Move pending row `id` into the trail with the caller's outcome.
pub(crate) struct FinishReq {
    pub id: u64,
    pub how: Finish,
    pub reply: SettleReply,
}

/// Move pending row `id` into the trail with what reconcile found.
pub(crate) struct SettleReq {
    pub id: u64,
    pub presence: Presence,
    pub reply: SettleReply,
}

/// A pending request taken into the group, answered once the batch is written (or not).
pub(crate) enum Answer {
    /// A pending row written, its `Pending` handed over once it is on disk.
    Begun {
        pending: Pending,
        reply: oneshot::Sender<Result<Pending, Refusal>>,
    },
    /// A begin refused before anything was written.
    Refused {
        why: Refusal,
        reply: oneshot::Sender<Result<Pending, Refusal>>,
    },
    /// A pending row moved into the trail (or removed, or already gone).
    Settled {
        row: Result<Option<Box<Row>>, StoreError>,
        reply: SettleReply,
    },
}

impl Answer {
    /// Answer the caller; `written` is the group batch's fate.
    pub(crate) fn complete(self, written: &Result<u64, StoreError>) {
        match self {
            Answer::Begun { mut pending, reply } => {
                if written.is_err() {
                    // Nothing was written: there is nothing to settle.
                    pending.disarm();
                    let _ = reply.send(Err(Refusal::Unavailable));
                } else {
                    telemetry::dual::pending_begun();
                    if let Err(Ok(pending)) = reply.send(Ok(pending)) {
                        // The caller is gone: dropping the Pending hands it to settlement.
                        drop(pending);
                    }
                }
            }
            Answer::Refused { why, reply } => {
                let _ = reply.send(Err(why));
            }
            Answer::Settled { row, reply } => {
                let answer = row_as_written(written, row).map(|row| {
                    row.map(|row| Settled {
                        seq: row.seq,
                        result: row.result,
                        refresh: row.refresh,
                    })
                });
                let _ = reply.send(answer);
            }
        }
    }
}
