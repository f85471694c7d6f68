//! `ankusa follow kafka` against a real broker (tansu) fed by the real Kafka sink (binary
//! mode) and tombstones: the binary is killed with -9 while it reads, its file then holds
//! exactly the records before its offsets; the library's follower resumes from that file and
//! ends on the exact replica with every partition read to its end.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use ankusa::replica::kafka::{self, KafkaOptions};
use ankusa::replica::{file, Metrics, Replica};
use ankusa_sinks::test_support::Broker;
use ankusa_sinks::{KafkaConfig, KafkaSink, Outcome, Sink};
use cloudevents::binding::rdkafka::MessageExt;
use cloudevents::Event;
use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use serde_json::json;

use super::events::*;
use crate::support::eventually;
use crate::support::kafka::kafka_reader;

const TOPIC: &str = "follow";
const PARTITIONS: i32 = 3;
const GROUP: &str = "replica-a";
/// Updates of one more route, so that the follower is still reading when it is killed.
const FILLER: u64 = 3000;
const FILLER_STORE: &str = "redis:other";

fn filler() -> Vec<Event> {
    (1..=FILLER)
        .map(|v| {
            let entity = route("f", &format!("http://f.example/{v}"));
            subject(100 + v, "updated", "acme/routes/f", FILLER_STORE, v, entity)
        })
        .collect()
}

/// Send `events` through the Kafka sink, every one delivered.
async fn produce(broker: &Broker, events: &[Event]) {
    let mut config = KafkaConfig::new(broker.address.clone(), TOPIC);
    config.message_timeout = Duration::from_secs(30);
    let sink = KafkaSink::new(config).unwrap();
    for chunk in deliveries(events).chunks(500) {
        let outcomes = sink.send(chunk).await;
        assert!(
            outcomes.iter().all(|o| *o == Outcome::Delivered),
            "{outcomes:?}"
        );
    }
}

/// A null-valued record with `key` (what `tombstones = true` writes after a delete).
async fn tombstone(broker: &Broker, key: &str) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .create()
        .unwrap();
    let record = FutureRecord::<str, [u8]>::to(TOPIC).key(key);
    producer
        .send(record, Duration::from_secs(30))
        .await
        .unwrap();
}

fn spawn(broker: &Broker, out: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .args([
            "follow",
            "kafka",
            "--brokers",
            &broker.address,
            "--topic",
            TOPIC,
        ])
        .args([
            "--group",
            GROUP,
            "--batch-events",
            "10",
            "--batch-ms",
            "50",
            "--out",
        ])
        .arg(out)
        .env_remove("RUST_LOG")
        .spawn()
        .unwrap()
}

/// The replica of every record before `next` (per partition), by the library's rule.
async fn replica_before(broker: &Broker, next: &BTreeMap<i32, i64>, total: usize) -> Replica {
    let reader = kafka_reader(&broker.address, TOPIC, PARTITIONS);
    let mut replica = Replica::default();
    for _ in 0..total {
        let m = tokio::time::timeout(Duration::from_secs(30), reader.recv())
            .await
            .unwrap()
            .unwrap();
        if m.offset() < next.get(&m.partition()).copied().unwrap_or(0) && m.payload().is_some() {
            replica.apply_event(&m.to_event().unwrap()).unwrap();
        }
    }
    replica
}

