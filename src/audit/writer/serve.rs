//! The writer thread's loop: take requests into groups and hand each group over as soon as
//! the syncer is free, until a shutdown.
//!
//! Each turn of the loop is one [`Step`]: hear what the syncer reported, hand the group over
//! if it is time (the syncer is free, the group is full, or it has waited long enough), then
//! find the next request, which [`Writer::take_request`] puts into the group. A request that
//! reads the trail itself waits for everything before it to be written and makes a group of
//! its own.

use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::group::Preparing;
use super::pipe::Pipe;
use super::request::Request;
use super::{Writer, MAX_GROUP};

/// How long the writer polls for the next request, once nothing is being written, before it
/// parks (see `next_request`).
const SPIN_BEFORE_PARK: Duration = Duration::from_micros(50);

/// While a group is being written, how often the writer looks for new requests to prepare.
const POLL_WHILE_WRITING: Duration = Duration::from_micros(50);

/// How long a group being prepared waits for the syncer before the writer hands it over
/// anyway (blocking until the syncer takes it).
const SPIN_WHILE_WRITING: Duration = Duration::from_millis(1);

/// The loop's state between two turns.
#[derive(Default)]
struct Serving {
    /// The group being prepared.
    group: Option<Preparing>,
    /// Since when `group` has had nothing to take while the syncer is busy.
    waiting_since: Option<Instant>,
    /// The caller of a shutdown, answered once the store is flushed.
    stop: Option<oneshot::Sender<()>>,
}

/// What one turn of the loop came to.
enum Step {
    /// A request to take into the group.
    Take(Request),
    /// Nothing to take yet: turn again.
    Again,
    /// Shut down, every sender gone, or the syncer gone.
    Stop,
}

impl Writer {
    /// The writer thread: serve requests until shut down, then stop the syncer and flush the
    /// store. The syncer is stopped and joined even when serving panicked, before the panic
    /// goes on, so that no thread of the trail holds the store once this one has ended.
    pub(super) fn run(mut self, mut pipe: Pipe) {
        let served =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.serve(&mut pipe)));
        let Pipe { groups, syncer, .. } = pipe;
        drop(groups);
        if syncer.join().is_err() {
            crate::telemetry::audit::syncer_panicked();
        }
        let stop = match served {
            Ok(stop) => stop,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        if let Err(e) = self.store.flush() {
            crate::telemetry::audit::flush_failed(&e);
        }
        if let Some(done) = stop {
            let _ = done.send(());
        }
    }

    /// Take requests into groups and have them written until a shutdown (its caller is
    /// returned, to hear once the store is flushed) or until every sender is gone.
    fn serve(&mut self, pipe: &mut Pipe) -> Option<oneshot::Sender<()>> {
        let mut s = Serving::default();
        loop {
            let request = match self.step(pipe, &mut s) {
                Step::Take(request) => request,
                Step::Again => continue,
                Step::Stop => break,
            };
            if !self.take_request(pipe, &mut s, request) {
                break;
            }
        }
        if let Some(o) = s.group.take() {
            self.abandon(o);
        }
        s.stop
    }

    /// One turn: hear the syncer, hand the group over if it is time, find the next request.
    fn step(&mut self, pipe: &mut Pipe, s: &mut Serving) -> Step {
        self.collect_results(pipe, false);
        if s.group.as_ref().is_some_and(|o| o.epoch != pipe.epoch) {
            // Built on a batch that failed: none of it stands.
            self.abandon(s.group.take().expect("checked above"));
        }
        if let Some(o) = s.group.as_ref() {
            // Hand the group over as soon as the syncer is free (so preparing and
            // writing overlap), when it is full, or when the writer has waited long
            // enough for the syncer; until then, take more requests into it.
            let free = pipe.handed_over.is_empty();
            let waited = s
                .waiting_since
                .is_some_and(|t| t.elapsed() >= SPIN_WHILE_WRITING);
            if free || waited || o.taken.len() >= MAX_GROUP {
                s.waiting_since = None;
                let o = s.group.take().expect("checked above");
                return if self.submit(pipe, o) {
                    Step::Again
                } else {
                    Step::Stop
                };
            }
        }
        // After a shutdown request the channel is closed: what was queued before it
        // is still taken, and then the channel reports that it is disconnected.
        if s.group.is_none() {
            return self.next_request(pipe).map_or(Step::Stop, Step::Take);
        }
        match self.rx.try_recv() {
            Ok(req) => Step::Take(req),
            Err(mpsc::error::TryRecvError::Empty) => {
                // Nothing to prepare: sleep until the syncer is free, looking for
                // new requests now and then (spinning would take the CPU the
                // callers need to send them).
                s.waiting_since.get_or_insert_with(Instant::now);
                self.wait_for_syncer(pipe);
                Step::Again
            }
            Err(mpsc::error::TryRecvError::Disconnected) => {
                // Shut down, or every sender is gone: write what is prepared, then stop.
                let o = s.group.take().expect("checked above");
                self.submit(pipe, o);
                Step::Stop
            }
        }
    }

    /// Take `request` into the group being prepared (a request that reads the trail: into a
    /// group of its own). `false`: the syncer is gone.
    fn take_request(&mut self, pipe: &mut Pipe, s: &mut Serving, request: Request) -> bool {
        match request {
            Request::Shutdown(done) => {
                // Refuse new requests, but finish every one already queued.
                self.rx.close();
                s.stop = Some(done);
                true
            }
            req if req.reads_trail() => {
                // It reads the store as it is: everything before it goes first and is
                // written, and it makes a group of its own.
                if let Some(o) = s.group.take() {
                    if !self.submit(pipe, o) {
                        return false;
                    }
                }
                self.collect_results(pipe, true);
                let mut o = self.next_group(pipe.epoch);
                self.add(&mut o, req);
                self.submit(pipe, o)
            }
            req => {
                if s.group.is_none() {
                    s.group = Some(self.next_group(pipe.epoch));
                }
                self.add(s.group.as_mut().expect("made above"), req);
                true
            }
        }
    }

    /// The next request, for a new group. Right after a group is answered, its caller
    /// usually sends its next change within microseconds: poll briefly before parking the
    /// thread, so a lone committer does not pay a futex sleep and wake-up on every commit.
    /// While a group is being written, sleep on its result instead, looking for requests
    /// now and then.
    fn next_request(&mut self, pipe: &mut Pipe) -> Option<Request> {
        let mut idle_since = Instant::now();
        loop {
            match self.rx.try_recv() {
                Ok(req) => return Some(req),
                Err(mpsc::error::TryRecvError::Disconnected) => return None,
                Err(mpsc::error::TryRecvError::Empty) => {}
            }
            if !pipe.handed_over.is_empty() {
                self.wait_for_syncer(pipe);
                idle_since = Instant::now();
            } else if idle_since.elapsed() < SPIN_BEFORE_PARK {
                std::thread::yield_now();
            } else {
                return self.rx.blocking_recv();
            }
        }
    }

    /// Sleep until the syncer reports a group (or briefly, to look for new requests).
    fn wait_for_syncer(&mut self, pipe: &mut Pipe) {
        if let Some(result) = pipe.result_within(POLL_WHILE_WRITING) {
            self.apply_result(pipe, result);
        }
        self.collect_results(pipe, false);
    }
}
