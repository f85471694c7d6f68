//! `ankusa follow kafka`: a consumer of every partition of a topic that keeps a replica.
//!
//! The consumer is assigned every partition itself rather than subscribing through the
//! group's rebalancing: the contract needs one consumer to read all partitions (markers and
//! items of a snapshot travel in different ones), and a second follower started by mistake
//! in the same group would otherwise take half of them and leave both replicas wrong without
//! a word. The group still names the consumer: its offsets are committed there for tooling
//! (lag dashboards), after the replica file holding them is written. The file is the truth:
//! a partition starts at the file's next offset, or at the beginning when the file has none.
//!
//! A position that cannot be resumed stops the follower with [`FollowError::Gap`]: a saved
//! offset below the oldest the topic still holds (retention deleted records it never read),
//! found at start from the low watermarks, or any offset the broker calls out of range while
//! it runs (`auto.offset.reset = error`). Skipping to the earliest record would leave a
//! replica that looks healthy and misses changes for good.
//!
//! Records are the sink's binary mode (`ce_*` headers, the data as the value) or structured
//! mode, read with the SDK's Kafka binding; a null value is a tombstone (`tombstones = true`)
//! and is skipped. The replica file is written every `batch_events` events or
//! `batch_interval`, whichever comes first, and at shutdown.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cloudevents::binding::rdkafka::record_to_event;
use cloudevents::Event;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use tokio::sync::watch;
use tokio::time::MissedTickBehavior;

use super::file::{self, KafkaProgress, ReplicaFile};
use super::lag::{self, Lag};
use super::metrics::Metrics;
use super::FollowError;
use crate::telemetry::follow as telemetry;

/// How often the partitions of the topic are looked up again (a topic may grow).
const METADATA_EVERY: Duration = Duration::from_secs(60);
/// How often the high watermarks are looked up: often when catching up to stop, else for
/// the lag gauge only.
const LAG_EVERY: Duration = Duration::from_secs(5);
const LAG_CATCHING_UP: Duration = Duration::from_millis(200);
/// How long the loop pauses after a consumer error.
const ERROR_PAUSE: Duration = Duration::from_millis(200);
/// How long a metadata request may take.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// Events between two writes of the replica file, at most. Each write encodes the whole
/// replica, so its cost grows with it: at full speed the file is written about once a
/// `DEFAULT_BATCH_INTERVAL`, not once every few thousand events. A kill -9 re-reads at most
/// one batch, which the rule makes harmless.
pub const DEFAULT_BATCH_EVENTS: usize = 50_000;

/// The longest an applied event waits to be written (ms).
pub const DEFAULT_BATCH_MS: u64 = 1000;

/// What a Kafka follower needs.
#[derive(Debug, Clone)]
pub struct KafkaOptions {
    /// `bootstrap.servers`.
    pub brokers: String,
    /// The topic the sink writes.
    pub topic: String,
    /// The consumer group its offsets are committed to.
    pub group: String,
    /// The replica file.
    pub out: PathBuf,
    /// Write the replica file after this many events...
    pub batch_events: usize,
    /// ...or this long after the first event not yet written.
    pub batch_interval: Duration,
    /// Stop (after writing the replica) once every partition is read to its high
    /// watermark: catch up, then return (for `--verify`).
    pub until_caught_up: bool,
    /// Where a partition the replica file has no offset for starts, at the first start.
    pub start: Start,
}

/// Where a new replica starts reading.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Start {
    /// Every event the topic still holds.
    #[default]
    Beginning,
    /// Only what comes next: for a replica that bootstraps from a snapshot (ask a node for
    /// one once the follower runs). The offsets it starts at go into the replica file with
    /// its first write, so a restart goes on from there.
    End,
}

/// The consumer's state between records.
struct Follower {
    consumer: Arc<StreamConsumer>,
    options: KafkaOptions,
    file: ReplicaFile,
    metrics: Arc<Metrics>,
    /// Events read since the last write.
    pending: usize,
    /// When the last record came.
    received_at: Instant,
    /// The partitions assigned (the lag task reads them).
    assigned: watch::Sender<Vec<i32>>,
}

