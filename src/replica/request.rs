//! The events of a webhook request, read only from what its signature covers.
//!
//! Standard Webhooks signs `{webhook-id}.{webhook-timestamp}.{body}`. Structured and batch
//! requests carry whole events in the body. A binary request carries the attributes in
//! `ce-*` headers, outside the body, and the sink binds them by making `webhook-id` their
//! digest ([`binary_message_id`]). So a request's events are taken only when its
//! `webhook-id` names exactly them: the event's id (structured), the batch's id (batch), or
//! the digest of the headers read (binary). A captured request replayed with other headers,
//! or turned from one mode into another, is refused.

use axum::http::header::CONTENT_TYPE;
use axum::http::HeaderMap;
use cloudevents::{AttributesReader, Event};

use ankusa_sinks::webhook::batch_id;
use ankusa_sinks::webhook::signing::binary_message_id;

const STRUCTURED: &str = "application/cloudevents+json";
const BATCH: &str = "application/cloudevents-batch+json";

/// Why a verified request's events are not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The body is not events in the mode its `content-type` says (400).
    #[error("not a CloudEvent: {0}")]
    NotEvents(String),
    /// `webhook-id` does not name the events read, so the signature does not cover them
    /// (401, as for a bad signature).
    #[error("webhook-id does not name the {0} it carries")]
    Unbound(&'static str),
}

/// The events of a request whose signature (over `id` and `body`) has been verified.
pub fn events(headers: &HeaderMap, id: &str, body: &[u8]) -> Result<Vec<Event>, Refused> {
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if content_type.starts_with(BATCH) {
        let events: Vec<Event> =
            serde_json::from_slice(body).map_err(|e| Refused::NotEvents(e.to_string()))?;
        return bound(batch_id(&events) == id, events, "batch");
    }
    if content_type.starts_with(STRUCTURED) {
        let event: Event =
            serde_json::from_slice(body).map_err(|e| Refused::NotEvents(e.to_string()))?;
        return bound(event.id() == id, vec![event], "event");
    }
    // Binary: the digest first, so that no header is read that the signature does not cover.
    if binary_message_id(headers).as_deref() != Some(id) {
        return Err(Refused::Unbound("headers"));
    }
    cloudevents::binding::http::to_event(headers, body.to_vec())
        .map(|event| vec![event])
        .map_err(|e| Refused::NotEvents(e.to_string()))
}

fn bound(named: bool, events: Vec<Event>, what: &'static str) -> Result<Vec<Event>, Refused> {
    if named {
        Ok(events)
    } else {
        Err(Refused::Unbound(what))
    }
}
