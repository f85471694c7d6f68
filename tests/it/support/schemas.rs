//! Every lifecycle event a test sees, held to the JSON Schema its `dataschema` names: the
//! schemas the node embeds and serves (`ankusa::api::schemas`), compiled once with the
//! `jsonschema` crate, resolved among themselves (never fetched).
//!
//! [`check`] takes an event in structured mode (a file sink's line, a webhook's structured
//! body); [`check_event`] a decoded CloudEvent (a Kafka record, a binary webhook request). An
//! event type without a schema, a `dataschema` other than its schema's `$id`, or data the
//! schema refuses fails the test, naming the event and every error.

use std::collections::HashMap;
use std::sync::LazyLock;

use ankusa::api::schemas::SCHEMAS;
use ankusa::lifecycle::event::{dataschema, SCHEMA_BASE};
use jsonschema::{Registry, Validator};
use serde_json::Value;

/// A validator per event type, built once for the whole test binary.
static VALIDATORS: LazyLock<HashMap<&'static str, Validator>> = LazyLock::new(|| {
    let parsed = |text: &str| -> Value { serde_json::from_str(text).expect("a schema is JSON") };
    let registry = SCHEMAS
        .iter()
        .fold(Registry::new(), |r, s| {
            r.add(format!("{SCHEMA_BASE}{}", s.name), parsed(s.text))
                .expect("a schema registers")
        })
        .prepare()
        .expect("the schemas resolve among themselves");
    SCHEMAS
        .iter()
        .filter_map(|s| {
            let ty = s.event_type?;
            let validator = jsonschema::draft202012::options()
                .with_registry(&registry)
                .should_validate_formats(true)
                .build(&parsed(s.text))
                .unwrap_or_else(|e| panic!("{}: {e}", s.name));
            Some((ty, validator))
        })
        .collect()
});

/// Hold the data of an event of type `ty` that names `schema` to that schema. `what` names
/// the event in a failure.
pub fn check_data(what: &str, ty: &str, schema: Option<&str>, data: &Value) {
    let validator = VALIDATORS
        .get(ty)
        .unwrap_or_else(|| panic!("{what}: no schema for event type {ty}"));
    assert_eq!(
        schema,
        Some(dataschema(ty).as_str()),
        "{what}: dataschema of {ty}"
    );
    let errors: Vec<String> = validator
        .iter_errors(data)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what}: {ty} data does not match its schema:\n{}\n{data}",
        errors.join("\n")
    );
}

/// Hold a structured-mode event to its schema.
pub fn check(event: &Value) {
    let what = format!("event {}", event["id"]);
    let ty = event["type"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no type"));
    check_data(&what, ty, event["dataschema"].as_str(), &event["data"]);
}

/// Hold every structured-mode event of `events` to its schema.
pub fn check_all<'a>(events: impl IntoIterator<Item = &'a Value>) {
    for event in events {
        check(event);
    }
}

/// Hold a decoded CloudEvent to its schema.
pub fn check_event(event: &cloudevents::Event) {
    check(&ankusa_sinks::structured_value(event).expect("an event encodes"));
}

/// Read every record of `topic` (partitions `0..partitions`) until none comes for `quiet`,
/// hold each event to its schema (tombstones, null values, have none), and return the events'
/// headers in the order read.
pub async fn check_topic(
    brokers: &str,
    topic: &str,
    partitions: i32,
    quiet: std::time::Duration,
) -> Vec<HashMap<String, String>> {
    use cloudevents::binding::rdkafka::MessageExt;
    use rdkafka::Message;

    let reader = super::kafka::kafka_reader(brokers, topic, partitions);
    let mut read = Vec::new();
    while let Ok(m) = tokio::time::timeout(quiet, reader.recv()).await {
        let m = m.expect("a record");
        if m.payload().is_none() {
            continue;
        }
        check_event(&m.to_event().expect("a CloudEvent"));
        read.push(super::kafka::kafka_headers(&m));
    }
    read
}

/// Hold the event(s) of a webhook request to their schemas, in the request's mode: binary
/// (`ce-` headers, the data as the body), structured or batch. Returns their types.
pub fn check_request(request: &ankusa_sinks::test_support::Recorded) -> Vec<String> {
    let body: Value = serde_json::from_slice(&request.body).expect("a JSON body");
    match request.header("content-type") {
        "application/json" => {
            let ty = request.header("ce-type");
            let what = format!("request {}", request.header("ce-id"));
            check_data(&what, ty, Some(request.header("ce-dataschema")), &body);
            vec![ty.to_owned()]
        }
        "application/cloudevents+json" => {
            check(&body);
            vec![body["type"].as_str().unwrap().to_owned()]
        }
        "application/cloudevents-batch+json" => {
            let events = body.as_array().expect("a batch is an array");
            check_all(events);
            events
                .iter()
                .map(|e| e["type"].as_str().unwrap().to_owned())
                .collect()
        }
        other => panic!("a webhook request of content type {other}"),
    }
}
