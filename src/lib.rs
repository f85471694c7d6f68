//! Ankusa: the audit trail of a node's configuration changes, and the outbox that publishes
//! route and source lifecycle events as CloudEvents.
//!
//! Dependencies point one way: `api` -> `subjects` -> `audit` -> `store`. See ARCHITECTURE.md.

/// The allocator of every binary built on this library (the node, its tools, tests and
/// benchmarks, so that a benchmark measures what runs): jemalloc. On every commit the writer
/// and syncer threads free what tokio workers allocated and the other way round; glibc's
/// malloc spent about a tenth of the writer thread there (`_int_free`, `malloc_consolidate`).
/// RocksDB's and librdkafka's own C and C++ allocations stay with the system allocator.
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
