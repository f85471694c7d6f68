//! The writer: the one thread that hands out seq and writes the audit column family.
//!
//! Seq order must equal commit order, so that a reader resuming after the last seq it saw
//! never misses a row. One thread owns seq allocation and the write path, fed by a channel.
//! It group-commits: it takes every request waiting (up to [`MAX_GROUP`]), validates each in
//! order against the store plus the writes already accepted into the group, gives the
//! accepted ones consecutive seqs, writes all their ops, rows, outbox entities and the meta
//! counters in ONE synced `WriteBatch`, and only then answers every caller. One fsync serves
//! many changes; each change is still all-or-nothing. It is a dedicated OS thread, not a
//! tokio task, because every step of it blocks on RocksDB.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use rand::RngCore;
use rocksdb::WriteBatch;
use tokio::sync::{mpsc, oneshot, watch};

use super::context::Context;
use super::hash::{SubjectHasher, KEY_LEN};
use super::incarnation::History;
use super::row::{Change, Row, RowResult, ROW_FORMAT};
use super::tx::{Overlay, Tx};
use super::usage::Usage;
use super::Clock;
use crate::store::{keys, keys::meta, Cf, Store, StoreError};
use crate::telemetry;

/// The most requests one group commit takes: bounds the batch size and the latency of the
/// first caller in it.
pub const MAX_GROUP: usize = 1024;

/// What became of a request the writer took.
pub(crate) enum Fate {
    /// Written and synced as row `seq` at `at`.
    Committed {
        /// The row's seq.
        seq: u64,
        /// The row's commit time.
        at: u64,
    },
    /// Not written: refused by its own validation, or the batch could not be written.
    Unwritten,
}

/// A unit of work for the writer: validate and describe a change, then hear its fate.
pub(crate) trait Job: Send {
    /// Validate against `tx` and stage the change's ops there. `None`: refused (the job
    /// keeps its own reason), nothing of it is written and it takes no seq.
    fn prepare(&mut self, tx: &mut Tx<'_>) -> Option<Change>;
    /// Called once the group's batch was written (or not).
    fn complete(self: Box<Self>, fate: Fate);
}

/// A request to the writer.
pub(crate) enum Request {
    /// Commit one change with its row.
    Commit {
        /// Who asked.
        ctx: Context,
        /// The change.
        job: Box<dyn Job>,
    },
    /// Move a lifecycle sink's position (and with it `m:lifecycle_cursor`), writing the
    /// dead letters of the events it passed over in the same batch.
    Advance(Advance),
    /// Finish what is queued, flush, and stop; the sender is answered when done.
    Shutdown(oneshot::Sender<()>),
}

/// A sink's new position, with what it dead-lettered on the way.
pub(crate) struct Advance {
    /// The sink's name.
    pub sink: String,
    /// The highest seq the sink has confirmed (or handled for good), contiguously.
    pub to: u64,
    /// Dead letters to write (key, value) in the `dead_letters` column family.
    pub dead_letters: Vec<(Vec<u8>, Vec<u8>)>,
    /// Answered once the batch is written.
    pub reply: oneshot::Sender<Result<(), StoreError>>,
}

/// What the writer found (or made) when it booted.
pub(crate) struct Boot {
    pub hasher: SubjectHasher,
    pub last_seq: u64,
    pub last_at: u64,
    pub usage: Usage,
    pub history: History,
    pub positions: BTreeMap<String, u64>,
}

/// Read the store's meta, making what a new store lacks (`m:audit_key`, the first
/// incarnation) and recounting `m:audit_usage` when it does not match the trail, in one
/// synced batch.
pub(crate) fn boot(store: &Store, sinks: &[String]) -> Result<Boot, StoreError> {
    let mut batch = WriteBatch::default();
    let audit = store.cf(Cf::Audit);
    let key = match store.meta(meta::AUDIT_KEY)? {
        Some(k) => <[u8; KEY_LEN]>::try_from(k.as_slice()).map_err(|_| StoreError::Corrupt {
            what: "m:audit_key".into(),
            detail: format!("expected {KEY_LEN} bytes, found {}", k.len()),
        })?,
        None => {
            let mut k = [0u8; KEY_LEN];
            rand::rng().fill_bytes(&mut k);
            batch.put_cf(audit, keys::meta_key(meta::AUDIT_KEY), k);
            k
        }
    };
    let history = match store.meta(meta::INCARNATION)? {
        Some(bytes) => History::decode(&bytes)?,
        None => {
            let h = History::first();
            batch.put_cf(audit, keys::meta_key(meta::INCARNATION), h.encode());
            h
        }
    };
    let last_row = store.last(Cf::Audit, &[keys::ROW])?;
    let (row_seq, last_at) = last_row
        .and_then(|(k, _)| keys::decode_row_key(&k))
        .unwrap_or((0, 0));
    // Rows and m:audit_seq are written in one batch, so they agree; trust the larger if a
    // damaged store says otherwise, never hand out a seq twice.
    let last_seq = store.meta_u64(meta::AUDIT_SEQ)?.max(row_seq);
    let stored = store
        .meta(meta::AUDIT_USAGE)?
        .and_then(|b| Usage::decode(&b));
    let usage = match stored {
        Some(u) if u.seq == last_seq => u,
        _ => {
            let started = Instant::now();
            let u = Usage::recount(store, last_seq)?;
            tracing::warn!(
                rows = u.rows,
                bytes = u.bytes,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "m:audit_usage did not match the trail; recounted"
            );
            batch.put_cf(audit, keys::meta_key(meta::AUDIT_USAGE), u.encode());
            u
        }
    };
    let mut positions = BTreeMap::new();
    for sink in sinks {
        positions.insert(sink.clone(), store.meta_u64(&meta::sink_cursor(sink))?);
    }
    if !batch.is_empty() {
        // Synced: the audit key must never change once a hash was made with it.
        store.write(batch, true)?;
    }
    Ok(Boot {
        hasher: SubjectHasher::new(&key),
        last_seq,
        last_at,
        usage,
        history,
        positions,
    })
}

/// The writer thread's state.
pub(crate) struct Writer {
    pub store: Store,
    pub rx: mpsc::Receiver<Request>,
    pub hasher: SubjectHasher,
    pub clock: Arc<dyn Clock>,
    /// The last seq written: the next row gets `last_seq + 1`.
    pub last_seq: u64,
    /// The `at` of the last row: rows never go back in time, whatever the wall clock does.
    pub last_at: u64,
    pub usage: Usage,
    /// Whether lifecycle events are on: entities go to the outbox and rows are flagged.
    pub lifecycle: bool,
    /// Tells readers (the publisher) the last committed seq: a hint, not the truth.
    pub committed: watch::Sender<u64>,
    /// The position of every configured lifecycle sink; `m:lifecycle_cursor` is their minimum.
    pub positions: BTreeMap<String, u64>,
}

/// A request taken into the group being built.
enum Taken {
    /// A change: its row when accepted, `None` when refused.
    Change { job: Box<dyn Job>, row: Option<Row> },
    /// A sink position move.
    Advance {
        sink: String,
        to: u64,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
}

impl Writer {
    /// Serve requests until a shutdown request or until every sender is gone.
    pub(crate) fn run(mut self) {
        let mut group: Vec<Request> = Vec::with_capacity(MAX_GROUP);
        let mut stop: Option<oneshot::Sender<()>> = None;
        while stop.is_none() {
            let Some(first) = self.rx.blocking_recv() else {
                break;
            };
            let mut next = Some(first);
            while let Some(req) = next.take() {
                match req {
                    Request::Shutdown(done) => {
                        // Refuse new requests, but finish every one already queued.
                        self.rx.close();
                        stop = Some(done);
                    }
                    req => group.push(req),
                }
                if group.len() < MAX_GROUP {
                    next = self.rx.try_recv().ok();
                }
            }
            self.commit_group(std::mem::take(&mut group));
        }
        if let Err(e) = self.store.flush() {
            tracing::warn!(error = %e, "flushing the store at shutdown failed; the WAL has every commit");
        }
        if let Some(done) = stop {
            let _ = done.send(());
        }
    }

