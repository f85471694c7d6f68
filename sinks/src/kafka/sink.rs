//! Producing events and reading their delivery reports.
//!
//! A key's records reach the topic in seq order, even across failures, because the publisher
//! resends from the first event that failed and this sink never lets a later record of a key
//! go out before an earlier one that failed:
//! - a record that could not even be enqueued holds back the rest of its key in the attempt,
//!   and the attempt is not open (nothing is submitted after it until it is resolved);
//! - a record whose delivery failed (a timeout while its partition had no leader, say) purges
//!   what is still queued in the producer, as soon as it is reported, so the records enqueued
//!   after it, by this attempt or later ones in flight, fail too instead of going out ahead of
//!   its resend;
//! - after such a failure, or a fatal producer error (an idempotent producer that lost its
//!   sequence state cannot continue), nothing new is enqueued until every attempt under way
//!   has been resolved by the caller, who then resends from its first failed event: until
//!   then attempts fail at once. Only then is a fatal producer replaced by a fresh one, whose
//!   records could otherwise overtake those of the broken one.
//!
//! With `tombstones = true` a delete's record is followed by a tombstone: the same key, no
//! headers, a null value, enqueued right after it on the same producer. One key means one
//! partition, and the producer keeps a partition's enqueue order, so the tombstone lands right
//! after its event and before the key's next event, and everything above holds for it as for
//! any record of the key: its failure holds the key back or purges the queue. The event is
//! `Delivered` only once both records are confirmed; otherwise it is resent whole, so a retry
//! may write the event and its tombstone twice (harmless for compaction, which keeps the last
//! record of a key). An event with no key, or an empty one (which librdkafka partitions at
//! random), gets no tombstone: compaction could not join it to the event.
//!
//! The producer sits behind a `std::sync::RwLock<Arc<_>>`: an attempt clones the `Arc` and lets
//! go of the lock at once (it is never held across an await).

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer, PurgeConfig};
use rdkafka::ClientConfig;

use super::config::KafkaConfig;
use super::record::{self, Record};
use crate::{partition_key, telemetry, Delivery, Outcome, Sink, SinkError, Submitted};

/// How long `send` waits for room when librdkafka's local queue is full before it gives up
/// on the rest of the slice (as `Retry`).
const QUEUE_FULL_PAUSE: Duration = Duration::from_millis(5);

/// A sink that produces events to one Kafka topic.
///
/// Dropping it drops the producer, which purges and flushes for up to 500 ms and joins
/// librdkafka's threads: drop it at shutdown or on the blocking pool, not in a hot path.
pub struct KafkaSink {
    /// The live producer; replaced after a fatal error. See the module doc for the lock.
    producer: RwLock<Arc<FutureProducer>>,
    /// The validated client config, kept to recreate the producer.
    client_config: ClientConfig,
    topic: String,
    message_timeout: Duration,
    healthcheck_timeout: Duration,
    /// Whether a delete's record is followed by a tombstone (see the module doc).
    tombstones: bool,
    /// How many times a fatal error replaced the producer (for metrics and tests).
    recreations: AtomicU64,
    /// Attempts handed out whose outcomes are not yet resolved (or dropped).
    attempts: Arc<AtomicUsize>,
    /// Whether a delivery of an attempt handed out since nothing was last under way failed.
    failed: Arc<AtomicBool>,
}

/// One attempt under way: counted in [`KafkaSink::attempts`] until its outcomes are read or
/// dropped.
struct Underway(Arc<AtomicUsize>);

impl Underway {
    fn start(attempts: &Arc<AtomicUsize>) -> Underway {
        attempts.fetch_add(1, Ordering::SeqCst);
        Underway(Arc::clone(attempts))
    }
}