/// Per partition, the offset after its last record, read from the records themselves:
/// tansu's ListOffsets answers the base offset of the last batch + 1, not the end.
async fn ends(broker: &Broker, total: usize) -> BTreeMap<i32, i64> {
    let reader = kafka_reader(&broker.address, TOPIC, PARTITIONS);
    let mut ends = BTreeMap::new();
    for _ in 0..total {
        let m = tokio::time::timeout(Duration::from_secs(30), reader.recv())
            .await
            .unwrap()
            .unwrap();
        let end = ends.entry(m.partition()).or_insert(0);
        *end = (*end).max(m.offset() + 1);
    }
    ends
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_with_9_mid_way_then_resumed_the_replica_is_exact() {
    let broker = Broker::start();
    broker.create_topic(TOPIC, PARTITIONS).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("replica.json");
    let events = scenario();
    let first: Vec<Event> = events[..9].iter().cloned().chain(filler()).collect();
    produce(&broker, &first).await;

    let mut child = spawn(&broker, &out);
    eventually(
        "a first replica file write",
        Duration::from_secs(60),
        async || {
            let progress = file::load(&out)
                .ok()
                .flatten()
                .and_then(|f| f.progress.kafka);
            progress.is_some_and(|p| !p.next.is_empty())
        },
    )
    .await;
    child.kill().unwrap(); // SIGKILL, while it reads
    child.wait().unwrap();
    let killed = file::load(&out).unwrap().unwrap();
    let next = killed.progress.kafka.clone().unwrap().next;
    let read: i64 = next.values().sum();
    assert!(read > 0, "{next:?}");
    // What the file holds is exactly the records before its offsets: nothing lost, nothing
    // ahead of them.
    assert_eq!(
        killed.replica,
        replica_before(&broker, &next, first.len()).await
    );

    produce(&broker, &events[9..]).await;
    tombstone(&broker, "acme/routes/r2").await;
    tombstone(&broker, "acme/routes/r3").await;
    let options = caught_up(&broker.address, &out);
    let metrics = Metrics::new();
    let caught_up = kafka::follow(options, metrics.clone(), std::future::pending());
    tokio::time::timeout(Duration::from_secs(120), caught_up)
        .await
        .unwrap()
        .unwrap();

    let resumed = file::load(&out).unwrap().unwrap();
    let mut expected = scenario_replica();
    expected["subjects"][FILLER_STORE] = json!({"acme/routes/f": {
        "kind": "route",
        "version": format!("{FILLER:020}"),
        "entity": route("f", &format!("http://f.example/{FILLER}")),
    }});
    assert_eq!(serde_json::to_value(&resumed.replica).unwrap(), expected);
    let progress = resumed.progress.kafka.unwrap();
    assert_eq!(progress.topic, TOPIC);
    let total = (first.len() + events.len() - 9 + 2) as i64;
    assert_eq!(
        progress.next,
        ends(&broker, total as usize).await,
        "every partition read to its end"
    );
    assert_eq!(progress.next.values().sum::<i64>(), total);
    // Every record after the file's offsets was read (tansu fetches some again: those are
    // stale by the rule, and the position never moves back).
    let read_after: u64 = ["applied", "stale", "ignored", "marker", "tombstone"]
        .iter()
        .map(|o| metrics.count(o))
        .sum();
    assert!(
        read_after as i64 >= total - read,
        "{read_after} < {total} - {read}"
    );
    assert!(metrics.count("tombstone") >= 2);
    assert_eq!(metrics.count("invalid"), 0);
    assert_eq!(
        committed(&broker),
        progress.next,
        "the group's offsets, for tooling"
    );

    // The binary again, on the caught-up file: it takes a new change, and SIGTERM writes
    // the replica and exits cleanly.
    let mut child = spawn(&broker, &out);
    let update = route("r1", "http://e.example/1");
    produce(
        &broker,
        &[subject(
            16,
            "updated",
            "acme/routes/r1",
            FLEET,
            12,
            update.clone(),
        )],
    )
    .await;
    eventually(
        "the new change in the file",
        Duration::from_secs(60),
        async || {
            let file = file::load(&out).ok().flatten();
            let r1 = file.and_then(|f| {
                f.replica
                    .subjects
                    .get(FLEET)?
                    .get("acme/routes/r1")
                    .cloned()
            });
            r1.is_some_and(|e| e.entity.as_ref() == Some(&update))
        },
    )
    .await;
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    assert!(child.wait().unwrap().success(), "SIGTERM: a clean exit");
    let last = file::load(&out).unwrap().unwrap();
    assert_eq!(
        last.progress.kafka.unwrap().next.values().sum::<i64>(),
        total + 1
    );
}

/// The offsets committed to [`GROUP`].
fn committed(broker: &Broker) -> BTreeMap<i32, i64> {
    let consumer: rdkafka::consumer::BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("group.id", GROUP)
        .create()
        .unwrap();
    let mut list = rdkafka::TopicPartitionList::new();
    for p in 0..PARTITIONS {
        list.add_partition(TOPIC, p);
    }
    let offsets = consumer
        .committed_offsets(list, Duration::from_secs(10))
        .unwrap();
    offsets
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            rdkafka::Offset::Offset(o) => Some((e.partition(), o)),
            _ => None,
        })
        .collect()
}

/// The follower's apply rate beside a bare consumer reading the same records (the issue's
/// benchmark figure; run by hand, in release: `cargo nextest run --release --all-features
/// --test it -E 'test(follow::kafka::apply_rate)' --run-ignored only`). `FOLLOW_RATE_EVENTS`
/// sets the number of events (default 50 000), over 1000 routes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, run by hand"]
async fn apply_rate_beside_a_bare_consumer() {
    let n: u64 = std::env::var("FOLLOW_RATE_EVENTS").map_or(50_000, |v| v.parse().unwrap());
    let broker = Broker::start();
    broker.create_topic(TOPIC, PARTITIONS).await;
    let events: Vec<Event> = (1..=n)
        .map(|v| {
            let id = format!("r{}", v % 1000);
            let entity = route(&id, &format!("http://f.example/{v}"));
            subject(v, "updated", &format!("acme/routes/{id}"), FLEET, v, entity)
        })
        .collect();
    produce(&broker, &events).await;

    let started = std::time::Instant::now();
    let reader = kafka_reader(&broker.address, TOPIC, PARTITIONS);
    for _ in 0..n {
        let m = reader.recv().await.unwrap();
        std::hint::black_box(m.payload());
    }
    let bare = started.elapsed();

    let dir = tempfile::tempdir().unwrap();
    let options = KafkaOptions {
        brokers: broker.address.clone(),
        topic: TOPIC.into(),
        group: GROUP.into(),
        out: dir.path().join("replica.json"),
        batch_events: 5000,
        batch_interval: Duration::from_millis(1000),
        until_caught_up: true,
        start: Default::default(),
    };
    let metrics = Metrics::new();
    let started = std::time::Instant::now();
    kafka::follow(options, metrics.clone(), std::future::pending())
        .await
        .unwrap();
    // The follower waits one idle batch interval to be sure it is caught up: not work.
    let follow = started
        .elapsed()
        .saturating_sub(Duration::from_millis(1000));
    assert_eq!(metrics.count("applied"), n);
    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    eprintln!(
        "events {n}: bare consumer {:.0}/s, ankusa follow {:.0}/s, ratio {:.2}, {} file writes",
        rate(bare),
        rate(follow),
        bare.as_secs_f64() / follow.as_secs_f64(),
        metrics.writes.get()
    );
}

