//! Publisher throughput, latency and memory, beside bare baselines, in one run.
//!
//! - Kafka: drain a backlog of `ANKUSA_BENCH_EVENTS` (default 100,000) flagged rows through the
//!   Kafka sink to rdkafka's in-process MockCluster, beside a bare rdkafka producer (same
//!   settings: idempotent, acks=all, linger.ms=1) sending the same records, pre-encoded, and awaiting every
//!   delivery report.
//! - Kafka on a real broker: the same against tansu (a Kafka-compatible broker, started here on a
//!   loopback port with in-memory storage; `scripts/tansu` installs it).
//! - Webhook: drain 20,000 events to an axum receiver on loopback, beside a bare reqwest loop
//!   sending the same requests (same headers and bodies, pre-built) with the same concurrency.
//! - Latency: commit-to-confirmed (the sink's persisted position covers the row) p50/p99 at a
//!   steady 1,000 changes/s for 5 s, Kafka MockCluster sink.
//! - Memory: peak RSS of a process draining a 500,000-event backlog to a file sink (the store
//!   is filled by another process first, so only the drain counts), and its RSS once the store
//!   is open, before the drain (with the part of it that is mapped code).
//!
//! Throughput rounds also print the process's CPU time per event, ours beside the baseline's,
//! and the median of their ratio: on a busy two-core machine, where the rates swing with the
//! neighbours, it is the steadier figure, and the ratio the rates tend to when both cores are
//! busy (a real broker's own CPU, in another process, is not in it).
//!
//! Run with `cargo bench --bench publish` (release). `ANKUSA_BENCH_EVENTS` scales the backlog;
//! `ANKUSA_BENCH_BATCH` sets the publisher's batch (default 1000); `ANKUSA_BENCH_IN_FLIGHT` its attempts in flight (default 4); `ANKUSA_BENCH_ONLY` picks
//! parts (`kafka,broker,webhook,latency,rss`; all by default).

#[path = "../tests/common/broker.rs"]
mod broker;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ankusa::audit::{Change, CommitError, Context, Limits, SystemClock, Trail, TrailOptions};
use ankusa::lifecycle::{outbox, Publisher, PublisherOptions, SinkSpec};
use ankusa::store::{Cf, Store};
use ankusa_sinks::{
    FileConfig, FileSink, KafkaConfig, KafkaSink, RetryPolicy, Sink, WebhookConfig, WebhookSink,
};
use cloudevents::binding::rdkafka::{FutureRecordExt, MessageRecord};
use futures::StreamExt;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const TOPIC: &str = "lifecycle";
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn main() {
    // As the node does, so that the memory figures are the node's.
    ankusa::purge_idle_memory();
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--fill") {
        return fill_process(&args[i + 1], args[i + 2].parse().unwrap());
    }
    if let Some(i) = args.iter().position(|a| a == "--drain") {
        return drain_process(&args[i + 1], args[i + 2].parse().unwrap());
    }
    if let Some(i) = args.iter().position(|a| a == "--drain-kafka") {
        return drain_kafka_process(&args[i + 1]);
    }
    if let Some(i) = args.iter().position(|a| a == "--read") {
        return read_process(&args[i + 1]);
    }
    if let Some(i) = args.iter().position(|a| a == "--drain-webhook") {
        return drain_webhook_process(&args[i + 1]);
    }
    if let Some(i) = args.iter().position(|a| a == "--bare-webhook") {
        return bare_webhook_process(&args[i + 1]);
    }
    let events: u64 = std::env::var("ANKUSA_BENCH_EVENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let runtime = runtime();
    println!("publisher benchmark ({events} events for Kafka, 20000 for webhooks)");
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, 8, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    runtime.block_on(async {
        if part("kafka") {
            report("kafka (mock)", "bare producer", &kafka(&brokers, events).await);
        }
        if part("broker") && !broker::installed() {
            println!("kafka (tansu) skipped: tansu is not installed (scripts/tansu installs it)");
        } else if part("broker") {
            let broker = broker::Broker::start();
            broker.create_topic(TOPIC, 8).await;
            report("kafka (tansu)", "bare producer", &kafka(&broker.address, events).await);
        }
        if part("webhook") {
            report("webhook", "bare reqwest ", &webhook(20_000).await);
        }
        if part("latency") {
            let (p50, p99, max) = latency(&brokers).await;
            println!("latency commit->confirmed at 1000 changes/s: p50 {p50:.2} ms  p99 {p99:.2} ms  max {max:.2} ms");
        }
    });
    if part("rss") {
        let rss = rss_drain(500_000);
        let mib = |kib: u64| kib as f64 / 1024.0;
        println!(
            "peak RSS draining 500000 events to a file sink: {:.1} MiB (before the drain, store open: {:.1} MiB, of which {:.1} MiB mapped files)",
            mib(rss.peak),
            mib(rss.before),
            mib(rss.before_files)
        );
    }
}