impl Drop for Underway {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl std::fmt::Debug for KafkaSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSink")
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl KafkaSink {
    /// Validates `config` and creates the producer (it connects lazily, in the background).
    pub fn new(config: KafkaConfig) -> Result<Self, SinkError> {
        let client_config = config.client_config()?;
        let producer = create(&client_config)?;
        Ok(KafkaSink {
            producer: RwLock::new(Arc::new(producer)),
            client_config,
            topic: config.topic,
            message_timeout: config.message_timeout,
            healthcheck_timeout: config.healthcheck_timeout,
            tombstones: config.tombstones,
            recreations: AtomicU64::new(0),
            attempts: Arc::new(AtomicUsize::new(0)),
            failed: Arc::new(AtomicBool::new(false)),
        })
    }

    /// How many times a fatal producer error made the sink replace its producer.
    pub fn producer_recreations(&self) -> u64 {
        self.recreations.load(Ordering::Relaxed)
    }

    pub(super) fn producer(&self) -> Arc<FutureProducer> {
        Arc::clone(&self.producer.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Replaces `broken` with a new producer if it is in a fatal state, still the live one,
    /// and no attempt is under way (see the module doc); returns whether it was fatal.
    fn recreate_if_fatal(&self, broken: &Arc<FutureProducer>) -> bool {
        let Some((code, _)) = broken.client().fatal_error() else {
            return false;
        };
        let mut live = self
            .producer
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if Arc::ptr_eq(&live, broken) && self.attempts.load(Ordering::SeqCst) == 0 {
            match create(&self.client_config) {
                Ok(fresh) => {
                    retire(std::mem::replace(&mut *live, Arc::new(fresh)));
                    self.recreations.fetch_add(1, Ordering::Relaxed);
                    telemetry::producer_recreated(&format!("{code:?}"));
                }
                // Keep the broken one; the next `send` tries again.
                Err(_) => telemetry::attempt_failed("kafka", "producer_create", 0),
            }
        }
        true
    }

    /// Enqueues the record of `delivery` (the `index`th event of the attempt) and, for a
    /// delete with tombstones on, its tombstone right after it; each delivery report goes to
    /// `pending` under `index`. Returns the event's outcome when it is known at once: it could
    /// not be encoded, or a record could not be enqueued.
    async fn produce(
        &self,
        producer: &FutureProducer,
        (index, delivery): (usize, &Delivery),
        key: Option<&str>,
        deadline: Instant,
        pending: &mut Vec<(usize, DeliveryFuture)>,
    ) -> Option<Outcome> {
        let Ok(Record { headers, payload }) = Record::of(&delivery.event) else {
            telemetry::encode_failed("kafka", delivery.seq);
            return Some(Outcome::Rejected {
                reason: "encode".into(),
            });
        };
        let event = self.record(Some(headers), payload.as_deref(), key);
        match self.enqueue(producer, event, deadline).await {
            Ok(report) => pending.push((index, report)),
            Err(error) => return Some(classify(&error)),
        }
        if !self.tombstones || !record::is_delete(&delivery.event) {
            return None;
        }
        let key = key.filter(|k| !k.is_empty())?;
        match self
            .enqueue(producer, self.record(None, None, Some(key)), deadline)
            .await
        {
            Ok(report) => pending.push((index, report)),
            Err(error) => return Some(classify(&error)),
        }
        None
    }

    /// A record for the sink's topic; a tombstone has neither headers nor a payload.
    fn record<'r>(
        &'r self,
        headers: Option<OwnedHeaders>,
        payload: Option<&'r [u8]>,
        key: Option<&'r str>,
    ) -> FutureRecord<'r, str, [u8]> {
        let mut record = FutureRecord::to(&self.topic);
        if let Some(headers) = headers {
            record = record.headers(headers);
        }
        if let Some(payload) = payload {
            record = record.payload(payload);
        }
        if let Some(key) = key {
            record = record.key(key);
        }
        record
    }

    /// Enqueues one record, waiting for room while the local queue is full, at most until
    /// `deadline`.
    async fn enqueue(
        &self,
        producer: &FutureProducer,
        mut future_record: FutureRecord<'_, str, [u8]>,
        deadline: Instant,
    ) -> Result<DeliveryFuture, KafkaError> {
        loop {
            match producer.send_result(future_record) {
                Ok(delivery) => return Ok(delivery),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                    if Instant::now() < deadline =>
                {
                    future_record = back;
                    tokio::time::sleep(QUEUE_FULL_PAUSE).await;
                }
                Err((error, _)) => return Err(error),
            }
        }
    }
}

#[async_trait]
impl Sink for KafkaSink {
    fn kind(&self) -> &'static str {
        "kafka"
    }

    async fn send(&self, events: &[Delivery]) -> Vec<Outcome> {
        let outcomes = self.submit(events).await.outcomes.await;
        // A producer that turned fatal is replaced now rather than at the next attempt.
        self.recreate_if_fatal(&self.producer());
        outcomes
    }

