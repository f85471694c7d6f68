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
//! Records are the sink's binary mode (`ce_*` headers, the data as the value) or structured
//! mode, read with the SDK's Kafka binding; a null value is a tombstone (`tombstones = true`)
//! and is skipped. The replica file is written every `batch_events` events or
//! `batch_interval`, whichever comes first, and at shutdown.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cloudevents::binding::rdkafka::MessageExt;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::file::{self, KafkaProgress, ReplicaFile};
use super::metrics::Metrics;
use super::FollowError;

/// How often the partitions of the topic are looked up again (a topic may grow).
const METADATA_EVERY: Duration = Duration::from_secs(60);
/// How often the lag (high watermarks) is looked up, and how long that may take.
const LAG_EVERY: Duration = Duration::from_secs(5);
const LAG_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a metadata request may take.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

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
}

/// The consumer's state between records.
struct Follower {
    consumer: Arc<StreamConsumer>,
    options: KafkaOptions,
    file: ReplicaFile,
    metrics: Arc<Metrics>,
    /// Events read since the last write.
    pending: usize,
    /// The partitions assigned.
    partitions: Vec<i32>,
}

/// Follow `options.topic` into `options.out` until `shutdown`, then write the replica.
pub async fn follow(
    options: KafkaOptions,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), FollowError> {
    let mut follower = Follower::start(options, metrics).await?;
    tokio::pin!(shutdown);
    let consumer = follower.consumer.clone();
    let mut tick = tokio::time::interval(follower.options.batch_interval);
    let (mut metadata_at, mut lag_at) = (Instant::now(), None::<Instant>);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = tick.tick() => {
                follower.flush().await?;
                let stop = follower.options.until_caught_up;
                if stop || lag_at.is_none_or(|at| at.elapsed() >= LAG_EVERY) {
                    lag_at = Some(Instant::now());
                    if follower.lag().await == Some(0) && stop {
                        break;
                    }
                }
                if metadata_at.elapsed() >= METADATA_EVERY {
                    metadata_at = Instant::now();
                    follower.grow().await?;
                }
            }
            received = consumer.recv() => match received {
                Ok(message) => follower.read(&message),
                Err(e) => tracing::warn!(error = %e, "kafka consumer error"),
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
        metrics.held(&file.replica);
        let consumer: StreamConsumer = ClientConfig::new()
            .set("bootstrap.servers", &options.brokers)
            .set("group.id", &options.group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .create()
            .map_err(|e| FollowError::Kafka(e.to_string()))?;
        let mut follower = Follower {
            consumer: Arc::new(consumer),
            options,
            file,
            metrics,
            pending: 0,
            partitions: Vec::new(),
        };
        follower.grow().await?;
        Ok(follower)
    }

    /// Assign every partition of the topic when it has more than those assigned, each at
    /// the next offset (the file's, or what was read since) or at the beginning.
    async fn grow(&mut self) -> Result<(), FollowError> {
        let partitions = partitions(self.consumer.clone(), &self.options.topic).await?;
        if partitions.iter().all(|p| self.partitions.contains(p)) {
            return Ok(());
        }
        let topic = self.options.topic.clone();
        let next = &self.progress().next;
        let mut list = TopicPartitionList::new();
        for &p in &partitions {
            let offset = next.get(&p).map_or(Offset::Beginning, |&o| Offset::Offset(o));
            list.add_partition_offset(&topic, p, offset)
                .map_err(|e| FollowError::Kafka(e.to_string()))?;
        }
        self.consumer
            .assign(&list)
            .map_err(|e| FollowError::Kafka(e.to_string()))?;
        tracing::info!(%topic, partitions = partitions.len(), "following every partition");
        self.partitions = partitions;
        Ok(())
    }

    fn progress(&mut self) -> &mut KafkaProgress {
        let topic = &self.options.topic;
        self.file.progress.kafka.get_or_insert_with(|| KafkaProgress {
            topic: topic.clone(),
            next: BTreeMap::new(),
        })
    }

    /// Apply one record and move its partition's next offset past it.
    fn read(&mut self, message: &BorrowedMessage<'_>) {
        let (partition, offset) = (message.partition(), message.offset());
        self.pending += 1;
        self.progress().next.insert(partition, offset + 1);
        if message.payload().is_none() {
            self.metrics.skipped("tombstone");
            return;
        }
        let applied = message
            .to_event()
            .map_err(|e| e.to_string())
            .and_then(|event| {
                let effect = self.file.replica.apply_event(&event).map_err(|e| e.to_string())?;
                Ok((effect, super::event_time_ms(&event)))
            });
        match applied {
            Ok((effect, time)) => self.metrics.applied(&effect, time),
            Err(error) => {
                self.metrics.skipped("invalid");
                tracing::error!(partition, offset, %error, "record skipped: not an event of the contract");
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
        tokio::task::spawn_blocking(move || file::write(&path, &bytes))
            .await
            .map_err(|e| FollowError::Kafka(format!("replica file write task: {e}")))??;
        let counts = self.file.replica.counts();
        self.metrics.written(len, started.elapsed().as_secs_f64(), counts);
        self.pending = 0;
        self.commit();
        Ok(())
    }

    /// Commit the file's offsets to the group, for tooling; a failure is only logged (the
    /// file is what a restart reads).
    fn commit(&mut self) {
        let topic = self.options.topic.clone();
        let mut list = TopicPartitionList::new();
        for (&p, &next) in &self.progress().next {
            if list.add_partition_offset(&topic, p, Offset::Offset(next)).is_err() {
                return;
            }
        }
        if let Err(e) = self.consumer.commit(&list, CommitMode::Async) {
            tracing::warn!(error = %e, "committing offsets to the consumer group failed");
        }
    }

    /// Set `behind_events`: the high watermarks minus the next offsets, summed over the
    /// partitions (a request per partition, off the runtime); `None` when a broker did not
    /// answer.
    async fn lag(&mut self) -> Option<i64> {
        let topic = self.options.topic.clone();
        let next = self.progress().next.clone();
        let (consumer, partitions) = (self.consumer.clone(), self.partitions.clone());
        let behind = tokio::task::spawn_blocking(move || {
            let mut behind = 0;
            for p in partitions {
                let Ok((low, high)) = consumer.fetch_watermarks(&topic, p, LAG_TIMEOUT) else {
                    return None;
                };
                behind += (high - next.get(&p).copied().unwrap_or(low).max(low)).max(0);
            }
            Some(behind)
        })
        .await;
        let behind = behind.ok().flatten()?;
        self.metrics.behind_events.set(behind);
        Some(behind)
    }
}

/// The partitions of `topic`, from the brokers' metadata (off the runtime: it blocks).
async fn partitions(consumer: Arc<StreamConsumer>, topic: &str) -> Result<Vec<i32>, FollowError> {
    let name = topic.to_owned();
    let metadata = tokio::task::spawn_blocking(move || {
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
        return Err(FollowError::Kafka(format!("topic {topic} has no partitions (does it exist?)")));
    }
    Ok(partitions)
}
