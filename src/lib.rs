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

/// Let jemalloc give back, on a thread of its own, the pages it keeps after they are freed
/// (for 10 s, its default), instead of only when the same arena allocates again: after a
/// burst (a backlog drained, a sweep) an idle node returns to its resting size (about 33 MiB
/// back to 26 MiB, 20 s after a 200k-event drain) rather than holding its peak. Measured
/// beside the default, the Kafka and webhook drain rates did not move beyond this machine's
/// noise. The node calls it at start; an operator's own `MALLOC_CONF` is left to decide.
pub fn purge_idle_memory() {
    #[cfg(not(target_env = "msvc"))]
    if operator_malloc_conf().is_none() {
        if let Err(e) = tikv_jemalloc_ctl::background_thread::write(true) {
            telemetry::node::purging_not_enabled(&e);
        }
    }
}

pub mod api;
pub mod audit;
pub mod cli;
pub mod config;
pub mod console;
#[cfg(test)]
mod conventions;
pub mod lifecycle;
pub mod node;
pub mod replica;
pub mod server;
pub mod store;
pub mod subjects;
pub mod telemetry;

/// jemalloc's settings as the environment gives them (`MALLOC_CONF`, when not empty).
#[cfg(not(target_env = "msvc"))]
fn operator_malloc_conf() -> Option<std::ffi::OsString> {
    std::env::var_os("MALLOC_CONF").filter(|v| !v.is_empty())
}

#[cfg(all(test, not(target_env = "msvc")))]
mod tests {
    #[test]
    fn purging_runs_in_the_background_once_asked() {
        // Read before and after, so the test shows the call is what turned it on (unless an
        // operator's MALLOC_CONF decides, then it is left as it is).
        let before = tikv_jemalloc_ctl::background_thread::read().unwrap();
        super::purge_idle_memory();
        let after = tikv_jemalloc_ctl::background_thread::read().unwrap();
        if super::operator_malloc_conf().is_none() {
            assert!(!before, "off by default: the call is what turns it on");
            assert!(after, "on after the call");
        } else {
            assert_eq!(after, before);
        }
    }
}