    fn commit_group(&mut self, group: Vec<Request>) {
        if group.is_empty() {
            return;
        }
        let started = Instant::now();
        let at = self.clock.now_ms().max(self.last_at);
        let mut batch = WriteBatch::default();
        let mut overlay = Overlay::new();
        let mut usage = self.usage;
        let mut seq = self.last_seq;
        let mut positions = self.positions.clone();
        let mut taken = Vec::with_capacity(group.len());
        for request in group {
            match request {
                Request::Commit { ctx, mut job } => {
                    let row = self.take_change(
                        &mut batch,
                        &mut overlay,
                        &mut usage,
                        &mut seq,
                        at,
                        &ctx,
                        &mut *job,
                    );
                    taken.push(Taken::Change { job, row });
                }
                Request::Advance(advance) => {
                    for (key, value) in &advance.dead_letters {
                        batch.put_cf(self.store.cf(Cf::DeadLetters), key, value);
                    }
                    batch.put_cf(
                        self.store.cf(Cf::Audit),
                        keys::meta_key(&meta::sink_cursor(&advance.sink)),
                        advance.to.to_be_bytes(),
                    );
                    positions.insert(advance.sink.clone(), advance.to);
                    taken.push(Taken::Advance {
                        sink: advance.sink,
                        to: advance.to,
                        reply: advance.reply,
                    });
                }
                Request::Shutdown(_) => unreachable!("run() never puts a shutdown in a group"),
            }
        }
        let rows = seq - self.last_seq;
        if batch.is_empty() {
            // Every change in the group was refused: nothing to write.
            complete(taken, Ok(at));
            return;
        }
        let audit = self.store.cf(Cf::Audit);
        if rows > 0 {
            usage.seq = seq;
            batch.put_cf(audit, keys::meta_key(meta::AUDIT_SEQ), seq.to_be_bytes());
            batch.put_cf(audit, keys::meta_key(meta::AUDIT_USAGE), usage.encode());
        }
        let advanced = taken.iter().any(|t| matches!(t, Taken::Advance { .. }));
        if let (true, Some(cursor)) = (advanced, positions.values().min()) {
            // m:lifecycle_cursor: the last seq every configured sink has confirmed.
            batch.put_cf(
                audit,
                keys::meta_key(meta::LIFECYCLE_CURSOR),
                cursor.to_be_bytes(),
            );
        }
        match self.write(batch) {
            Ok(()) => {
                self.last_seq = seq;
                self.last_at = at;
                self.usage = usage;
                self.positions = positions;
                telemetry::group_committed(rows, started.elapsed());
                // The watch moves before any caller hears "committed": whoever was told its
                // seq also sees the watch at or past it.
                if rows > 0 {
                    self.committed.send_replace(seq);
                }
                complete(taken, Ok(at));
            }
            Err(e) => {
                telemetry::write_failed(&e, rows);
                complete(taken, Err(e));
            }
        }
    }

