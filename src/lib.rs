//! Ankusa: the audit trail of a node's configuration changes, and the outbox that publishes
//! route and source lifecycle events as CloudEvents.
//!
//! Dependencies point one way: `api` -> `subjects` -> `audit` -> `store`. See ARCHITECTURE.md.

/// The allocator of every binary built on this library (the node, its tools, tests and
/// benchmarks, so that a benchmark measures what runs): jemalloc, also for the C and C++ of
/// RocksDB and librdkafka (it provides `malloc` itself). Memory freed on another thread than
/// the one that allocated it is the rule here: the writer and syncer threads free what tokio
/// workers allocated and the other way round, and librdkafka's broker thread frees the
/// records (and their ten header allocations each) that the publisher made. glibc's malloc
/// spent about a tenth of the writer thread and of the publisher there.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

pub mod api;
pub mod audit;
pub mod cli;
pub mod config;
pub mod lifecycle;
pub mod node;
pub mod store;
pub mod subjects;
pub mod telemetry;