/// Follow `options.topic` into `options.out` until `shutdown`, then write the replica.
pub async fn follow(
    options: KafkaOptions,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), FollowError> {
    let mut follower = Follower::start(options, metrics).await?;
    let every = if follower.options.until_caught_up {
        LAG_CATCHING_UP
    } else {
        LAG_EVERY
    };
    let lag = Lag::start(
        follower.consumer.clone(),
        follower.options.topic.clone(),
        follower.assigned.subscribe(),
        every,
    );
    tokio::pin!(shutdown);
    let consumer = follower.consumer.clone();
    let mut tick = tokio::time::interval(follower.options.batch_interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut metadata_at = Instant::now();
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = tick.tick() => {
                follower.flush().await?;
                if follower.caught_up(&lag) {
                    break;
                }
                if metadata_at.elapsed() >= METADATA_EVERY {
                    metadata_at = Instant::now();
                    // Only a look for new partitions: the ones assigned go on meanwhile.
                    if let Err(e) = follower.grow().await {
                        telemetry::metadata_failed(&e);
                    }
                }
            }
            received = consumer.recv() => match received {
                Ok(message) => follower.read(&message),
                Err(e) if out_of_range(&e) => {
                    follower.flush().await?;
                    return Err(follower.gap().await);
                }
                Err(e) => {
                    // Passing (a broker down, a rebalance of the cluster): librdkafka
                    // retries; a pause keeps a lasting one from flooding the log.
                    telemetry::consumer_error(&e);
                    tokio::time::sleep(ERROR_PAUSE).await;
                }
            },
        }
        if follower.pending >= follower.options.batch_events {
            follower.flush().await?;
        }
    }
    follower.flush().await
}

