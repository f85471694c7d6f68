//! How far behind a Kafka follower is: a task of its own asks the brokers for the high
//! watermarks of the partitions now and then, and the follower subtracts its next offsets.
//!
//! The requests block (librdkafka's `ListOffsets`, up to a timeout per partition), so they
//! run apart from the loop that reads records: a slow broker answer must never hold up the
//! reading, nor a burst of ticks pile up behind it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{Consumer, StreamConsumer};
use tokio::sync::watch;

/// How long one partition's watermark request may take.
const TIMEOUT: Duration = Duration::from_secs(2);

/// The (low, high) watermarks of every partition, per partition, as last fetched.
pub type Watermarks = BTreeMap<i32, (i64, i64)>;

/// The watermark fetcher: fetches every `every` for the partitions `partitions` holds, and
/// publishes each complete answer; stops when dropped.
pub struct Lag {
    /// The latest watermarks (`None` before the first complete answer).
    pub watermarks: watch::Receiver<Option<Watermarks>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Lag {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Lag {
    /// Start fetching the watermarks of `topic`'s partitions (as `partitions` gives them).
    pub fn start(
        consumer: Arc<StreamConsumer>,
        topic: String,
        partitions: watch::Receiver<Vec<i32>>,
        every: Duration,
    ) -> Lag {
        let (tx, watermarks) = watch::channel(None);
        let task = tokio::spawn(async move {
            loop {
                let asked = partitions.borrow().clone();
                let (consumer, topic) = (consumer.clone(), topic.clone());
                let fetched = crate::store::blocking::run("the watermarks' fetch", move || {
                    fetch(&consumer, &topic, &asked)
                });
                if let Ok(Some(w)) = fetched.await {
                    if tx.send(Some(w)).is_err() {
                        return;
                    }
                }
                tokio::time::sleep(every).await;
            }
        });
        Lag { watermarks, task }
    }
}

/// The high watermarks of `partitions`, or `None` when a broker did not answer for one.
fn fetch(consumer: &StreamConsumer, topic: &str, partitions: &[i32]) -> Option<Watermarks> {
    partitions
        .iter()
        .map(|&p| {
            consumer
                .fetch_watermarks(topic, p, TIMEOUT)
                .ok()
                .map(|w| (p, w))
        })
        .collect()
}

/// Records not yet read: each partition's high watermark minus its next offset (its low
/// watermark when the follower has read none of it, or retention removed what it had not).
pub fn behind(watermarks: &Watermarks, next: &BTreeMap<i32, i64>) -> i64 {
    watermarks
        .iter()
        .map(|(p, &(low, high))| (high - next.get(p).copied().unwrap_or(low).max(low)).max(0))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behind_sums_what_each_partition_has_left() {
        let watermarks: Watermarks = [(0, (0, 10)), (1, (0, 5)), (2, (4, 4))].into();
        let next: BTreeMap<i32, i64> = [(0, 7), (1, 5)].into();
        assert_eq!(
            behind(&watermarks, &next),
            3,
            "partition 2: all of it retention-deleted"
        );
        assert_eq!(behind(&watermarks, &BTreeMap::new()), 15);
        assert_eq!(
            behind(&[(0, (6, 9))].into(), &[(0, 2)].into()),
            3,
            "below the low mark"
        );
    }
}
