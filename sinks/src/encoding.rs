//! How an event becomes bytes in structured mode (file lines, webhook structured and batch
//! bodies, dead letters), and the values binary modes (Kafka records, webhook requests) write.
//!
//! The SDK serializes extensions from a `HashMap`, whose order changes with every rebuilt
//! event. A redelivery must carry the *same body* as the first attempt (receivers dedupe and
//! verify signatures on it), so we go through `serde_json::Value`, whose maps are ordered by
//! key: the same event always gives the same bytes, in any process.
//!
//! The publisher hands sinks events whose JSON data is already bytes (`Data::Binary` with
//! `datacontenttype: application/json`): binary modes send those bytes as they are, with no
//! parse and no re-serialization. The SDK would write such data as `data_base64` in structured
//! mode; a JSON reader expects `data`, so structured mode puts the parsed JSON there.

use std::borrow::Cow;

use cloudevents::event::{AttributeValue, SpecVersion};
use cloudevents::{AttributesReader, Data, Event};
use serde_json::Value;

/// An attribute's or extension's value as the SDK's binary-mode bindings write it: text as it
/// is (no copy), the rest as the SDK's `Display` writes it.
pub(crate) fn attribute_text<'a>(attribute: &AttributeValue<'a>) -> Cow<'a, str> {
    match *attribute {
        AttributeValue::String(s) => Cow::Borrowed(s),
        AttributeValue::URI(uri) => Cow::Borrowed(uri.as_str()),
        AttributeValue::URIRef(uri) => Cow::Borrowed(uri.as_str()),
        AttributeValue::Time(time) => Cow::Owned(time.to_rfc3339()),
        AttributeValue::SpecVersion(SpecVersion::V10) => Cow::Borrowed("1.0"),
        AttributeValue::SpecVersion(SpecVersion::V03) => Cow::Borrowed("0.3"),
        ref other => Cow::Owned(other.to_string()),
    }
}

/// A binary-mode binding, as far as its header names differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Binding {
    /// Kafka: `ce_<name>`.
    Kafka,
    /// HTTP: `ce-<name>`.
    Http,
}

/// The headers a published event has in binary mode: the spec version, id, type, source,
/// subject, time, data schema, content type and three extensions (route and source events
/// carry up to three more: the capacity grows for those).
pub(crate) const PUBLISHED_HEADERS: usize = 11;

/// The attributes and extensions a published event has, with their header names in each
/// binding: all but `datacontenttype`, which is `content-type` in both ([`known_headers`]
/// adds it).
const HEADER_NAMES: [(&str, &str, &str); PUBLISHED_HEADERS - 1] = [
    ("specversion", "ce_specversion", "ce-specversion"),
    ("id", "ce_id", "ce-id"),
    ("type", "ce_type", "ce-type"),
    ("source", "ce_source", "ce-source"),
    ("subject", "ce_subject", "ce-subject"),
    ("time", "ce_time", "ce-time"),
    ("dataschema", "ce_dataschema", "ce-dataschema"),
    ("sequence", "ce_sequence", "ce-sequence"),
    ("incarnation", "ce_incarnation", "ce-incarnation"),
    ("partitionkey", "ce_partitionkey", "ce-partitionkey"),
];

/// Each attribute and extension a published event has, with its header name in `binding`
/// (`content-type` for `datacontenttype`).
pub(crate) fn known_headers(
    binding: Binding,
) -> impl Iterator<Item = (&'static str, &'static str)> {
    HEADER_NAMES
        .iter()
        .map(move |(name, kafka, http)| {
            let header = match binding {
                Binding::Kafka => kafka,
                Binding::Http => http,
            };
            (*name, *header)
        })
        .chain([("datacontenttype", "content-type")])
}

/// The header attribute or extension `name` goes in, in binary mode: `content-type` for
/// `datacontenttype`, else `ce_<name>` (Kafka) or `ce-<name>` (HTTP); static for the names
/// a published event has.
pub(crate) fn header_name(binding: Binding, name: &str) -> Cow<'static, str> {
    match known_headers(binding).find(|(known, _)| *known == name) {
        Some((_, header)) => Cow::Borrowed(header),
        None => Cow::Owned(match binding {
            Binding::Kafka => format!("ce_{name}"),
            Binding::Http => format!("ce-{name}"),
        }),
    }
}

