//! The admin API over real HTTP, against a node served on a free port.

pub(crate) mod audit;
mod audit_export;
mod audit_export_cli;
pub(crate) mod audit_proof;
mod audit_query;
mod auth;
mod input;
pub(crate) mod lifecycle;
mod lifecycle_backlog;
mod lifecycle_dead_letters;
mod limits;
mod openapi;
mod schemas;
mod secret_probing;
mod secrets;
mod sources;
mod subjects;
mod trace;
mod watch;
mod watch_slow;
