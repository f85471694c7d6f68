//! What the integration tests share: the node under test and its HTTP client (`node`), the
//! real binary as a child process (`served`), trails on fresh stores (`trail`), a publisher
//! and its file sink (`publisher`), Kafka readers (`kafka`), a real redis-server (`redis`),
//! a failpoint that holds a thread (`held`), every published event held to its JSON Schema
//! (`schemas`), and the one [`eventually`].
//!
//! The webhook receiver and the Kafka-compatible broker are the sinks crate's
//! (`ankusa_sinks::test_support`), shared with its own tests and the benchmarks.

pub mod eventually;
pub mod kafka;
pub mod node;
#[cfg(feature = "failpoints")]
pub mod paused;
pub mod proxy;
pub mod publisher;
pub mod redis;
pub mod schemas;
pub mod served;
pub mod trail;

pub use eventually::eventually;
