//! The lane driven one step at a time, against a real trail and a scripted sink.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ankusa_sinks::{Delivery, Outcome, RetryPolicy, Sink, SinkError, Submitted};
use serde_json::json;

use super::*;
use crate::audit::{Change, CommitError, Context, SystemClock, TrailOptions};
use crate::lifecycle::dead_letters;
use crate::lifecycle::status::SinkStatus;
use crate::store::{keys::meta, Store};

/// A sink whose outcome for each event is scripted by the event's index among all the
/// events handed to it (0-based, across attempts); its outcomes are known at once.
struct Scripted {
    /// Whether its attempts let the next one overtake them.
    open: bool,
    /// The outcome of the event handed over at each index.
    script: fn(usize) -> Outcome,
    /// How many events were handed over.
    handed: AtomicUsize,
    /// The seqs of every attempt, in order.
    attempts: Mutex<Vec<Vec<u64>>>,
}

#[async_trait::async_trait]
impl Sink for Scripted {
    fn kind(&self) -> &'static str {
        "scripted"
    }

    async fn send(&self, events: &[Delivery]) -> Vec<Outcome> {
        self.submit(events).await.outcomes.await
    }

    async fn submit(&self, events: &[Delivery]) -> Submitted {
        let seqs: Vec<u64> = events.iter().map(|d| d.seq).collect();
        let first = self.handed.fetch_add(events.len(), Ordering::SeqCst);
        let outcomes = (first..first + events.len()).map(self.script).collect();
        self.attempts.lock().unwrap().push(seqs);
        Submitted {
            open: self.open,
            outcomes: Box::pin(std::future::ready(outcomes)),
        }
    }

    async fn healthcheck(&self) -> Result<(), SinkError> {
        Ok(())
    }
}

fn retry(reason: &str) -> Outcome {
    Outcome::Retry {
        after: None,
        reason: reason.into(),
    }
}

/// A lane over a fresh trail holding `rows` flagged rows (seqs 1..=rows), for sink `s`.
struct Fixture {
    _dir: tempfile::TempDir,
    store: Store,
    trail: Trail,
    sink: Arc<Scripted>,
    shutdown: CancellationToken,
    enable: watch::Sender<u64>,
    lane: Lane,
}

async fn fixture(rows: u64, batch: usize, in_flight: usize, sink: Scripted) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let trail_options = TrailOptions {
        sinks: vec!["s".into()],
        ..TrailOptions::default()
    };
    let trail = Trail::start(store.clone(), trail_options, Arc::new(SystemClock)).unwrap();
    for i in 1..=rows {
        let resource = format!("routes/r{i}");
        trail
            .commit(Context::system(), move |_| {
                let change = Change::new("route.create", resource.clone())
                    .tenant("t1")
                    .entity(json!({"id": resource}));
                Ok::<_, CommitError<()>>((change, ()))
            })
            .await
            .unwrap();
    }
    let sink = Arc::new(sink);
    let spec = SinkSpec {
        name: "s".into(),
        sink: sink.clone(),
        retry: RetryPolicy {
            initial: Duration::from_millis(1),
            max: Duration::from_millis(1),
            max_retry_after: Duration::from_millis(1),
        },
    };
    let options = PublisherOptions {
        source: "urn:ankusa:node:test".into(),
        batch,
        idle: Duration::from_secs(60),
        in_flight,
        max_dead_letters: 100_000,
    };
    let (shutdown, (enable, enables)) = (CancellationToken::new(), watch::channel(0));
    let status = status::starting("s", "scripted", 0);
    let shared = Shared {
        status,
        enables,
        counted: dead_letters::LetterCount::new("s", 0),
    };
    let lane = Lane::new(&trail, spec, options, shared, shutdown.clone(), 0);
    Fixture {
        _dir: dir,
        store,
        trail,
        sink,
        shutdown,
        enable,
        lane,
    }
}

