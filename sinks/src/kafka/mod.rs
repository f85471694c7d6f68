//! The Kafka sink: an idempotent producer writing CloudEvents in the Kafka binding's binary
//! mode (`ce_` headers, `data` as the value), keyed by the event's `partitionkey`.
//!
//! Idempotence with `acks=all` makes librdkafka's own retries safe (no duplicates, order kept
//! within a partition), so a record's delivery report is the confirmation the publisher waits
//! for. One `send` enqueues the whole slice before awaiting any report, so throughput does not
//! depend on the broker round trip.
//!
//! With `tombstones = true` a delete's record is followed by a tombstone of its key (no
//! headers, a null value), for compacted topics; the delete is delivered once both are (see
//! `sink.rs`).

mod config;
mod record;
mod sink;
#[cfg(test)]
mod tests;

pub use config::KafkaConfig;
pub use sink::KafkaSink;
