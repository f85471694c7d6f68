//! Ankusa: the audit trail of a node's configuration changes, and the outbox that publishes
//! route and source lifecycle events as CloudEvents.
//!
//! Dependencies point one way: `api` -> `subjects` -> `audit` -> `store`. See ARCHITECTURE.md.

pub mod api;
pub mod audit;
pub mod cli;
pub mod config;
pub mod lifecycle;
pub mod node;
pub mod store;
pub mod subjects;
pub mod telemetry;