    /// Enqueues every event in order and returns; the outcomes are the delivery reports.
    /// The producer sends a partition's records in the order they were enqueued (idempotent,
    /// so its own retries keep that order), so the next attempt may be enqueued while these
    /// are in flight, unless one of these could not even be enqueued.
    async fn submit(&self, events: &[Delivery]) -> Submitted {
        let mut producer = self.producer();
        if self.attempts.load(Ordering::SeqCst) > 0 {
            // After a failure, nothing new until what is under way is resolved (module doc).
            let refused = if producer.client().fatal_error().is_some() {
                Some("producer_fatal")
            } else if self.failed.load(Ordering::SeqCst) {
                Some("earlier_delivery_failed")
            } else {
                None
            };
            if let Some(reason) = refused {
                let outcomes = vec![retry(reason); events.len()];
                report_failures(&outcomes);
                return Submitted::done(outcomes);
            }
        } else {
            // Nothing under way: the caller starts again from its first failed event.
            self.failed.store(false, Ordering::SeqCst);
        }
        if self.recreate_if_fatal(&producer) {
            retire(std::mem::replace(&mut producer, self.producer()));
        }
        let underway = Underway::start(&self.attempts);
        let deadline = Instant::now() + self.message_timeout;
        let mut outcomes = vec![None; events.len()];
        let mut pending = Vec::with_capacity(events.len());
        let mut held_keys: HashSet<Option<Cow<'_, str>>> = HashSet::new();
        for (index, delivery) in events.iter().enumerate() {
            let key = partition_key(&delivery.event);
            if !held_keys.is_empty() && held_keys.contains(&key) {
                outcomes[index] = Some(retry("earlier_event_of_key_failed"));
                continue;
            }
            let event = (index, delivery);
            let known = self
                .produce(&producer, event, key.as_deref(), deadline, &mut pending)
                .await;
            if let Some(outcome) = known {
                if matches!(outcome, Outcome::Retry { .. }) {
                    held_keys.insert(key);
                }
                outcomes[index] = Some(outcome);
            }
        }
        // Read on a task of its own, so that a failed delivery purges the queue as soon as
        // it is reported, not once the caller comes to this attempt after the older ones. The
        // attempt is under way until the caller has its outcomes (or drops them).
        let failed = Arc::clone(&self.failed);
        let reading = tokio::spawn(reports(producer, outcomes, pending, failed));
        let events = events.len();
        Submitted {
            open: held_keys.is_empty(),
            outcomes: Box::pin(async move {
                let outcomes = reading
                    .await
                    .unwrap_or_else(|_| vec![retry("delivery_task_failed"); events]);
                drop(underway);
                outcomes
            }),
        }
    }

    /// Fetches the topic's metadata (on the blocking pool: librdkafka blocks the caller).
    async fn healthcheck(&self) -> Result<(), SinkError> {
        let producer = self.producer();
        let topic = self.topic.clone();
        let timeout = self.healthcheck_timeout;
        crate::blocking::run("the healthcheck", move || {
            check_topic(&producer, &topic, timeout)
        })
        .await?
    }
}

/// The outcomes of an attempt: those known at enqueue time, and the delivery reports of the
/// rest (a delete with its tombstone has two, see [`combine`]). The first delivery that must be retried marks the sink `failed` and purges the
/// producer's queue (see the module doc). When the producer turned fatal meanwhile, only what
/// it confirmed counts as delivered; a later attempt replaces it (see `recreate_if_fatal`).
async fn reports(
    producer: Arc<FutureProducer>,
    mut outcomes: Vec<Option<Outcome>>,
    pending: Vec<(usize, DeliveryFuture)>,
    failed: Arc<AtomicBool>,
) -> Vec<Outcome> {
    let purged = AtomicBool::new(false);
    let reports = futures::future::join_all(pending.into_iter().map(|(i, f)| {
        let (producer, purged, failed) = (&producer, &purged, &failed);
        async move {
            let outcome = match f.await {
                Ok(Ok(_)) => Outcome::Delivered,
                Ok(Err((error, _))) => classify(&error),
                Err(_canceled) => retry("delivery_canceled"),
            };
            if matches!(outcome, Outcome::Retry { .. }) && !purged.swap(true, Ordering::SeqCst) {
                failed.store(true, Ordering::SeqCst);
                purge_queued(producer).await;
            }
            (i, outcome)
        }
    }))
    .await;
    for (index, outcome) in reports {
        outcomes[index] = Some(combine(outcomes[index].take(), outcome));
    }
    let fatal = producer.client().fatal_error().is_some();
    let outcomes: Vec<Outcome> = outcomes
        .into_iter()
        .map(|o| match o {
            Some(Outcome::Delivered) => Outcome::Delivered,
            Some(_) if fatal => retry("producer_fatal"),
            Some(outcome) => outcome,
            None => retry("not_sent"),
        })
        .collect();
    report_failures(&outcomes);
    if fatal {
        // The next attempt replaces it; this may be the last reference: drop it off the
        // runtime.
        retire(producer);
    }
    outcomes
}

