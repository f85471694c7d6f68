//! Sample lifecycle events for the sinks' tests, shaped like the publisher's: the same
//! attributes and extensions, so a test that passes here exercises what production sends.

use chrono::{DateTime, TimeZone, Utc};
use cloudevents::{EventBuilder, EventBuilderV10};
use uuid::Uuid;

use crate::Delivery;

/// The incarnation id of every sample event.
pub(crate) const INCARNATION: &str = "7f1c6a2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b";

/// The node URI of every sample event.
pub(crate) const SOURCE: &str = "urn:ankusa:node:test-1";

/// The `dataschema` of every sample event (a `route.created`).
pub(crate) const DATASCHEMA: &str = "https://ankusa.io/schemas/io.ankusa.route.created.v1.json";

/// The event id the publisher would give `seq`: UUIDv5(incarnation, seq in decimal).
pub(crate) fn event_id(seq: u64) -> String {
    let incarnation = Uuid::parse_str(INCARNATION).unwrap();
    Uuid::new_v5(&incarnation, seq.to_string().as_bytes()).to_string()
}

/// The `time` of the sample event for `seq`: 2024-05-06T07:08:09Z plus `seq` seconds.
pub(crate) fn event_time(seq: u64) -> DateTime<Utc> {
    let base = Utc.with_ymd_and_hms(2024, 5, 6, 7, 8, 9).unwrap();
    base + chrono::Duration::seconds(i64::try_from(seq).unwrap())
}

/// A `route.created` event for `seq`, partition key `key` (e.g. `acme/r1`).
pub(crate) fn sample(seq: u64, key: &str) -> Delivery {
    let event = EventBuilderV10::new()
        .id(event_id(seq))
        .ty("io.ankusa.route.created")
        .source(SOURCE)
        .subject(format!("routes/{key}"))
        .time(event_time(seq))
        .data_with_schema(
            "application/json",
            DATASCHEMA,
            serde_json::json!({
                "action": "created",
                "revision": seq,
                "route": {"id": key, "upstream": "http://backend:8080"},
            }),
        )
        .extension("sequence", format!("{seq:020}"))
        .extension("incarnation", INCARNATION)
        .extension("partitionkey", key)
        .build()
        .unwrap();
    Delivery { seq, event }
}

/// The exact `data` bytes of [`sample`] (`serde_json` orders object keys).
pub(crate) fn sample_data(seq: u64, key: &str) -> String {
    format!(
        r#"{{"action":"created","revision":{seq},"route":{{"id":"{key}","upstream":"http://backend:8080"}}}}"#
    )
}

/// The exact structured-mode JSON of [`sample`], as the sinks write it (keys sorted).
pub(crate) fn sample_json(seq: u64, key: &str) -> String {
    format!(
        concat!(
            r#"{{"data":{data},"datacontenttype":"application/json","dataschema":"{schema}","#,
            r#""id":"{id}","#,
            r#""incarnation":"{inc}","partitionkey":"{key}","sequence":"{seq:020}","#,
            r#""source":"{src}","specversion":"1.0","subject":"routes/{key}","#,
            r#""time":"{time}","type":"io.ankusa.route.created"}}"#
        ),
        data = sample_data(seq, key),
        schema = DATASCHEMA,
        id = event_id(seq),
        inc = INCARNATION,
        key = key,
        seq = seq,
        src = SOURCE,
        time = event_time(seq).format("%Y-%m-%dT%H:%M:%SZ"),
    )
}
