//! The integration tests, in one binary: one link of RocksDB and librdkafka, one copy of the
//! support code.
//!
//! Modules are capabilities: `api` (the admin API over real HTTP), `trail` (the commit path,
//! ceilings, retention), `lifecycle` (the publisher and its sinks), `follow` (the
//! reference consumer, `ankusa follow`), `routes` (the remote
//! route store and settlement), `restore` (backups, restores, incarnations), `node` (the
//! real binary: logs, shipped configs), `crash` (kill -9 of a child process at named points)
//! and `failpoints` (failures injected in this process). `support` is what they share.
//!
//! A failpoint is process-wide: the `failpoints` and `crash` cases, and the failpoint cases
//! beside other tests, rely on nextest running every test in a process of its own.

mod api;
mod console;
#[cfg(feature = "failpoints")]
mod crash;
#[cfg(feature = "failpoints")]
mod failpoints;
mod fleet;
mod follow;
mod lifecycle;
mod node;
mod restore;
mod routes;
mod support;
mod trail;
