//! The writer's end of the pipeline to the syncer: groups handed over (or, small, written on
//! the writer thread itself), and each group's [`BatchResult`] taken back in order.
//!
//! The writer prepares a group on top of the groups handed over and not yet written, so it
//! must hear how each of them went before it trusts its counters: a written group's counters
//! become the written ones; after a batch that failed, every group prepared on top of it (the
//! same epoch) is abandoned, and once all of them are heard the counters roll back to the
//! last written group.

use std::collections::VecDeque;
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::thread::JoinHandle;

use super::group::Preparing;
use super::sync::{self, BatchResult, Counters, Prepared, Syncer};
use super::Writer;

/// The largest group the writer writes itself rather than hand to the syncer.
const INLINE_MAX: usize = 2;

/// The writer's end of the pipeline to the syncer.
pub(super) struct Pipe {
    /// Where prepared groups go to the syncer; dropped, it stops the syncer.
    pub(super) groups: std_mpsc::SyncSender<Prepared>,
    /// Where the syncer reports each group it was handed, in order.
    results: std_mpsc::Receiver<BatchResult>,
    /// The groups handed over whose result is not heard yet, oldest first.
    pub(super) handed_over: VecDeque<HandedOver>,
    /// Bumped when a batch fails: groups prepared after that start again from `written`.
    pub(super) epoch: u64,
    /// A batch failed and the writer has not yet rolled back.
    failed: bool,
    /// The syncer's state, shared so that the writer can write a group itself when the
    /// syncer is free and nothing else waits.
    syncer_state: Arc<Mutex<Syncer>>,
    /// Where results are sent (the writer's own writes report the same way).
    results_tx: std_mpsc::Sender<BatchResult>,
    /// The syncer thread.
    pub(super) syncer: JoinHandle<()>,
}

/// A group handed to the syncer, its result not yet heard.
pub(super) struct HandedOver {
    /// The counters once it is written.
    counters: Counters,
    /// Whether it deletes rows from the head of the trail.
    prunes: bool,
    /// The pending ids it begins.
    begun: Vec<u64>,
}

/// Start the writer and syncer threads.
pub(super) fn spawn(writer: Writer, syncer: Syncer) -> std::io::Result<JoinHandle<()>> {
    // A rendezvous: the writer hands a group over when the syncer has finished the last, so
    // at most one group is written while the next is prepared.
    let (groups, to_sync) = std_mpsc::sync_channel(0);
    let (results_tx, results) = std_mpsc::channel();
    let syncer_state = Arc::new(Mutex::new(syncer));
    let (state, to_writer) = (syncer_state.clone(), results_tx.clone());
    let syncer = std::thread::Builder::new()
        .name("audit-sync".into())
        .spawn(move || sync::run(&state, to_sync, to_writer))?;
    let pipe = Pipe {
        groups,
        results,
        handed_over: VecDeque::new(),
        epoch: 0,
        failed: false,
        syncer_state,
        results_tx,
        syncer,
    };
    std::thread::Builder::new()
        .name("audit-writer".into())
        .spawn(move || writer.run(pipe))
}

impl Pipe {
    /// The result of the oldest group handed over, waiting up to `timeout` for it.
    pub(super) fn result_within(&self, timeout: std::time::Duration) -> Option<BatchResult> {
        self.results.recv_timeout(timeout).ok()
    }
}

impl Writer {
    /// Close `o` and have it written: by the syncer thread, or on this thread when it is
    /// one or two requests, the syncer is free and no other request waits (a lone committer:
    /// nothing to prepare meanwhile, so a thread hop would only add latency; a larger group
    /// written here would hold up the preparing of the requests that arrive meanwhile).
    /// `false`: the syncer is gone.
    pub(super) fn submit(&mut self, pipe: &mut Pipe, o: Preparing) -> bool {
        // Every group passes here on the writer thread, however it is written.
        fail::fail_point!("audit::submit");
        let here = o.taken.len() <= INLINE_MAX
            && pipe.handed_over.is_empty()
            && self.rx.is_empty()
            && inline_allowed();
        let (prepared, begun) = self.close(o);
        let group = self.handing_over(&prepared, begun);
        pipe.handed_over.push_back(group);
        if here {
            pipe.syncer_state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .sync(prepared, &pipe.results_tx);
            return true;
        }
        if let Err(std_mpsc::SendError(prepared)) = pipe.groups.send(prepared) {
            crate::telemetry::audit::syncer_stopped();
            sync::complete(prepared.taken, Err(sync::abandoned()), true);
            return false;
        }
        true
    }

    /// Answer a group that will not be written because a batch before it failed.
    pub(super) fn abandon(&mut self, mut o: Preparing) {
        self.forget_begun(&o.take_begun());
        self.head.unwritten();
        sync::complete(o.taken, Err(sync::abandoned()), true);
    }

    /// Take in the results of the groups handed to the syncer: every one when `all` (and
    /// whenever a batch failed, since the groups after it were prepared on top of it), else
    /// those already known. A written group's counters become the written ones; once every
    /// group after a failed batch is heard, the counters roll back to the last written.
    pub(super) fn collect_results(&mut self, pipe: &mut Pipe, all: bool) {
        while !pipe.handed_over.is_empty() {
            let result = if all || pipe.failed {
                pipe.results.recv().ok()
            } else {
                pipe.results.try_recv().ok()
            };
            let Some(result) = result else {
                break;
            };
            self.apply_result(pipe, result);
        }
        if pipe.failed && pipe.handed_over.is_empty() {
            self.counters = self.written.clone();
            pipe.epoch += 1;
            pipe.failed = false;
        }
    }

    /// Take in the result of the oldest group handed over.
    pub(super) fn apply_result(&mut self, pipe: &mut Pipe, result: BatchResult) {
        let Some(group) = pipe.handed_over.pop_front() else {
            return;
        };
        pipe.failed |= result == BatchResult::Unwritten;
        self.heard(group, result);
    }

    /// What the writer keeps of `prepared` (which begins the pending ids `begun`) while it is
    /// written, by the syncer or on this thread.
    pub(super) fn handing_over(&mut self, prepared: &Prepared, begun: Vec<u64>) -> HandedOver {
        let group = HandedOver {
            counters: prepared.counters.clone(),
            prunes: self.head.staged() > 0,
            begun,
        };
        self.head.handed_over();
        group
    }

    /// Take in how `group`, the oldest not yet heard, went: written, its counters are the
    /// written ones; not, what it began and what it pruned are forgotten.
    pub(super) fn heard(&mut self, group: HandedOver, result: BatchResult) {
        self.unsynced.pop_front();
        match result {
            BatchResult::Written => {
                self.written = group.counters;
                if group.prunes {
                    self.head.written();
                }
            }
            BatchResult::Unwritten => {
                self.forget_begun(&group.begun);
                if group.prunes {
                    self.head.unwritten();
                }
            }
        }
    }
}

/// Whether a small group may be written on the writer thread (a failpoint turns it off, so
/// that tests can hold a group in the syncer while the next is prepared).
fn inline_allowed() -> bool {
    fail::fail_point!("audit::inline", |_| false);
    true
}