/// The name of a state, to compare.
fn name(state: &Step) -> &'static str {
    match state {
        Step::Resuming => "resuming",
        Step::Reading => "reading",
        Step::Sending(_) => "sending",
        Step::Confirming => "confirming",
        Step::Idle => "idle",
        Step::Retrying(_) => "retrying",
        Step::Disabled => "disabled",
        Step::Stopped => "stopped",
    }
}

/// Take steps until the lane is in state `until`: each state it went through, with the
/// position it had there.
async fn steps_until(lane: &mut Lane, until: &str) -> Vec<(&'static str, u64)> {
    let mut seen = vec![(name(&lane.state), lane.position)];
    while name(&lane.state) != until {
        lane.step().await;
        seen.push((name(&lane.state), lane.position));
    }
    seen
}

/// Shut the lane down from where it is, wind it down and stop the trail.
async fn stop(mut f: Fixture) -> (Store, SinkStatus) {
    f.shutdown.cancel();
    // An idle lane may see a commit before the shutdown; it stops at its next look.
    steps_until(&mut f.lane, "stopped").await;
    let status = f.lane.status.clone();
    f.lane.finish().await;
    f.trail.shutdown().await;
    (f.store, status::snapshot(&status))
}

/// Three attempts of two under way; the second fails at its second event (index 3). The
/// position moves over the first attempt and the first event of the second, never over the
/// third, delivered but past the gap: the lane starts again after seq 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_position_moves_only_over_the_contiguous_confirmed_prefix() {
    let sink = Scripted {
        open: true,
        script: |i| {
            if i == 3 {
                retry("timeout")
            } else {
                Outcome::Delivered
            }
        },
        handed: AtomicUsize::new(0),
        attempts: Mutex::new(Vec::new()),
    };
    let mut f = fixture(6, 2, 3, sink).await;
    let seen = steps_until(&mut f.lane, "retrying").await;
    let expected = [
        ("resuming", 0),
        ("reading", 0),
        ("sending", 0), // 1, 2 (a full page: the reader goes on)
        ("reading", 0),
        ("sending", 0), // 3, 4
        ("reading", 0),
        ("sending", 0),    // 5, 6
        ("confirming", 0), // the window is full
        ("reading", 2),    // 1, 2 delivered; room again
        ("confirming", 2), // nothing after 6
        ("retrying", 3),   // 3 delivered, 4 to retry; 5, 6 ignored
    ];
    assert_eq!(seen, expected);
    assert!(f.lane.window.is_empty() && f.lane.reader.is_none());
    let status = status::snapshot(&f.lane.status);
    assert_eq!((status.state, status.retries), (SinkState::Retrying, 1));
    let seen = steps_until(&mut f.lane, "idle").await;
    let expected = [
        ("retrying", 3),
        ("resuming", 3),
        ("reading", 3),
        ("sending", 3), // 4, 5
        ("reading", 3),
        ("sending", 3), // 6
        ("reading", 3),
        ("confirming", 3), // nothing after 6
        ("confirming", 5),
        ("resuming", 6),
        ("reading", 6),
        ("idle", 6),
    ];
    assert_eq!(seen, expected);
    let attempts = f.sink.attempts.lock().unwrap().clone();
    assert_eq!(
        attempts,
        vec![vec![1, 2], vec![3, 4], vec![5, 6], vec![4, 5], vec![6]]
    );
    let (store, status) = stop(f).await;
    assert_eq!(store.meta_u64(&meta::sink_position("s")).unwrap(), 6);
    assert_eq!((status.state, status.delivered), (SinkState::Stopped, 6));
}