impl Follower {
    /// Load the replica file, make the consumer and assign it every partition.
    async fn start(options: KafkaOptions, metrics: Arc<Metrics>) -> Result<Follower, FollowError> {
        let mut file = file::load(&options.out)?.unwrap_or_default();
        if let Some(url) = file.progress.http.keys().next() {
            return Err(FollowError::Mismatch {
                path: options.out,
                found: format!("the events of {url} over http"),
                asked: format!("kafka topic {}", options.topic),
            });
        }
        let progress = file.progress.kafka.get_or_insert_with(|| KafkaProgress {
            topic: options.topic.clone(),
            next: BTreeMap::new(),
        });
        if progress.topic != options.topic {
            return Err(FollowError::Mismatch {
                path: options.out,
                found: format!("kafka topic {}", progress.topic),
                asked: format!("kafka topic {}", options.topic),
            });
        }
        metrics.count_subjects(&file.replica);
        let consumer: StreamConsumer = ClientConfig::new()
            .set("bootstrap.servers", &options.brokers)
            .set("group.id", &options.group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            // Never a silent jump over records not read: an offset out of range is an error.
            .set("auto.offset.reset", "error")
            .create()
            .map_err(|e| FollowError::Kafka(e.to_string()))?;
        let mut follower = Follower {
            consumer: Arc::new(consumer),
            options,
            file,
            metrics,
            pending: 0,
            received_at: Instant::now(),
            assigned: watch::Sender::new(Vec::new()),
        };
        follower.grow().await?;
        Ok(follower)
    }

    /// Assign every partition of the topic when it has more than those assigned, each at
    /// the next offset (the file's, or what was read since) or at the beginning.
    async fn grow(&mut self) -> Result<(), FollowError> {
        let partitions = partitions(self.consumer.clone(), &self.options.topic).await?;
        if partitions
            .iter()
            .all(|p| self.assigned.borrow().contains(p))
        {
            return Ok(());
        }
        let topic = self.options.topic.clone();
        // At the first start only: a partition found later is new, and read from its start.
        let at_end = self.options.start == Start::End && self.assigned.borrow().is_empty();
        let mut list = TopicPartitionList::new();
        for &p in &partitions {
            let saved = self.progress().next.get(&p).copied();
            let offset = match saved {
                Some(o) => {
                    self.check_resumable(p, o).await?;
                    o
                }
                None if at_end => {
                    let end = high_watermark(self.consumer.clone(), &topic, p).await?;
                    self.progress().next.insert(p, end);
                    self.pending += 1;
                    end
                }
                None => {
                    list.add_partition_offset(&topic, p, Offset::Beginning)
                        .map_err(|e| FollowError::Kafka(e.to_string()))?;
                    continue;
                }
            };
            list.add_partition_offset(&topic, p, Offset::Offset(offset))
                .map_err(|e| FollowError::Kafka(e.to_string()))?;
        }
        self.consumer
            .assign(&list)
            .map_err(|e| FollowError::Kafka(e.to_string()))?;
        telemetry::following(&topic, partitions.len());
        self.assigned.send_replace(partitions);
        Ok(())
    }

    /// An error unless partition `p` can be resumed at `next`: not below the oldest offset
    /// the topic holds. (Above the end is found by the broker when fetching: tansu's high
    /// watermark is not the end.)
    async fn check_resumable(&self, p: i32, next: i64) -> Result<(), FollowError> {
        let (low, _) = watermarks(self.consumer.clone(), &self.options.topic, p).await?;
        if next < low {
            return Err(FollowError::Gap {
                topic: self.options.topic.clone(),
                partition: p,
                next,
                oldest: low,
            });
        }
        Ok(())
    }

    /// The gap behind an out-of-range fetch: the first partition whose position the topic
    /// no longer holds, or, when the watermarks do not show it (the position is past the
    /// end: a topic made again), the first partition read.
    async fn gap(&mut self) -> FollowError {
        let next = self.progress().next.clone();
        for (&p, &at) in &next {
            if let Err(gap) = self.check_resumable(p, at).await {
                return gap;
            }
        }
        let (&partition, &at) = next.iter().next().unwrap_or((&0, &0));
        FollowError::Gap {
            topic: self.options.topic.clone(),
            partition,
            next: at,
            oldest: -1,
        }
    }

    fn progress(&mut self) -> &mut KafkaProgress {
        let topic = &self.options.topic;
        self.file
            .progress
            .kafka
            .get_or_insert_with(|| KafkaProgress {
                topic: topic.clone(),
                next: BTreeMap::new(),
            })
    }

    /// Apply one record and move its partition's next offset past it.
    fn read(&mut self, message: &impl Message) {
        let (partition, offset) = (message.partition(), message.offset());
        self.pending += 1;
        self.received_at = Instant::now();
        // The position only moves forward: a record below it (a broker that fetched it
        // again; tansu does) goes through the rule like any other, stale as it is.
        let next = self.progress().next.entry(partition).or_insert(0);
        *next = (*next).max(offset + 1);
        let applied = record_event(message).and_then(|event| {
            let Some(event) = event else {
                return Ok(None);
            };
            let effect = self
                .file
                .replica
                .apply_event(&event)
                .map_err(|e| e.to_string())?;
            Ok(Some((effect, super::event_time_ms(&event))))
        });
        match applied {
            Ok(Some((effect, time))) => self.metrics.applied(&effect, time),
            Ok(None) => self.metrics.skipped("tombstone"),
            Err(error) => {
                self.metrics.skipped("invalid");
                telemetry::record_skipped(partition, offset, &error);
            }
        }
    }

    /// Write the replica file if events were read since the last write, then commit the
    /// offsets it holds to the group.
    async fn flush(&mut self) -> Result<(), FollowError> {
        if self.pending == 0 {
            return Ok(());
        }
        let started = Instant::now();
        let bytes = file::encode(&self.file);
        let (path, len) = (self.options.out.clone(), bytes.len());
        let written = crate::store::blocking::run("the replica file's write", move || {
            file::write(&path, &bytes)
        })
        .await;
        written.map_err(|_| FollowError::Unwritten(self.options.out.clone()))??;
        let counts = self.file.replica.counts();
        self.metrics
            .written(len, started.elapsed().as_secs_f64(), counts);
        self.pending = 0;
        self.commit();
        Ok(())
    }

    /// Set `behind_events` from the latest watermarks; whether the follower is to stop
    /// because it was asked to once caught up and it is: at every high watermark, everything
    /// read written, and no record for a batch interval (a broker's watermark may lag its
    /// fetches; tansu's gives the last batch's first offset).
    fn caught_up(&mut self, lag: &Lag) -> bool {
        let Some(watermarks) = lag.watermarks.borrow().clone() else {
            return false;
        };
        let behind = lag::behind(&watermarks, &self.progress().next);
        self.metrics.behind_events.set(behind);
        let idle = self.received_at.elapsed() >= self.options.batch_interval.max(LAG_CATCHING_UP);
        self.options.until_caught_up && behind == 0 && self.pending == 0 && idle
    }

    /// Commit the file's offsets to the group, for tooling; a failure is only logged (the
    /// file is what a restart reads).
    fn commit(&mut self) {
        let topic = self.options.topic.clone();
        let mut list = TopicPartitionList::new();
        for (&p, &next) in &self.progress().next {
            if list
                .add_partition_offset(&topic, p, Offset::Offset(next))
                .is_err()
            {
                return;
            }
        }
        if let Err(e) = self.consumer.commit(&list, CommitMode::Async) {
            telemetry::commit_failed(&e);
        }
    }
}

/// The high watermark of partition `p` of `topic`: where a follower that starts at the end
/// reads from.
async fn high_watermark(
    consumer: Arc<StreamConsumer>,
    topic: &str,
    p: i32,
) -> Result<i64, FollowError> {
    Ok(watermarks(consumer, topic, p).await?.1)
}

/// The low and high watermarks of partition `p` of `topic` (off the runtime: it blocks).
async fn watermarks(
    consumer: Arc<StreamConsumer>,
    topic: &str,
    p: i32,
) -> Result<(i64, i64), FollowError> {
    let topic = topic.to_owned();
    crate::store::blocking::run("the watermarks' fetch", move || {
        consumer.fetch_watermarks(&topic, p, METADATA_TIMEOUT)
    })
    .await
    .map_err(|e| FollowError::Kafka(e.to_string()))?
    .map_err(|e| FollowError::Kafka(e.to_string()))
}

/// Whether a consumer error says a position is out of the topic's range.
fn out_of_range(error: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode::{AutoOffsetReset, OffsetOutOfRange};
    matches!(
        error.rdkafka_error_code(),
        Some(AutoOffsetReset | OffsetOutOfRange)
    )
}

/// The event of a record (binary or structured mode); `None` for a null value (a tombstone).
pub fn record_event(message: &impl Message) -> Result<Option<Event>, String> {
    if message.payload().is_none() {
        return Ok(None);
    }
    record_to_event(message)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// The partitions of `topic`, from the brokers' metadata (off the runtime: it blocks).
async fn partitions(consumer: Arc<StreamConsumer>, topic: &str) -> Result<Vec<i32>, FollowError> {
    let name = topic.to_owned();
    let metadata = crate::store::blocking::run("the topic's metadata", move || {
        consumer.fetch_metadata(Some(&name), METADATA_TIMEOUT)
    })
    .await
    .map_err(|e| FollowError::Kafka(format!("metadata task: {e}")))?
    .map_err(|e| FollowError::Kafka(format!("metadata of topic {topic}: {e}")))?;
    let found = metadata.topics().iter().find(|t| t.name() == topic);
    let partitions: Vec<i32> = found
        .map(|t| t.partitions().iter().map(|p| p.id()).collect())
        .unwrap_or_default();
    if let Some(error) = found.and_then(|t| t.error()) {
        return Err(FollowError::Kafka(format!("topic {topic}: {error:?}")));
    }
    if partitions.is_empty() {
        return Err(FollowError::Kafka(format!(
            "topic {topic} has no partitions (does it exist?)"
        )));
    }
    Ok(partitions)
}

#[cfg(test)]
mod tests;
