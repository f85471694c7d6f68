//! An event as a Kafka record in the CloudEvents Kafka binding's binary mode.
//!
//! The record is read off the event in place: the SDK's attribute iterator gives every
//! context attribute and extension (text as it is, the rest as its `Display` writes it: the
//! binding's value), written as the binding's headers (`ce_<name>`, `content-type` for `datacontenttype`) into headers the sink
//! hands to the producer; the value is the event's data bytes, borrowed. The SDK's own
//! `MessageRecord` writes the same headers but consumes the event (a full copy per record) and
//! keeps its headers private (a second copy per record when produced); at tens of thousands of
//! records a second those copies were a third of the sink's time. The
//! `record_matches_the_sdk_binding` test holds the two to the same bytes.
//!
//! A tombstone (`tombstones = true`) is not built here: it is the key alone, with no headers
//! and no value, as Debezium writes it, so it costs no encoding; [`is_delete`] says which
//! events it follows.

use std::borrow::Cow;

use cloudevents::{AttributesReader, Event};
use rdkafka::message::{Header, OwnedHeaders};

use crate::encoding::{self, Binding};

/// An event's Kafka record: its binary-mode headers and value.
pub(crate) struct Record<'a> {
    pub(crate) headers: OwnedHeaders,
    pub(crate) payload: Option<Cow<'a, [u8]>>,
}

impl<'a> Record<'a> {
    /// The record of `event` (fails only for JSON data that does not serialize).
    pub(crate) fn of(event: &'a Event) -> Result<Record<'a>, serde_json::Error> {
        let mut headers = OwnedHeaders::new_with_capacity(encoding::PUBLISHED_HEADERS);
        for (name, attribute) in event.iter() {
            headers = headers.insert(Header {
                key: &encoding::header_name(Binding::Kafka, name),
                value: Some(encoding::attribute_text(&attribute).as_ref()),
            });
        }
        let payload = encoding::data_bytes(event)?;
        Ok(Record { headers, payload })
    }
}

/// Whether `event` is a delete (`io.ankusa.route.deleted`, `io.ankusa.source.deleted`): with
/// `tombstones = true` its record is followed by a tombstone of its key.
pub(crate) fn is_delete(event: &Event) -> bool {
    event.ty().ends_with(".deleted")
}

#[cfg(test)]
mod tests {
    use cloudevents::binding::rdkafka::{FutureRecordExt, MessageRecord};
    use rdkafka::message::Headers;
    use rdkafka::producer::FutureRecord;

    use super::*;
    use crate::test_support::sample;

    fn pairs(headers: &OwnedHeaders) -> Vec<(String, Vec<u8>)> {
        let mut pairs: Vec<(String, Vec<u8>)> = headers
            .iter()
            .map(|h| (h.key.to_owned(), h.value.unwrap_or_default().to_vec()))
            .collect();
        pairs.sort();
        pairs
    }

    #[test]
    fn record_matches_the_sdk_binding() {
        // JSON data as a value (the test sample) and as bytes (what the publisher builds).
        let json = sample(42, "acme/r1").event;
        let mut bytes = json.clone();
        let data =
            serde_json::to_vec(&serde_json::Value::try_from(json.data().unwrap().clone()).unwrap())
                .unwrap();
        bytes.set_data("application/json", data);
        for event in [json, bytes] {
            same_as_sdk(event);
        }
    }

    fn same_as_sdk(event: Event) {
        let sdk = MessageRecord::from_event(event.clone()).unwrap();
        let sdk = FutureRecord::<str, Vec<u8>>::to("t").message_record(&sdk);
        let ours = Record::of(&event).unwrap();
        assert_eq!(pairs(&ours.headers), pairs(sdk.headers.as_ref().unwrap()));
        assert_eq!(ours.payload.as_deref(), sdk.payload.map(Vec::as_slice));
        let names: Vec<String> = pairs(&ours.headers).into_iter().map(|(k, _)| k).collect();
        assert!(names.contains(&"content-type".to_owned()), "{names:?}");
        assert!(names.contains(&"ce_partitionkey".to_owned()), "{names:?}");
        assert_eq!(names.len(), encoding::PUBLISHED_HEADERS, "{names:?}");
    }
}
