//! What the tests and benchmarks of every crate share: a real webhook receiver, a real
//! Kafka-compatible broker, ports for child processes to listen on, and (for this crate's own
//! tests) sample events.
//!
//! Built for this crate's tests, and for others with the `test-support` feature (the root
//! crate's integration tests and benchmarks enable it as a dev-dependency), so that there is
//! one receiver and one broker helper, not one per test binary.

pub mod broker;
pub mod port;
pub mod reader;
pub mod receiver;
#[cfg(test)]
mod sample;

pub use broker::Broker;
pub use port::free_port;
pub use reader::reader;
pub use receiver::{Receiver, ReceiverBuilder, Recorded, Reply};
#[cfg(test)]
pub(crate) use sample::*;