/// A multi-threaded runtime with every driver on.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The publisher's attempts in flight: `ANKUSA_BENCH_IN_FLIGHT`, the default config's 4 when
/// unset.
fn in_flight() -> usize {
    std::env::var("ANKUSA_BENCH_IN_FLIGHT")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(4)
}

/// Whether `name` is one of the parts to run: `ANKUSA_BENCH_ONLY` (comma-separated: kafka,
/// broker, webhook, latency, rss), all of them when unset.
fn part(name: &str) -> bool {
    std::env::var("ANKUSA_BENCH_ONLY")
        .map_or(true, |only| only.split(',').any(|p| p.trim() == name))
}

/// A trail on a fresh store with `sinks` configured.
fn trail(dir: &std::path::Path, sinks: &[&str]) -> Trail {
    let store = Store::open(dir).unwrap();
    let options = TrailOptions {
        sinks: sinks.iter().map(|s| s.to_string()).collect(),
        // The backlogs here are built on purpose: lift the outbox ceiling above them.
        limits: Limits {
            outbox_max_backlog: 10_000_000,
            ..Limits::default()
        },
        ..TrailOptions::default()
    };
    Trail::start(store, options, Arc::new(SystemClock)).unwrap()
}

async fn commit_one(trail: &Trail, key: String) -> u64 {
    trail
        .commit(Context::new("bench", None, None), move |tx| {
            let subject = json!({"id": key, "tenant": "t1", "kind": "http", "revision": 1,
                                 "config": {"url": "https://example.invalid/ingest", "timeout_ms": 5000}});
            tx.put_json(Cf::Sources, format!("t1/{key}").into_bytes(), &subject)?;
            let change = Change::new("source.create", format!("sources/{key}"))
                .tenant("t1")
                .states(None, Some(subject.clone()))
                .revision(1)
                .entity(subject);
            Ok::<_, CommitError<()>>((change, ()))
        })
        .await
        .unwrap()
        .seq
}

