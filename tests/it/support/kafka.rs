//! Readers of what the Kafka sink wrote: a consumer of every partition of a topic (the sinks'
//! test support's, named for the topic), and a record's headers by name.

use std::collections::HashMap;

use rdkafka::consumer::StreamConsumer;
use rdkafka::message::{BorrowedMessage, Headers};

/// A consumer of every partition of `topic` from the beginning.
pub fn kafka_reader(brokers: &str, topic: &str, partitions: i32) -> StreamConsumer {
    ankusa_sinks::test_support::reader(brokers, topic, partitions, &format!("reader-{topic}"))
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
