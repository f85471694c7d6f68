//! The lifecycle publisher: through the file and webhook sinks, through the Kafka sink to
//! rdkafka's MockCluster, and end to end against a real Kafka-compatible broker.

mod kafka_broker;
mod kafka_mock;
pub(crate) mod publisher;
mod shared_store;
pub(crate) mod snapshot;
mod watch;
