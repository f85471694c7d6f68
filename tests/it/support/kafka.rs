//! Readers of what the Kafka sink wrote: a consumer of every partition of a topic, and a
//! record's headers by name.

use std::collections::HashMap;

use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{BorrowedMessage, Headers};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// A consumer of every partition of `topic` from the beginning.
pub fn kafka_reader(brokers: &str, topic: &str, partitions: i32) -> StreamConsumer {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", format!("reader-{topic}"))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions {
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).unwrap();
    consumer
}

/// A record's headers, by name.
pub fn kafka_headers(m: &BorrowedMessage<'_>) -> HashMap<String, String> {
    use rdkafka::Message;
    m.headers()
        .map(|hs| {
            hs.iter()
                .map(|h| {
                    (
                        h.key.to_owned(),
                        String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}
