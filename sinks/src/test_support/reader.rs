//! A reader of what a Kafka sink wrote: one consumer assigned every partition of a topic from
//! its beginning, committing nothing, so every test and bench reads a topic the same way.

use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// A consumer of partitions `0..partitions` of `topic` on `brokers`, from the beginning, in
/// consumer group `group` (which names it only: nothing is committed).
pub fn reader(brokers: &str, topic: &str, partitions: i32, group: &str) -> StreamConsumer {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("a Kafka consumer");
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions {
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .expect("a partition of the assignment");
    }
    consumer.assign(&assignment).expect("the assignment");
    consumer
}
