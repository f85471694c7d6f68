//! The lifecycle publisher: flagged rows become CloudEvents, delivered in seq order with
//! stable ids; positions move only over what a sink confirmed.

use std::sync::Arc;
use std::time::Duration;

use crate::support::eventually;
use crate::support::publisher::Running;
use crate::support::trail::*;
use ankusa::audit::{Change, CommitError, Trail};
use ankusa::lifecycle::dead_letters;
use ankusa::lifecycle::event::event_id;
use ankusa::lifecycle::{PublisherOptions, SinkSpec, SinkState};
use ankusa::store::{keys, keys::meta, Cf};
use ankusa_sinks::test_support::Receiver;
use ankusa_sinks::{
    Delivery, FileConfig, FileSink, Outcome, RetryPolicy, Sink, SinkError, Submitted,
    WebhookConfig, WebhookSink,
};
use serde_json::Value;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        initial: Duration::from_millis(5),
        max: Duration::from_millis(50),
        max_retry_after: Duration::from_millis(50),
    }
}

fn file_sink(path: &std::path::Path) -> SinkSpec {
    let config = FileConfig {
        path: path.to_owned(),
        retry: fast_retry(),
    };
    SinkSpec {
        name: "file".into(),
        sink: Arc::new(FileSink::new(config).unwrap()),
        retry: fast_retry(),
    }
}

pub(crate) fn options() -> PublisherOptions {
    PublisherOptions {
        source: "urn:ankusa:test".into(),
        batch: 256,
        idle: Duration::from_millis(50),
        in_flight: 4,
        max_dead_letters: 100_000,
    }
}

/// A change that takes effect but is not a lifecycle event (no entity): never published.
async fn unflagged(trail: &Trail, i: usize) {
    trail
        .commit(ctx("ops"), move |tx| {
            tx.put(
                Cf::Overrides,
                format!("t1/o{i}").into_bytes(),
                b"{}".to_vec(),
            )?;
            Ok::<_, CommitError<()>>((
                Change::new("override.set", format!("overrides/o{i}")).tenant("t1"),
                (),
            ))
        })
        .await
        .unwrap();
}