/// A replica file that resumes partition 0 of [`TOPIC`] at `next` (and has read nothing).
fn resuming_at(out: &Path, next: i64) {
    let mut saved = file::ReplicaFile::default();
    saved.progress.kafka = Some(file::KafkaProgress {
        topic: TOPIC.into(),
        next: BTreeMap::from([(0, next)]),
    });
    file::write(out, &file::encode(&saved)).unwrap();
}

/// A library follower of [`TOPIC`] on `bootstrap` into `out` that stops once caught up.
fn caught_up(bootstrap: &str, out: &Path) -> KafkaOptions {
    KafkaOptions {
        brokers: bootstrap.to_owned(),
        topic: TOPIC.into(),
        group: GROUP.into(),
        out: out.to_owned(),
        batch_events: 100,
        batch_interval: Duration::from_millis(50),
        until_caught_up: true,
        start: Default::default(),
    }
}

/// The follower's error against `bootstrap` resuming from `out`.
async fn follow_error(bootstrap: &str, out: &Path) -> String {
    let followed = kafka::follow(
        caught_up(bootstrap, out),
        Metrics::new(),
        std::future::pending(),
    );
    let ended = tokio::time::timeout(Duration::from_secs(60), followed).await;
    ended.expect("the follower stops").unwrap_err().to_string()
}

/// A follower that cannot resume where its replica is (records deleted by retention before it
/// read them) stops with an error naming the gap, instead of jumping to the earliest record
/// and looking healthy. (rdkafka's in-process MockCluster: it keeps 5 MB a partition and
/// deletes the oldest records past that, as a broker's size retention does; tansu has none.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_position_the_topic_no_longer_holds_stops_the_follower_naming_the_gap() {
    use rdkafka::consumer::BaseConsumer;
    use rdkafka::mocking::MockCluster;

    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, 1, 1).unwrap();
    let bootstrap = cluster.bootstrap_servers();
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("linger.ms", "0")
        .create()
        .unwrap();
    // 10 events, then 8 MB more: the oldest records go.
    let filler = vec![b'x'; 100 << 10];
    for i in 0..90 {
        let record = FutureRecord::<str, [u8]>::to(TOPIC).key("k");
        let value = match scenario().get(i) {
            Some(event) if i < 10 => {
                serde_json::to_vec(&ankusa_sinks::structured_value(event).unwrap()).unwrap()
            }
            _ => filler.clone(),
        };
        let record = record.payload(&value);
        producer
            .send(record, Duration::from_secs(30))
            .await
            .unwrap();
    }
    let watermarks = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create::<BaseConsumer>()
        .unwrap()
        .fetch_watermarks(TOPIC, 0, Duration::from_secs(10))
        .unwrap();
    let (oldest, end) = watermarks;
    assert!(
        oldest > 10 && end == 90,
        "retention deleted the events: {watermarks:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("replica.json");
    // The replica had read two records when it stopped; retention passed it meanwhile.
    resuming_at(&out, 2);
    let error = follow_error(&bootstrap, &out).await;
    assert!(
        error.contains(&format!(
            "partition 0 of follow: the replica resumes at offset 2, but the oldest record the \
             topic holds is at {oldest}"
        )),
        "{error}"
    );
    assert!(
        error.contains("Start a new replica from a snapshot"),
        "{error}"
    );
    // The file is as it was: nothing read, nothing skipped.
    let kept = file::load(&out).unwrap().unwrap();
    assert_eq!(kept.progress.kafka.unwrap().next, BTreeMap::from([(0, 2)]));
    assert_eq!(kept.replica, Replica::default());
    // Resumed where the topic starts, it reads on to the end.
    resuming_at(&out, oldest);
    let followed = kafka::follow(
        caught_up(&bootstrap, &out),
        Metrics::new(),
        std::future::pending(),
    );
    tokio::time::timeout(Duration::from_secs(60), followed)
        .await
        .unwrap()
        .unwrap();
    let read = file::load(&out).unwrap().unwrap();
    assert_eq!(
        read.progress.kafka.unwrap().next,
        BTreeMap::from([(0, end)])
    );
}
