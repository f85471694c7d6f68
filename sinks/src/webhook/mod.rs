//! The webhook sink: CloudEvents over HTTP, signed per Standard Webhooks.
//!
//! One `send` is one attempt: in `binary`/`structured` mode one request per event, events of
//! one partition key strictly one after another (a receiver applying them keeps per-key
//! order) and distinct keys concurrently up to `max_in_flight`; in `batch` mode one request
//! for the whole slice. Each response is classified into an [`Outcome`](crate::Outcome); the
//! publisher owns retries, so a redelivery is a new `send` with the same event, hence the same
//! `webhook-id` and the same body bytes.

mod config;
pub mod signing;
mod sink;
#[cfg(test)]
mod tests;

pub use config::{WebhookConfig, WebhookMode};
pub use sink::{batch_id, WebhookSink};