fn read_lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_changes_reach_the_file_sink_in_seq_order_with_stable_ids() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail_with_sinks(dir.path(), &["file"]);
    let events = dir.path().join("events.jsonl");
    // 10,000 changes from 50 committers; every tenth is an unflagged change.
    let mut tasks = vec![];
    for c in 0..50 {
        let trail = trail.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..200 {
                if i % 10 == 0 {
                    unflagged(&trail, c * 1000 + i).await;
                } else {
                    create_source(&trail, ctx("a"), &format!("s{c}-{i}"), "hunter2")
                        .await
                        .unwrap();
                }
            }
        }));
    }
    let publisher = Running::start(&trail, vec![file_sink(&events)], options()).await;
    for t in tasks {
        t.await.unwrap();
    }
    let flagged: Vec<_> = all_rows(trail.store())
        .into_iter()
        .filter(|r| r.publish)
        .collect();
    // 9,000 source changes, and the checkpoint the 10,000th row brings (audit.checkpoint_rows).
    assert_eq!(flagged.len(), 9_001);
    let (sources, checkpoint) = flagged.split_at(9_000);
    assert_eq!(
        (checkpoint[0].seq, checkpoint[0].action.as_str()),
        (10_001, "trail.checkpoint")
    );
    // The position covers every row once it has passed the flagged ones: the trail's last
    // row may be one that publishes nothing.
    let last = *trail.committed().borrow();
    assert!(last >= flagged.last().unwrap().seq);
    eventually(
        "the sink to catch up",
        Duration::from_secs(60),
        async || publisher.statuses()[0].position == last,
    )
    .await;
    let lines = read_lines(&events);
    let incarnation = trail.history().of(1).id;
    assert_eq!(lines.len(), flagged.len(), "exactly the flagged rows");
    for (line, row) in lines.iter().zip(sources) {
        assert_eq!(line["id"], event_id(incarnation, row.seq).to_string());
        assert_eq!(line["sequence"], format!("{:020}", row.seq));
        assert_eq!(line["type"], "io.ankusa.source.created");
        assert_eq!(line["source"], "urn:ankusa:test");
        assert_eq!(line["subject"], row.resource);
        assert_eq!(line["partitionkey"], format!("t1/{}", row.resource));
        assert_eq!(line["incarnation"], incarnation.to_string());
        assert_eq!(line["data"]["action"], "source.create");
    }
    let line = &lines[9_000];
    assert_eq!(line["type"], "io.ankusa.trail.checkpoint");
    assert_eq!(line["partitionkey"], "trail");
    assert_eq!(line["data"]["action"], "trail.checkpoint");
    assert_eq!(
        line["data"]["entity"],
        Value::Object(checkpoint[0].detail.clone())
    );
    assert_eq!(line["data"]["entity"]["size"], 10_000);
    assert!(
        !std::fs::read_to_string(&events)
            .unwrap()
            .contains("hunter2"),
        "no secret in any event"
    );
    publisher.stop().await;
    assert_eq!(
        trail
            .store()
            .meta_u64(&meta::sink_position("file"))
            .unwrap(),
        last
    );
    assert_eq!(
        trail.store().meta_u64(meta::LIFECYCLE_CURSOR).unwrap(),
        last
    );
    trail.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_position_passes_over_rows_that_publish_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail_with_sinks(dir.path(), &["file"]);
    let events = dir.path().join("events.jsonl");
    create_source(&trail, ctx("a"), "s1", "x").await.unwrap();
    let publisher = Running::start(&trail, vec![file_sink(&events)], options()).await;
    eventually("the event", Duration::from_secs(60), async || {
        publisher.statuses()[0].position == 1
    })
    .await;
    // Five changes that are not lifecycle events: nothing to send, yet the position (and
    // with it the cursor that retention and the backlog ceiling read) moves over them.
    for i in 0..5 {
        unflagged(&trail, i).await;
    }
    eventually(
        "the position to pass them",
        Duration::from_secs(60),
        async || publisher.statuses()[0].position == 6,
    )
    .await;
    eventually("the cursor", Duration::from_secs(60), async || {
        trail.store().meta_u64(meta::LIFECYCLE_CURSOR).unwrap() == 6
    })
    .await;
    create_source(&trail, ctx("a"), "s2", "x").await.unwrap();
    eventually("the next event", Duration::from_secs(60), async || {
        publisher.statuses()[0].position == 7
    })
    .await;
    let seqs: Vec<String> = read_lines(&events)
        .iter()
        .map(|l| l["sequence"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(seqs, vec![format!("{:020}", 1), format!("{:020}", 7)]);
    publisher.stop().await;
    trail.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entity_whose_row_is_gone_is_passed_over_and_the_rows_after_it_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail_with_sinks(dir.path(), &["file"]);
    for i in 1..=8 {
        create_source(&trail, ctx("a"), &format!("s{i}"), "x")
            .await
            .unwrap();
    }
    let at = ankusa::audit::get(trail.store(), 4).unwrap().unwrap().at;
    trail.shutdown().await;
    drop(trail);
    // Damage, with the node stopped: row 4 gone, its outbox entity left behind.
    {
        let db = open_stopped(dir.path());
        let audit = db.cf_handle(Cf::Audit.name()).unwrap();
        db.delete_cf(audit, keys::row_key(4, at)).unwrap();
        assert!(db.get_cf(audit, keys::outbox_key(4)).unwrap().is_some());
    }
    let trail = open_trail_with_sinks(dir.path(), &["file"]);
    let events = dir.path().join("events.jsonl");
    // Pages of three: the second holds the damaged entity and two events.
    let options = PublisherOptions {
        batch: 3,
        ..options()
    };
    let publisher = Running::start(&trail, vec![file_sink(&events)], options).await;
    eventually("every event", Duration::from_secs(60), async || {
        publisher.statuses()[0].position == 8
    })
    .await;
    let seqs: Vec<u64> = read_lines(&events)
        .iter()
        .map(|l| l["sequence"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(seqs, vec![1, 2, 3, 5, 6, 7, 8]);
    publisher.stop().await;
    trail.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_publisher_resumes_after_its_persisted_position() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail_with_sinks(dir.path(), &["file"]);
    let events = dir.path().join("events.jsonl");
    for i in 0..20 {
        create_source(&trail, ctx("a"), &format!("s{i}"), "x")
            .await
            .unwrap();
    }
    let p = Running::start(&trail, vec![file_sink(&events)], options()).await;
    eventually("20 events", Duration::from_secs(60), async || {
        p.statuses()[0].position == 20
    })
    .await;
    p.stop().await;
    for i in 20..30 {
        create_source(&trail, ctx("a"), &format!("s{i}"), "x")
            .await
            .unwrap();
    }
    let p = Running::start(&trail, vec![file_sink(&events)], options()).await;
    assert_eq!(
        p.statuses()[0].position,
        20,
        "the position came back from the store"
    );
    eventually("30 events", Duration::from_secs(60), async || {
        p.statuses()[0].position == 30
    })
    .await;
    let seqs: Vec<String> = read_lines(&events)
        .iter()
        .map(|l| l["sequence"].as_str().unwrap().to_owned())
        .collect();
    let expected: Vec<String> = (1..=30).map(|s| format!("{s:020}")).collect();
    assert_eq!(
        seqs, expected,
        "no event lost or repeated across a clean restart"
    );
    p.stop().await;
    trail.shutdown().await;
}

pub(crate) fn webhook_sink(url: &str) -> SinkSpec {
    let mut config = WebhookConfig::new(url, vec![SECRET.into()]);
    config.retry = fast_retry();
    config.timeout = Duration::from_secs(5);
    SinkSpec {
        name: "hook".into(),
        sink: Arc::new(WebhookSink::new(config).unwrap()),
        retry: fast_retry(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_that_is_down_holds_the_cursor_but_not_the_other_sink() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail_with_sinks(dir.path(), &["file", "hook"]);
    let events = dir.path().join("events.jsonl");
    let receiver = Receiver::answering(503).await;
    let url = receiver.url();
    // 10 subjects, 4 changes each: 10 partition keys.
    for i in 0..10 {
        create_source(&trail, ctx("a"), &format!("s{i}"), "x")
            .await
            .unwrap();
    }
    for round in 0..3 {
        for i in 0..10 {
            update_secret(&trail, ctx("a"), &format!("s{i}"), &format!("x{round}"))
                .await
                .unwrap();
        }
    }
    let p = Running::start(
        &trail,
        vec![file_sink(&events), webhook_sink(&url)],
        options(),
    )
    .await;
    eventually("the file sink", Duration::from_secs(60), async || {
        p.statuses()[0].position == 40
    })
    .await;
    eventually(
        "the webhook sink to retry",
        Duration::from_secs(60),
        async || p.statuses()[1].retries >= 3,
    )
    .await;
    assert_eq!(p.statuses()[1].position, 0);
    assert_eq!(p.statuses()[1].state, SinkState::Retrying);
    assert_eq!(
        trail.store().meta_u64(meta::LIFECYCLE_CURSOR).unwrap(),
        0,
        "the cursor waits for the slow sink"
    );
    assert_eq!(
        trail
            .store()
            .meta_u64(&meta::sink_position("file"))
            .unwrap(),
        40
    );
    // It comes back: it catches up in order, and the cursor follows.
    receiver.answer(200);
    eventually(
        "the webhook sink to catch up",
        Duration::from_secs(60),
        async || p.statuses()[1].position == 40,
    )
    .await;
    // Every event arrives; one whose batch partly failed while the receiver came back is
    // delivered again (at least once), with the same id. Deduplicated by id (first arrival),
    // the events of each partition key are in seq order (subject s<i> has seqs i+1, i+11,
    // i+21, i+31); keys may interleave.
    let mut seen = std::collections::HashSet::new();
    let arrived: Vec<u64> = receiver
        .accepted()
        .iter()
        .filter(|(id, _)| seen.insert(id.clone()))
        .map(|(_, seq)| seq.parse().unwrap())
        .collect();
    let mut sorted = arrived.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (1..=40).collect::<Vec<_>>());
    for key in 1..=10u64 {
        let of_key: Vec<u64> = arrived
            .iter()
            .copied()
            .filter(|s| (s - 1) % 10 == key - 1)
            .collect();
        assert_eq!(
            of_key,
            vec![key, key + 10, key + 20, key + 30],
            "per-key order"
        );
    }
    eventually("the cursor", Duration::from_secs(60), async || {
        trail.store().meta_u64(meta::LIFECYCLE_CURSOR).unwrap() == 40
    })
    .await;
    let incarnation = trail.history().of(1).id;
    for (id, seq) in receiver.accepted().iter() {
        assert_eq!(
            *id,
            event_id(incarnation, seq.parse().unwrap()).to_string(),
            "every event id is the one its seq is published under"
        );
    }
    p.stop().await;
    trail.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_refused_for_good_is_dead_lettered_and_the_sink_moves_on() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail_with_sinks(dir.path(), &["hook"]);
    let receiver = Receiver::answering(400).await;
    let url = receiver.url();
    create_source(&trail, ctx("a"), "s1", "x").await.unwrap();
    let p = Running::start(&trail, vec![webhook_sink(&url)], options()).await;
    eventually("the dead letter", Duration::from_secs(60), async || {
        p.statuses()[0].position == 1
    })
    .await;
    assert_eq!(p.statuses()[0].dead_lettered, 1);
    let letter = trail
        .store()
        .get(Cf::DeadLetters, &keys::dead_letter_key("hook", 1))
        .unwrap()
        .expect("dead letter");
    let letter: Value = serde_json::from_slice(&letter).unwrap();
    assert_eq!(letter["seq"], 1);
    assert_eq!(
        letter["event"]["id"],
        event_id(trail.history().of(1).id, 1).to_string()
    );
    receiver.answer(200);
    create_source(&trail, ctx("a"), "s2", "x").await.unwrap();
    eventually("the next event", Duration::from_secs(60), async || {
        p.statuses()[0].position == 2
    })
    .await;
    assert_eq!(receiver.sequences(), vec![2]);
    // The operator redrives it: same id, and the dead letter is gone.
    let listed = dead_letters::list(trail.store(), "hook", 0, 10).unwrap();
    assert_eq!(listed.iter().map(|l| l.seq).collect::<Vec<_>>(), vec![1]);
    let report = dead_letters::redrive(
        &trail,
        ctx("ops"),
        &p.letter_count("hook").unwrap(),
        &*p.sink("hook").unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(
        report,
        dead_letters::Redriven {
            delivered: 1,
            remaining: 0,
            stopped: None,
        }
    );
    assert_eq!(receiver.sequences(), vec![2, 1]);
    let ids = receiver.ids();
    assert_eq!(ids[1], event_id(trail.history().of(1).id, 1).to_string());
    assert!(dead_letters::list(trail.store(), "hook", 0, 10)
        .unwrap()
        .is_empty());
    // The redrive left its row; dropping a letter that is not there writes none.
    let rows = all_rows(trail.store());
    let last = rows.last().unwrap();
    assert_eq!(
        (
            last.action.as_str(),
            last.resource.as_str(),
            last.actor.as_str()
        ),
        ("dead_letter.redrive", "sinks/hook/dead-letters/1", "ops")
    );
    let err = dead_letters::drop_letter(&trail, ctx("ops"), &p.letter_count("hook").unwrap(), 1)
        .await
        .unwrap_err();
    assert_eq!(err, CommitError::Refused(dead_letters::NoSuchLetter));
    assert_eq!(all_rows(trail.store()).len(), rows.len());
    p.stop().await;
    trail.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gone_destination_disables_the_sink_at_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail_with_sinks(dir.path(), &["hook"]);
    let _receiver = Receiver::answering(410).await;
    let url = _receiver.url();
    create_source(&trail, ctx("a"), "s1", "x").await.unwrap();
    let p = Running::start(&trail, vec![webhook_sink(&url)], options()).await;
    eventually(
        "the sink to be disabled",
        Duration::from_secs(60),
        async || p.statuses()[0].state == SinkState::Disabled,
    )
    .await;
    assert_eq!(p.statuses()[0].position, 0);
    p.stop().await;
    trail.shutdown().await;
}

/// A sink whose attempts stay in flight until the test releases them, with outcomes the test
/// scripts per attempt, so the lane's window can be watched step by step.
struct Scripted {
    /// Whether its attempts let the next one overtake them.
    open: bool,
    /// The seqs of every attempt submitted, in order.
    attempts: std::sync::Mutex<Vec<Vec<u64>>>,
    /// One permit finishes one attempt.
    releases: Arc<tokio::sync::Semaphore>,
    /// The outcome of the event with seq `.1` in attempt `.0` (0-based).
    script: fn(usize, u64) -> Outcome,
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
        let attempt = {
            let mut attempts = self.attempts.lock().unwrap();
            attempts.push(seqs.clone());
            attempts.len() - 1
        };
        let (releases, script) = (self.releases.clone(), self.script);
        Submitted {
            open: self.open,
            outcomes: Box::pin(async move {
                releases.acquire().await.unwrap().forget();
                seqs.iter().map(|seq| script(attempt, *seq)).collect()
            }),
        }
    }

    async fn healthcheck(&self) -> Result<(), SinkError> {
        Ok(())
    }
}

impl Scripted {
    fn attempts(&self) -> Vec<Vec<u64>> {
        self.attempts.lock().unwrap().clone()
    }
}

async fn flagged_rows(trail: &Trail, n: usize) {
    for i in 0..n {
        create_source(trail, ctx("a"), &format!("s{i}"), "hunter2")
            .await
            .unwrap();
    }
}

fn scripted(open: bool, script: fn(usize, u64) -> Outcome) -> Arc<Scripted> {
    Arc::new(Scripted {
        open,
        attempts: Default::default(),
        releases: Arc::new(tokio::sync::Semaphore::new(0)),
        script,
    })
}

fn windowed(sink: Arc<Scripted>) -> (Vec<SinkSpec>, PublisherOptions) {
    let spec = SinkSpec {
        name: "scripted".into(),
        sink,
        retry: fast_retry(),
    };
    let options = PublisherOptions {
        batch: 10,
        in_flight: 3,
        ..options()
    };
    (vec![spec], options)
}

/// With a sink that keeps order across attempts, the lane has up to `in_flight` of them under
/// way before the first is settled; when the oldest fails part-way, the position stops at the
/// failure, what the later attempts delivered is ignored, and the lane resends from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_overlap_up_to_the_window_and_a_failure_resends_from_the_position() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail_with_sinks(dir.path(), &["scripted"]);
    flagged_rows(&trail, 40).await;
    // The first attempt fails at seq 5; every other event is delivered.
    let sink = scripted(true, |attempt, seq| match (attempt, seq) {
        (0, s) if s >= 5 => Outcome::Retry {
            after: None,
            reason: "scripted".into(),
        },
        _ => Outcome::Delivered,
    });
    let (specs, options) = windowed(sink.clone());
    let publisher = Running::start(&trail, specs, options).await;
    eventually(
        "three attempts in flight",
        Duration::from_secs(60),
        async || sink.attempts().len() == 3,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let window: Vec<Vec<u64>> = vec![(1..=10).collect(), (11..=20).collect(), (21..=30).collect()];
    assert_eq!(
        sink.attempts(),
        window,
        "no fourth attempt while three are in flight"
    );
    assert_eq!(publisher.statuses()[0].position, 0, "nothing settled yet");

    // Finish the first attempt (and, when the lane abandons them, the two after it).
    sink.releases.add_permits(3);
    // The resend is itself a window of three, from the failure on.
    eventually("the resend", Duration::from_secs(60), async || {
        sink.attempts().len() == 6
    })
    .await;
    assert_eq!(sink.attempts()[3], (5..=14).collect::<Vec<u64>>());
    assert_eq!(sink.attempts()[5], (25..=34).collect::<Vec<u64>>());
    // The position write overlaps the resend; nothing after the failure is settled.
    eventually(
        "the position at the failure",
        Duration::from_secs(60),
        async || publisher.statuses()[0].position == 4,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        publisher.statuses()[0].position,
        4,
        "only up to the failure"
    );

    sink.releases.add_permits(1_000);
    eventually("everything", Duration::from_secs(60), async || {
        publisher.statuses()[0].position == 40
    })
    .await;
    let attempts = sink.attempts();
    let resent: Vec<u64> = attempts[3..].iter().flatten().copied().collect();
    assert_eq!(
        resent,
        (5..=40).collect::<Vec<u64>>(),
        "in order, from the failure"
    );
    publisher.stop().await;
    trail.shutdown().await;
}

/// A sink that does not keep order across attempts (the default `submit`) has one at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_attempt_is_settled_before_the_next_is_submitted() {
    let dir = tempfile::tempdir().unwrap();
    let trail = open_trail_with_sinks(dir.path(), &["scripted"]);
    flagged_rows(&trail, 25).await;
    let sink = scripted(false, |_, _| Outcome::Delivered);
    let (specs, options) = windowed(sink.clone());
    let publisher = Running::start(&trail, specs, options).await;
    eventually("the first attempt", Duration::from_secs(60), async || {
        sink.attempts().len() == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(sink.attempts().len(), 1, "one at a time");
    sink.releases.add_permits(1);
    eventually("the second attempt", Duration::from_secs(60), async || {
        sink.attempts().len() == 2
    })
    .await;
    // The position write of the first overlaps the second attempt.
    eventually("the first settled", Duration::from_secs(60), async || {
        publisher.statuses()[0].position == 10
    })
    .await;
    sink.releases.add_permits(1_000);
    eventually("everything", Duration::from_secs(60), async || {
        publisher.statuses()[0].position == 25
    })
    .await;
    assert_eq!(sink.attempts().len(), 3);
    publisher.stop().await;
    trail.shutdown().await;
}