/// Commit `n` changes from 64 concurrent committers.
async fn fill(trail: &Trail, n: u64) {
    let per = n.div_ceil(64);
    let mut tasks = vec![];
    for c in 0..64u64 {
        let trail = trail.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                if c * per + i < n {
                    commit_one(&trail, format!("s{c}-{i}")).await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// Drain the whole backlog of `trail` through `sink`: its rate and CPU time per event.
async fn drain(trail: &Trail, sink: Arc<dyn Sink>, name: &str) -> Run {
    let last = *trail.committed().borrow();
    let stop = CancellationToken::new();
    let spec = SinkSpec {
        name: name.into(),
        sink,
        retry: RetryPolicy::default(),
    };
    let options = PublisherOptions {
        source: "urn:ankusa:bench".into(),
        batch: std::env::var("ANKUSA_BENCH_BATCH")
            .ok()
            .and_then(|b| b.parse().ok())
            .unwrap_or(1000),
        idle: Duration::from_millis(50),
        in_flight: in_flight(),
    };
    // Start from a store at rest: the compaction a fill leaves behind is not the publisher's.
    let store = trail.store().clone();
    tokio::task::spawn_blocking(move || store.quiesce())
        .await
        .unwrap()
        .unwrap();
    let clock = Clock::start();
    let publisher = Publisher::start(trail.clone(), vec![spec], options, stop.clone())
        .await
        .unwrap();
    while publisher.statuses()[0].position < last {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let run = clock.stop(last);
    stop.cancel();
    publisher.join().await;
    run
}

/// A timed run: events per second, and the process's CPU time per event (every thread of
/// this process, so on two cores the figure that bounds the rate; a broker in another
/// process is not in it).
#[derive(Debug, Clone, Copy)]
struct Run {
    rate: f64,
    cpu_us: f64,
}

impl Run {
    /// The line a process mode prints: `<what> <rate> ev/s, <cpu> us cpu/ev`.
    fn print(&self, what: &str) {
        println!("{what} {:.0} ev/s, {:.1} us cpu/ev", self.rate, self.cpu_us);
    }
}

/// Wall time and process CPU time from `start` to `stop`.
struct Clock {
    wall: Instant,
    cpu: Duration,
}

impl Clock {
    fn start() -> Clock {
        Clock {
            wall: Instant::now(),
            cpu: process_cpu(),
        }
    }

    fn stop(self, events: u64) -> Run {
        let (wall, cpu) = (self.wall.elapsed(), process_cpu() - self.cpu);
        Run {
            rate: events as f64 / wall.as_secs_f64(),
            cpu_us: cpu.as_secs_f64() * 1e6 / events as f64,
        }
    }
}

/// User and system CPU time of this process so far (`/proc/self/stat`, in 10 ms ticks).
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the command name (which may hold spaces): utime and stime are the 12th
    // and 13th.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// The events of the whole backlog, built exactly as the publisher builds them.
fn events_of(trail: &Trail) -> Vec<ankusa_sinks::Event> {
    let mut events = vec![];
    build_events(trail, 0, usize::MAX, &mut events);
    events
}

/// Read up to `limit` flagged rows after `after` and build their events into `events`, as the
/// publisher's reader does; how far the read went.
fn build_events(
    trail: &Trail,
    after: u64,
    limit: usize,
    events: &mut Vec<ankusa_sinks::Event>,
) -> outbox::Visited {
    outbox::visit(trail.store(), after, limit, |row, entity| {
        events.push(
            ankusa::lifecycle::event::build(&row, entity, trail.history(), "urn:ankusa:bench")
                .unwrap(),
        )
    })
    .unwrap()
}

/// Rounds of each throughput comparison (after a warm-up round): ours then the bare
/// baseline, back to back, so both of a round see the same machine; the median round's ratio
/// is reported.
const ROUNDS: usize = 5;

/// Each round's rates and their ratio, then the median ratio. Beside them, CPU time per
/// event and its ratio (bare over ours): on a busy two-core machine the steadier figure, and
/// the ratio the rates tend to when every core is busy.
fn report(what: &str, baseline: &str, rounds: &[(Run, Run)]) {
    for (i, (ours, bare)) in rounds.iter().enumerate() {
        println!(
            "{what:<13} round {}: ours {:>9.0} ev/s   {baseline} {:>9.0} ev/s   ratio {:.2}   cpu {:.1} vs {:.1} us/ev",
            i + 1,
            ours.rate,
            bare.rate,
            ours.rate / bare.rate,
            ours.cpu_us,
            bare.cpu_us,
        );
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    println!(
        "{what:<13} median ratio {:.2}   cpu per event, bare/ours: median {:.2}",
        median(rounds.iter().map(|(o, b)| o.rate / b.rate).collect()),
        median(rounds.iter().map(|(o, b)| b.cpu_us / o.cpu_us).collect()),
    );
}

/// Sink names of the rounds, a warm-up round first: each drains the whole backlog from
/// position 0.
fn round_sinks(kind: &str) -> Vec<String> {
    (0..=ROUNDS).map(|r| format!("{kind}-{r}")).collect()
}

async fn kafka(brokers: &str, n: u64) -> Vec<(Run, Run)> {
    let dir = tempfile::tempdir().unwrap();
    let names = round_sinks("kafka");
    let trail = trail(
        dir.path(),
        &names.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    fill(&trail, n).await;
    // The bare producer: same settings, the same records pre-encoded, every report awaited.
    let records: Vec<(String, MessageRecord)> = events_of(&trail)
        .into_iter()
        .map(|e| {
            (
                e.extension("partitionkey").unwrap().to_string(),
                MessageRecord::from_event(e).unwrap(),
            )
        })
        .collect();
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("message.timeout.ms", "30000")
        .set("linger.ms", "1")
        .create()
        .unwrap();
    // One sink and one bare producer for every round; the first round warms both up
    // (connections, producer ids, metadata) and is not reported.
    let sink: Arc<dyn Sink> = Arc::new(KafkaSink::new(KafkaConfig::new(brokers, TOPIC)).unwrap());
    let mut rounds = vec![];
    for name in &names {
        let ours = drain(&trail, sink.clone(), name).await;
        let clock = Clock::start();
        // `send` waits while the local queue is full; join_all enqueues in order, then
        // awaits every delivery report.
        let sends = records.iter().map(|(key, record)| {
            let r = FutureRecord::to(TOPIC)
                .message_record(record)
                .key(key.as_str());
            producer.send(r, rdkafka::util::Timeout::Never)
        });
        for report in futures::future::join_all(sends).await {
            report.map_err(|(e, _)| e).unwrap();
        }
        rounds.push((ours, clock.stop(records.len() as u64)));
    }
    trail.shutdown().await;
    rounds.split_off(1)
}

async fn receiver() -> String {
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(|| async { axum::http::StatusCode::NO_CONTENT }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

async fn webhook(n: u64) -> Vec<(Run, Run)> {
    let url = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let names = round_sinks("hook");
    let trail = trail(
        dir.path(),
        &names.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    fill(&trail, n).await;
    let config = WebhookConfig::new(url.clone(), vec![SECRET.into()]);
    let concurrency = config.max_in_flight;
    let bare = BareWebhook::new(&trail, &url);
    // One sink and one client for every round; the first round warms both up and is not
    // reported.
    let sink: Arc<dyn Sink> = Arc::new(WebhookSink::new(config).unwrap());
    let mut rounds = vec![];
    for name in &names {
        let ours = drain(&trail, sink.clone(), name).await;
        rounds.push((ours, bare.send(concurrency).await));
    }
    trail.shutdown().await;
    rounds.split_off(1)
}

/// The webhook baseline: a bare reqwest client sending the requests the sink would send for
/// a trail's events (ce- headers, signature headers, body), built before it is timed.
struct BareWebhook {
    client: reqwest::Client,
    url: reqwest::Url,
    requests: Vec<(reqwest::header::HeaderMap, Vec<u8>)>,
}

impl BareWebhook {
    fn new(trail: &Trail, url: &str) -> BareWebhook {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let requests = events_of(trail)
            .into_iter()
            .map(|e| {
                let req =
                    cloudevents::binding::reqwest::RequestBuilderExt::event(client.post(url), e)
                        .unwrap()
                        .header("webhook-id", "msg_bench")
                        .header("webhook-timestamp", "1700000000")
                        .header(
                            "webhook-signature",
                            "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=",
                        )
                        .build()
                        .unwrap();
                (
                    req.headers().clone(),
                    req.body()
                        .and_then(|b| b.as_bytes())
                        .unwrap_or_default()
                        .to_vec(),
                )
            })
            .collect();
        // Parsed once, as the sink does.
        let url = reqwest::Url::parse(url).unwrap();
        BareWebhook {
            client,
            url,
            requests,
        }
    }

    /// Send every request, `concurrency` at a time, and time it.
    async fn send(&self, concurrency: usize) -> Run {
        let requests = self.requests.clone();
        let clock = Clock::start();
        futures::stream::iter(requests)
            .map(|(headers, body)| {
                let client = self.client.clone();
                let url = self.url.clone();
                async move {
                    client
                        .post(url)
                        .headers(headers)
                        .body(body)
                        .send()
                        .await
                        .unwrap()
                        .status()
                }
            })
            .buffer_unordered(concurrency)
            .for_each(|s| async move { assert!(s.is_success()) })
            .await;
        clock.stop(self.requests.len() as u64)
    }
}

async fn latency(brokers: &str) -> (f64, f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    let trail = trail(dir.path(), &["kafka"]);
    let sink = KafkaSink::new(KafkaConfig::new(brokers, TOPIC)).unwrap();
    let stop = CancellationToken::new();
    let spec = SinkSpec {
        name: "kafka".into(),
        sink: Arc::new(sink),
        retry: RetryPolicy::default(),
    };
    let options = PublisherOptions {
        source: "urn:ankusa:bench".into(),
        batch: 1000,
        idle: Duration::from_secs(1),
        in_flight: in_flight(),
    };
    let publisher = Arc::new(
        Publisher::start(trail.clone(), vec![spec], options, stop.clone())
            .await
            .unwrap(),
    );
    // Warm up the producer's connection.
    commit_one(&trail, "warmup".into()).await;
    while publisher.statuses()[0].position < 1 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (starts_tx, mut starts_rx) = tokio::sync::mpsc::unbounded_channel::<(u64, Instant)>();
    let watcher = {
        let publisher = publisher.clone();
        tokio::spawn(async move {
            let mut latencies = vec![];
            let mut waiting: std::collections::VecDeque<(u64, Instant)> = Default::default();
            loop {
                while let Ok(s) = starts_rx.try_recv() {
                    waiting.push_back(s);
                }
                let position = publisher.statuses()[0].position;
                while waiting.front().is_some_and(|(seq, _)| *seq <= position) {
                    let (_, t) = waiting.pop_front().unwrap();
                    latencies.push(t.elapsed().as_secs_f64() * 1000.0);
                }
                if starts_rx.is_closed() && waiting.is_empty() {
                    return latencies;
                }
                tokio::time::sleep(Duration::from_micros(100)).await;
            }
        })
    };
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    for i in 0..5000 {
        tick.tick().await;
        let (trail, tx) = (trail.clone(), starts_tx.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let seq = commit_one(&trail, format!("l{i}")).await;
            let _ = tx.send((seq, started));
        });
    }
    drop(starts_tx);
    let mut latencies = watcher.await.unwrap();
    stop.cancel();
    publisher.join().await;
    trail.shutdown().await;
    latencies.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    (pct(0.50), pct(0.99), *latencies.last().unwrap())
}

/// The memory of a drain process, KiB: its peak, and its resident set once the store was
/// open but before the drain began (all of it, and the part that is mapped files: code).
struct DrainMemory {
    peak: u64,
    before: u64,
    before_files: u64,
}

/// Fill a store with `n` rows in one process, drain it in another; the drain's memory.
fn rss_drain(n: u64) -> DrainMemory {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let me = std::env::current_exe().unwrap();
    let status = std::process::Command::new(&me)
        .arg("--fill")
        .arg(&store)
        .arg(n.to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let out = std::process::Command::new(&me)
        .arg("--drain")
        .arg(&store)
        .arg(n.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let figures: Vec<u64> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect();
    DrainMemory {
        peak: figures[0],
        before: figures[1],
        before_files: figures[2],
    }
}

/// A `/proc/self/status` figure in KiB (`VmHWM`, `VmRSS`, `RssFile`...).
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| {
            l.strip_prefix(field)
                .is_some_and(|rest| rest.starts_with(':'))
        })
        .unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn fill_process(store: &str, n: u64) {
    let runtime = runtime();
    runtime.block_on(async {
        let trail = trail(std::path::Path::new(store), &["file"]);
        fill(&trail, n).await;
        trail.shutdown().await;
    });
}

fn drain_process(store: &str, n: u64) {
    let runtime = runtime();
    let before = runtime.block_on(async {
        let trail = trail(std::path::Path::new(store), &["file"]);
        let before = (status_kib("VmRSS"), status_kib("RssFile"));
        let path = std::path::Path::new(store).with_extension("jsonl");
        let sink = FileSink::new(FileConfig {
            path,
            retry: RetryPolicy::default(),
        })
        .unwrap();
        drain(&trail, Arc::new(sink), "file").await;
        assert_eq!(*trail.committed().borrow(), n);
        trail.shutdown().await;
        before
    });
    println!("{} {} {}", status_kib("VmHWM"), before.0, before.1);
}

/// Drain a store filled by `--fill` to a Kafka MockCluster and print the rate: the drain
/// alone, in a process of its own, for a profiler.
fn drain_kafka_process(store: &str) {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, 8, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let runtime = runtime();
    runtime.block_on(async {
        let trail = trail(std::path::Path::new(store), &["kafka"]);
        let sink = KafkaSink::new(KafkaConfig::new(&brokers, TOPIC)).unwrap();
        let run = drain(&trail, Arc::new(sink), "kafka").await;
        run.print("kafka drain");
        trail.shutdown().await;
    });
}

/// Read a store filled by `--fill` and build its events, pages of 1000 as the publisher does,
/// on this thread alone, five times; print the fastest pass per event: the publisher's own
/// work per event, apart from any sink.
fn read_process(store: &str) {
    let runtime = runtime();
    runtime.block_on(async {
        let trail = trail(std::path::Path::new(store), &[]);
        trail.store().quiesce().unwrap();
        let mut best = f64::MAX;
        for _ in 0..5 {
            let started = Instant::now();
            let (mut after, mut events) = (0, 0usize);
            loop {
                let mut page = Vec::with_capacity(1000);
                let visited = build_events(&trail, after, 1000, &mut page);
                events += page.len();
                match visited.last {
                    Some(last) if visited.entities == 1000 => after = last,
                    _ => break,
                }
            }
            best = best.min(started.elapsed().as_secs_f64() * 1e6 / events as f64);
        }
        println!("read and build: {best:.2} us per event");
        trail.shutdown().await;
    });
}

/// Drain a store filled by `--fill` to a webhook receiver on loopback and print the rate.
fn drain_webhook_process(store: &str) {
    let runtime = runtime();
    runtime.block_on(async {
        let url = receiver().await;
        let trail = trail(std::path::Path::new(store), &["hook"]);
        let config = WebhookConfig::new(url, vec![SECRET.into()]);
        let sink = WebhookSink::new(config).unwrap();
        let run = drain(&trail, Arc::new(sink), "hook").await;
        run.print("webhook drain");
        trail.shutdown().await;
    });
}

/// Send the requests of a store filled by `--fill` with the bare reqwest loop, to a webhook
/// receiver on loopback, and print the rate: the baseline of `--drain-webhook`, in a process
/// of its own, for a profiler.
fn bare_webhook_process(store: &str) {
    let runtime = runtime();
    runtime.block_on(async {
        let url = receiver().await;
        let trail = trail(std::path::Path::new(store), &[]);
        let bare = BareWebhook::new(&trail, &url);
        let concurrency = WebhookConfig::new(url, vec![SECRET.into()]).max_in_flight;
        let run = bare.send(concurrency).await;
        run.print("bare webhook");
        trail.shutdown().await;
    });
}