/// The outcome of an event from what is already known of it and one more of its records'
/// outcome: `Delivered` only if every record was, else a failure, `Retry` before any other
/// (a retry resends all of the event's records, so nothing is passed over).
pub(crate) fn combine(known: Option<Outcome>, report: Outcome) -> Outcome {
    match (known, report) {
        (None | Some(Outcome::Delivered), report) => report,
        (Some(known), Outcome::Delivered) => known,
        (Some(known @ Outcome::Retry { .. }), _) => known,
        (Some(_), report) => report,
    }
}

/// Fails every record still queued in `producer` (not those already sent to a broker, which
/// keep their order by the idempotent producer's sequence numbers). librdkafka waits for its
/// threads to drop them: off the runtime.
async fn purge_queued(producer: &Arc<FutureProducer>) {
    let producer = Arc::clone(producer);
    let purge = move || producer.purge(PurgeConfig::default().queue());
    if let Err(e) = crate::blocking::run("the purge", purge).await {
        crate::telemetry::purge_failed(&e);
    }
}

fn create(config: &ClientConfig) -> Result<FutureProducer, SinkError> {
    config
        .create()
        .map_err(|e| SinkError::Config(format!("kafka producer: {e}")))
}

/// Drops a replaced producer on the blocking pool: the last drop purges, flushes (up to
/// 500 ms) and joins librdkafka's threads, which must not stall a tokio worker.
fn retire(producer: Arc<FutureProducer>) {
    crate::blocking::detach(move || drop(producer));
}

fn check_topic(producer: &FutureProducer, topic: &str, timeout: Duration) -> Result<(), SinkError> {
    let metadata = producer
        .client()
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| SinkError::Unhealthy(format!("kafka metadata: {e}")))?;
    let found = metadata.topics().iter().find(|t| t.name() == topic);
    let Some(found) = found else {
        return Err(SinkError::Unhealthy(format!("topic {topic} missing")));
    };
    if let Some(error) = found.error() {
        let code = RDKafkaErrorCode::from(error);
        return Err(SinkError::Unhealthy(format!("topic {topic}: {code}")));
    }
    if found.partitions().is_empty() {
        return Err(SinkError::Unhealthy(format!(
            "topic {topic} has no partitions"
        )));
    }
    Ok(())
}

fn retry(reason: &str) -> Outcome {
    Outcome::Retry {
        after: None,
        reason: reason.into(),
    }
}

/// A record that can never be produced as is (too large, malformed) is `Rejected`; every
/// other error (timeouts, unreachable or unavailable brokers, leader changes) is `Retry`.
pub(crate) fn classify(error: &KafkaError) -> Outcome {
    let Some(code) = error.rdkafka_error_code() else {
        return retry("kafka_error");
    };
    let reason = format!("kafka_{code:?}");
    match code {
        RDKafkaErrorCode::MessageSizeTooLarge
        | RDKafkaErrorCode::InvalidMessageSize
        | RDKafkaErrorCode::InvalidMessage
        | RDKafkaErrorCode::InvalidRecord
        | RDKafkaErrorCode::BadMessage => Outcome::Rejected { reason },
        _ => Outcome::Retry {
            after: None,
            reason,
        },
    }
}

fn report_failures(outcomes: &[Outcome]) {
    for outcome in outcomes {
        if let Outcome::Retry { reason, .. } | Outcome::Rejected { reason } = outcome {
            telemetry::attempt_failed("kafka", reason, 1);
        }
    }
}