    /// Validate one change against the group so far; when accepted, give it the next seq and
    /// put its ops, row and outbox entity into `batch`.
    #[allow(clippy::too_many_arguments)]
    fn take_change(
        &self,
        batch: &mut WriteBatch,
        overlay: &mut Overlay,
        usage: &mut Usage,
        seq: &mut u64,
        at: u64,
        ctx: &Context,
        job: &mut dyn Job,
    ) -> Option<Row> {
        let mut tx = Tx::new(&self.store, overlay);
        let prepared = catch_unwind(AssertUnwindSafe(|| job.prepare(&mut tx)));
        let ops = tx.into_ops();
        let change = match prepared {
            Ok(Some(change)) => change,
            Ok(None) => return None,
            Err(_) => {
                // A change's own code panicked: nothing of it is written, the caller hears
                // StoreUnavailable, and the writer goes on.
                tracing::error!("a change panicked while being validated; not written");
                return None;
            }
        };
        *seq += 1;
        for (cf, key, value) in ops {
            match &value {
                Some(v) => batch.put_cf(self.store.cf(cf), &key, v),
                None => batch.delete_cf(self.store.cf(cf), &key),
            }
            overlay.insert((cf, key), value);
        }
        Some(self.append_row(batch, usage, *seq, at, ctx, change))
    }

    /// Put the row of `change` (and its outbox entity) into `batch`.
    fn append_row(
        &self,
        batch: &mut WriteBatch,
        usage: &mut Usage,
        seq: u64,
        at: u64,
        ctx: &Context,
        change: Change,
    ) -> Row {
        let audit = self.store.cf(Cf::Audit);
        let publish = self.lifecycle && change.entity.is_some();
        let row = Row {
            v: ROW_FORMAT,
            seq,
            at,
            actor: ctx.actor.clone(),
            remote_ip: ctx.remote_ip.clone(),
            request_id: ctx.request_id.clone(),
            action: change.action,
            tenant: change.tenant,
            resource: change.resource,
            detail: change.detail,
            before_hash: self.hasher.hash(change.before.as_ref()),
            after_hash: self.hasher.hash(change.after.as_ref()),
            revision: change.revision,
            result: RowResult::Ok,
            publish,
            refresh: false,
        };
        let key = keys::row_key(seq, at);
        let value = serde_json::to_vec(&row).expect("a row always serializes");
        usage.rows += 1;
        usage.bytes += (key.len() + value.len()) as u64;
        batch.put_cf(audit, key, value);
        if let (true, Some(entity)) = (publish, change.entity) {
            let key = keys::outbox_key(seq);
            let value = serde_json::to_vec(&entity).expect("an entity always serializes");
            usage.bytes += (key.len() + value.len()) as u64;
            batch.put_cf(audit, key, value);
        }
        row
    }

    fn write(&self, batch: WriteBatch) -> Result<(), StoreError> {
        fail::fail_point!("audit::write", |_| Err(StoreError::Injected(
            "audit::write".into()
        )));
        // sync = true: the WAL is fsynced before any caller hears "committed", so an
        // acknowledged change survives kill -9 and power loss.
        self.store.write(batch, true)
    }
}

/// Answer every request of a group: `written` is the batch's fate.
fn complete(taken: Vec<Taken>, written: Result<u64, StoreError>) {
    for t in taken {
        match t {
            Taken::Change { job, row } => match (&written, row) {
                (Ok(at), Some(row)) => {
                    telemetry::row_committed(&row);
                    job.complete(Fate::Committed {
                        seq: row.seq,
                        at: *at,
                    });
                }
                _ => job.complete(Fate::Unwritten),
            },
            Taken::Advance { sink, to, reply } => {
                let result = match &written {
                    Ok(_) => {
                        tracing::debug!(sink = %sink, to, "lifecycle sink position persisted");
                        Ok(())
                    }
                    Err(e) => Err(StoreError::Unavailable(format!("batch not written: {e}"))),
                };
                let _ = reply.send(result);
            }
        }
    }
}
