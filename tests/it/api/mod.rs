//! The admin API over real HTTP, against a node served on a free port.

mod audit;
mod auth;
mod input;
mod openapi;
pub(crate) mod lifecycle;
mod secret_probing;
mod secrets;
mod sources;
mod subjects;