/// A refused event is dead-lettered and passed; a gone destination stops the lane at the
/// event before it, with a `sink.disable` row, until an operator's enable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_is_dead_lettered_and_a_gone_destination_waits_for_an_enable() {
    let sink = Scripted {
        open: false,
        script: |i| match i {
            1 => Outcome::Rejected {
                reason: "too large".into(),
            },
            2 => Outcome::Disabled {
                reason: "gone".into(),
            },
            _ => Outcome::Delivered,
        },
        handed: AtomicUsize::new(0),
        attempts: Mutex::new(Vec::new()),
    };
    let mut f = fixture(4, 10, 1, sink).await;
    let seen = steps_until(&mut f.lane, "disabled").await;
    let expected = [
        ("resuming", 0),
        ("reading", 0),
        ("sending", 0), // 1 to 4
        ("confirming", 0),
        ("disabled", 2), // 1 delivered, 2 dead-lettered, 3 gone
    ];
    assert_eq!(seen, expected);
    assert_eq!(status::snapshot(&f.lane.status).state, SinkState::Disabled);
    let row = crate::audit::get(&f.store, 5).unwrap().unwrap();
    assert_eq!(
        (row.action.as_str(), row.resource.as_str()),
        ("sink.disable", "sinks/s")
    );
    assert_eq!(row.detail["position"], json!(2));
    f.enable.send_modify(|count| *count += 1);
    let seen = steps_until(&mut f.lane, "idle").await;
    let expected = [
        ("disabled", 2),
        ("resuming", 2),
        ("reading", 2),
        ("sending", 2), // 3, 4
        ("confirming", 2),
        ("reading", 5), // over the sink.disable row too
        ("idle", 5),
    ];
    assert_eq!(seen, expected);
    let (store, status) = stop(f).await;
    assert_eq!(store.meta_u64(&meta::sink_position("s")).unwrap(), 5);
    let letters = dead_letters::list(&store, "s", 0, 10).unwrap();
    let letters: Vec<_> = letters.iter().map(|l| (l.seq, l.reason.as_str())).collect();
    assert_eq!(letters, vec![(2, "too large")]);
    assert_eq!((status.delivered, status.dead_lettered), (3, 1));
}

/// At its dead-letter ceiling the lane does not pass over an event refused for good: it
/// retries from before it until an operator drops a letter, then dead-letters one more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_its_dead_letter_ceiling_a_refusal_stops_the_lane_before_it() {
    let sink = Scripted {
        open: false,
        script: |_| Outcome::Rejected {
            reason: "unauthorized".into(),
        },
        handed: AtomicUsize::new(0),
        attempts: Mutex::new(Vec::new()),
    };
    let mut f = fixture(4, 10, 1, sink).await;
    f.lane.options.max_dead_letters = 2;
    let seen = steps_until(&mut f.lane, "retrying").await;
    let expected = [
        ("resuming", 0),
        ("reading", 0),
        ("sending", 0), // 1 to 4
        ("confirming", 0),
        ("retrying", 2), // 1, 2 dead-lettered; no room for 3
    ];
    assert_eq!(seen, expected);
    let status = status::snapshot(&f.lane.status);
    assert_eq!(status.last_error.as_deref(), Some("dead_letters_full"));
    assert_eq!(
        (status.state, status.dead_lettered),
        (SinkState::Retrying, 2)
    );
    // Full still: the retry stops before 3 again.
    let seen = steps_until(&mut f.lane, "confirming").await;
    assert_eq!(seen.last(), Some(&("confirming", 2)));
    f.lane.step().await;
    assert_eq!((name(&f.lane.state), f.lane.position), ("retrying", 2));
    assert_eq!(f.lane.counted.get(), 2);

    // Once durable, an operator drops letter 1: room for one more.
    while status::snapshot(&f.lane.status).position < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let counted = f.lane.counted.clone();
    dead_letters::drop_letter(&f.trail, Context::new("ops", None, None), &counted, 1)
        .await
        .unwrap();
    assert_eq!(counted.get(), 1);
    steps_until(&mut f.lane, "confirming").await;
    f.lane.step().await;
    assert_eq!((name(&f.lane.state), f.lane.position), ("retrying", 3));
    assert_eq!(counted.get(), 2);
    let (store, _) = stop(f).await;
    let letters = dead_letters::list(&store, "s", 0, 10).unwrap();
    let seqs: Vec<u64> = letters.iter().map(|l| l.seq).collect();
    assert_eq!(seqs, vec![2, 3]);
    assert_eq!(store.meta_u64(&meta::sink_position("s")).unwrap(), 3);
}
