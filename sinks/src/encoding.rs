//! How an event becomes bytes in structured mode (file lines, webhook structured and batch
//! bodies).
//!
//! The SDK serializes extensions from a `HashMap`, whose order changes with every rebuilt
//! event. A redelivery must carry the *same body* as the first attempt (receivers dedupe and
//! verify signatures on it), so we go through `serde_json::Value`, whose maps are ordered by
//! key: the same event always gives the same bytes, in any process.

use cloudevents::Event;

/// The structured-mode JSON of `event` (`application/cloudevents+json`), keys sorted.
pub(crate) fn structured(event: &Event) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec(&serde_json::to_value(event)?)
}

/// The batched-mode JSON of `events` (`application/cloudevents-batch+json`): an array of
/// structured events, keys sorted.
pub(crate) fn batch<'a>(
    events: impl IntoIterator<Item = &'a Event>,
) -> Result<Vec<u8>, serde_json::Error> {
    let values = events
        .into_iter()
        .map(serde_json::to_value)
        .collect::<Result<Vec<_>, _>>()?;
    serde_json::to_vec(&values)
}
