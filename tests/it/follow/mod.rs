//! `ankusa follow`, the reference consumer: the webhook receiver (in process and as the real
//! binary) against the real webhook sink, and the Kafka follower against a real broker
//! (tansu) fed by the real Kafka sink, killed with -9 mid-way and restarted; `follow verify`
//! against an HTTP server answering the admin API's lists; `follow http` against real nodes'
//! watch endpoint.
//!
//! Events are built here with the contract's extensions (`subjectversion`, `subjectstore`,
//! `snapshot`), as a node of the contract publishes them: the node does not publish them yet.

mod events;
mod http;
mod kafka;
mod verify;
mod webhook;