/// An event's data as binary mode sends it: bytes and text as they are (borrowed), a JSON
/// value encoded.
pub(crate) fn data_bytes(event: &Event) -> Result<Option<Cow<'_, [u8]>>, serde_json::Error> {
    Ok(match event.data() {
        Some(Data::Binary(bytes)) => Some(Cow::Borrowed(bytes.as_slice())),
        Some(Data::String(text)) => Some(Cow::Borrowed(text.as_bytes())),
        Some(Data::Json(json)) => Some(Cow::Owned(serde_json::to_vec(json)?)),
        None => None,
    })
}

/// The structured-mode JSON of `event` as a value, keys sorted, JSON data under `data`.
pub fn structured_value(event: &Event) -> Result<Value, serde_json::Error> {
    let mut value = serde_json::to_value(event)?;
    if let (Some(Data::Binary(bytes)), true, Some(map)) = (
        event.data(),
        event.datacontenttype().is_some_and(is_json),
        value.as_object_mut(),
    ) {
        map.remove("data_base64");
        map.insert("data".to_owned(), serde_json::from_slice(bytes)?);
    }
    Ok(value)
}

/// Whether a content type is JSON (`application/json`, `+json` suffixes, parameters ignored).
fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
        || essence.to_ascii_lowercase().ends_with("+json")
}

/// The structured-mode JSON of `event` (`application/cloudevents+json`), keys sorted.
pub(crate) fn structured(event: &Event) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec(&structured_value(event)?)
}

/// The batched-mode JSON of `events` (`application/cloudevents-batch+json`): an array of
/// structured events, keys sorted.
pub(crate) fn batch<'a>(
    events: impl IntoIterator<Item = &'a Event>,
) -> Result<Vec<u8>, serde_json::Error> {
    let values = events
        .into_iter()
        .map(structured_value)
        .collect::<Result<Vec<_>, _>>()?;
    serde_json::to_vec(&values)
}

#[cfg(test)]
mod tests {
    use cloudevents::{EventBuilder, EventBuilderV10};
    use serde_json::json;

    use super::*;

    #[test]
    fn header_names_follow_each_binding() {
        for binding in [Binding::Kafka, Binding::Http] {
            assert_eq!(header_name(binding, "datacontenttype"), "content-type");
        }
        assert_eq!(header_name(Binding::Kafka, "id"), "ce_id");
        assert_eq!(
            header_name(Binding::Http, "partitionkey"),
            "ce-partitionkey"
        );
        // A name no published event has is made, not looked up.
        assert_eq!(header_name(Binding::Kafka, "traceparent"), "ce_traceparent");
        assert_eq!(header_name(Binding::Http, "traceparent"), "ce-traceparent");
    }

    fn event(data: Data) -> Event {
        let builder = EventBuilderV10::new()
            .id("1")
            .ty("io.ankusa.route.created")
            .source("urn:n");
        match data {
            Data::Binary(b) => builder.data("application/json", b),
            Data::Json(j) => builder.data("application/json", j),
            Data::String(s) => builder.data("text/plain", s),
        }
        .build()
        .unwrap()
    }

    #[test]
    fn json_bytes_and_json_values_encode_alike() {
        let data = json!({"action": "route.create", "entity": {"id": "r1"}, "revision": 1});
        let bytes = serde_json::to_vec(&data).unwrap();
        let from_bytes = structured(&event(Data::Binary(bytes))).unwrap();
        let from_value = structured(&event(Data::Json(data.clone()))).unwrap();
        assert_eq!(from_bytes, from_value);
        let parsed: Value = serde_json::from_slice(&from_bytes).unwrap();
        assert_eq!(parsed["data"], data);
        assert!(parsed.get("data_base64").is_none());
    }

    #[test]
    fn other_data_is_left_to_the_sdk() {
        let e = EventBuilderV10::new()
            .id("1")
            .ty("t")
            .source("urn:n")
            .data("application/octet-stream", vec![0u8, 159, 146])
            .build()
            .unwrap();
        let v = structured_value(&e).unwrap();
        assert_eq!(v["data_base64"], "AJ+S");
        assert!(v.get("data").is_none());
        assert!(is_json("application/cloudevents+json; charset=utf-8"));
        assert!(!is_json("text/plain"));
    }
}
