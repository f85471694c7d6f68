//! Building the CloudEvent of a flagged row.
//!
//! The id is `UUIDv5(namespace = the incarnation id of the row's seq, name = seq in decimal)`:
//! the same row always gets the same id (so a redelivery carries it, and consumers dedupe),
//! and a seq re-issued after a restore gets a different one (its incarnation differs).

use std::collections::HashMap;
use std::sync::{LazyLock, RwLock};

use chrono::{DateTime, Utc};
use cloudevents::{Event, EventBuilder, EventBuilderV10};
use sha1::{Digest, Sha1};
use url::Url;
use uuid::Uuid;

use super::outbox::EventRow;
use crate::audit::History;
use crate::telemetry::trace;

/// Why an event could not be built (a row the trail should never hold).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the event of row {seq}: {detail}")]
pub struct EventError {
    /// The row.
    pub seq: u64,
    /// What was wrong.
    pub detail: String,
}

/// The event id of row `seq` in incarnation `incarnation`: the UUIDv5 of the seq in decimal
/// in the incarnation's namespace. `Uuid::new_v5` computes the same id, but with a portable
/// SHA-1; the `sha1` crate uses the CPU's SHA extensions where it has them, and the id is
/// computed for every event of every sink.
pub fn event_id(incarnation: Uuid, seq: u64) -> Uuid {
    let digest = Sha1::new()
        .chain_update(incarnation.as_bytes())
        .chain_update(itoa::Buffer::new().format(seq))
        .finalize();
    let mut bytes = uuid::Bytes::default();
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_sha1_bytes(bytes).into_uuid()
}

/// A UUID in its hyphenated lower-case text form.
fn uuid_text(id: Uuid) -> String {
    id.hyphenated()
        .encode_lower(&mut Uuid::encode_buffer())
        .to_owned()
}

/// The event type of a row: `io.ankusa.<kind>.<past tense of the verb>`, or
/// `io.ankusa.<kind>.refreshed` for a row flagged by reconcile (and a snapshot's items).
pub fn event_type(row: &EventRow<'_>) -> String {
    let (kind, verb) = row.action.split_once('.').unwrap_or((&row.action, ""));
    let past = match verb {
        _ if row.refresh => "refreshed",
        "create" => "created",
        "update" => "updated",
        "delete" => "deleted",
        "restore" => "restored",
        "refresh" => "refreshed",
        "start" => "started",
        "finish" => "finished",
        other => other,
    };
    [PREFIX, kind, ".", past].concat()
}

/// What every event type starts with.
const PREFIX: &str = "io.ankusa.";

/// Where the JSON Schemas of the events' data are named (`schemas/`, served under
/// `/admin/v1/schemas/`). Fixed, not derived from `node.uri`: a type's schema keeps its
/// identifier when a node moves, and is the same for every node of a fleet.
pub const SCHEMA_BASE: &str = "https://ankusa.io/schemas/";

/// The `dataschema` of an event of type `ty`: the `$id` of the JSON Schema of its data,
/// `<SCHEMA_BASE><ty>.v1.json`. A change to a type's data that a v1 reader would refuse
/// gets a new version, and so a new URI.
pub fn dataschema(ty: &str) -> String {
    [SCHEMA_BASE, ty, ".v1.json"].concat()
}

/// [`dataschema`] parsed, once per type: parsing it took about 0.5 µs an event on the bench
/// machine, a clone of the parsed one about 0.05 µs. There are a dozen types, so the map
/// stays small.
fn dataschema_url(ty: &str) -> Result<Url, url::ParseError> {
    static PARSED: LazyLock<RwLock<HashMap<String, Url>>> = LazyLock::new(Default::default);
    // A map of parsed URIs is valid whatever a panic interrupted.
    if let Some(url) = PARSED.read().unwrap_or_else(|e| e.into_inner()).get(ty) {
        return Ok(url.clone());
    }
    let url = Url::parse(&dataschema(ty))?;
    let mut parsed = PARSED.write().unwrap_or_else(|e| e.into_inner());
    Ok(parsed.entry(ty.to_owned()).or_insert(url).clone())
}

/// The partition key: `tenant/resource` (the Kafka record key; per-key order is kept).
pub fn partition_key(row: &EventRow<'_>) -> String {
    match &row.tenant {
        Some(t) => [t, "/", &row.resource].concat(),
        None => row.resource.to_string(),
    }
}

/// The `sequence` (and `subjectversion`) extension: the number zero-padded to 20 digits
/// (every `u64` fits), so it sorts as a string.
pub fn sequence(seq: u64) -> String {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(seq);
    let mut out = String::with_capacity(20);
    out.extend(std::iter::repeat_n('0', 20 - digits.len()));
    out.push_str(digits);
    out
}

/// The event's data: `{"action", "entity", "revision"}` as JSON bytes, with the stored
/// entity's bytes (compact JSON, keys sorted, as the writer stored it) spliced in unparsed.
/// The same bytes `serde_json::to_vec(&json!({...}))` gives, without building a value.
pub fn data(row: &EventRow<'_>, entity: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entity.len() + row.action.len() + 48);
    out.extend_from_slice(br#"{"action":"#);
    serde_json::to_writer(&mut out, row.action.as_ref()).expect("a string always serializes");
    out.extend_from_slice(br#","entity":"#);
    out.extend_from_slice(entity);
    out.extend_from_slice(br#","revision":"#);
    serde_json::to_writer(&mut out, &row.revision).expect("a number always serializes");
    out.push(b'}');
    out
}

/// Build the event of `row`, whose redacted entity is `entity` (its stored JSON bytes),
/// published by node `source`. The data is JSON bytes
/// (`Data::Binary`, `datacontenttype: application/json`): binary modes send them as they are.
pub fn build(
    row: &EventRow<'_>,
    entity: &[u8],
    history: &History,
    source: &str,
) -> Result<Event, EventError> {
    let err = |detail: String| EventError {
        seq: row.seq,
        detail,
    };
    let incarnation = history.of(row.seq).id;
    let time: DateTime<Utc> = DateTime::from_timestamp_millis(row.at as i64)
        .ok_or_else(|| err(format!("bad time {}", row.at)))?;
    let data = data(row, entity);
    let ty = event_type(row);
    let schema = dataschema_url(&ty).map_err(|e| err(format!("bad type {ty}: {e}")))?;
    let mut event = EventBuilderV10::new()
        .id(uuid_text(event_id(incarnation, row.seq)))
        .ty(ty)
        .source(source)
        .subject(row.resource.as_ref())
        .time(time)
        .data_with_schema("application/json", schema, data)
        .extension("sequence", sequence(row.seq))
        .extension("incarnation", uuid_text(incarnation))
        .extension("partitionkey", partition_key(row));
    if let Some(version) = row.version {
        // A node's own stores are named by the node: its source.
        let store = row.store.as_deref().unwrap_or(source);
        event = event
            .extension("subjectversion", sequence(version))
            .extension("subjectstore", store);
    }
    if let Some(snapshot) = row.snapshot.as_deref() {
        event = event.extension("snapshot", snapshot);
    }
    // The CloudEvents distributed-tracing extension: the change's trace, as its row keeps it.
    if let Some(traceparent) = row.traceparent.as_deref() {
        event = event.extension("traceparent", traceparent);
    }
    // A row written before tracestate was bounded may hold a longer one: receivers refuse
    // such headers (431), so it is not passed on.
    if let Some(tracestate) = row
        .tracestate
        .as_deref()
        .filter(|t| trace::tracestate_fits(t))
    {
        event = event.extension("tracestate", tracestate);
    }
    event.build().map_err(|e| err(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::Incarnation;
    use cloudevents::AttributesReader;
    use serde_json::{json, Value};

    fn row(seq: u64, action: &str) -> EventRow<'static> {
        EventRow {
            seq,
            at: 1_700_000_000_123,
            action: action.to_owned().into(),
            tenant: Some("t1".into()),
            resource: "routes/r1".into(),
            revision: Some(3),
            publish: true,
            refresh: false,
            version: None,
            store: None,
            snapshot: None,
            traceparent: None,
            tracestate: None,
        }
    }

    #[test]
    fn types_follow_the_action() {
        assert_eq!(
            event_type(&row(1, "route.create")),
            "io.ankusa.route.created"
        );
        assert_eq!(
            event_type(&row(1, "source.update")),
            "io.ankusa.source.updated"
        );
        assert_eq!(
            event_type(&row(1, "route.delete")),
            "io.ankusa.route.deleted"
        );
        assert_eq!(
            event_type(&row(1, "instance.restore")),
            "io.ankusa.instance.restored"
        );
        let mut r = row(1, "route.update");
        r.refresh = true;
        assert_eq!(event_type(&r), "io.ankusa.route.refreshed");
        assert_eq!(
            event_type(&row(1, "source.refresh")),
            "io.ankusa.source.refreshed"
        );
        assert_eq!(
            event_type(&row(1, "snapshot.start")),
            "io.ankusa.snapshot.started"
        );
        assert_eq!(
            event_type(&row(1, "snapshot.finish")),
            "io.ankusa.snapshot.finished"
        );
    }

    #[test]
    fn sequences_are_twenty_digits_and_ids_their_text() {
        for seq in [0, 7, 1_000_000, u64::MAX] {
            assert_eq!(sequence(seq), format!("{seq:020}"));
        }
        assert_eq!(sequence(42), "00000000000000000042");
        let inc = Uuid::parse_str("6f1c2f9e-9a43-4d7e-8a37-0f4f8d1b2c3d").unwrap();
        assert_eq!(uuid_text(inc), inc.to_string());
        assert_eq!(
            event_id(inc, 42),
            Uuid::new_v5(&inc, b"42"),
            "the name is the seq in decimal"
        );
        // RFC 9562's UUIDv5 of "42" in that namespace, as another implementation
        // (Python's uuid.uuid5) gives it.
        assert_eq!(
            event_id(inc, 42).to_string(),
            "513193b0-c29b-5ba4-b778-b646a83e93ed"
        );
        let mut r = row(1, "route.update");
        r.tenant = None;
        assert_eq!(partition_key(&r), "routes/r1");
        assert_eq!(partition_key(&row(1, "route.update")), "t1/routes/r1");
    }

    proptest::proptest! {
        #[test]
        fn ids_are_the_uuidv5_of_the_seq_in_the_incarnation(
            incarnation: [u8; 16],
            seq: u64,
        ) {
            let incarnation = Uuid::from_bytes(incarnation);
            proptest::prop_assert_eq!(
                event_id(incarnation, seq),
                Uuid::new_v5(&incarnation, seq.to_string().as_bytes())
            );
        }
    }

    #[test]
    fn event_carries_every_attribute() {
        let inc = Uuid::parse_str("6f1c2f9e-9a43-4d7e-8a37-0f4f8d1b2c3d").unwrap();
        let history = History(vec![Incarnation {
            from: 1,
            id: inc,
            base: 0,
        }]);
        let e = build(
            &row(42, "route.update"),
            br#"{"id":"r1"}"#,
            &history,
            "urn:n",
        )
        .unwrap();
        assert_eq!(e.id(), event_id(inc, 42).to_string());
        assert_eq!(e.id(), Uuid::new_v5(&inc, b"42").to_string());
        assert_eq!(e.ty(), "io.ankusa.route.updated");
        assert_eq!(e.source().to_string(), "urn:n");
        assert_eq!(e.subject(), Some("routes/r1"));
        assert_eq!(e.time().unwrap().timestamp_millis(), 1_700_000_000_123);
        assert_eq!(e.datacontenttype(), Some("application/json"));
        assert_eq!(
            e.dataschema().map(|u| u.as_str()),
            Some("https://ankusa.io/schemas/io.ankusa.route.updated.v1.json")
        );
        assert_eq!(
            e.extension("sequence").unwrap().to_string(),
            "00000000000000000042"
        );
        assert_eq!(
            e.extension("incarnation").unwrap().to_string(),
            inc.to_string()
        );
        assert_eq!(
            e.extension("partitionkey").unwrap().to_string(),
            "t1/routes/r1"
        );
        let data: Value = match e.data().unwrap() {
            cloudevents::Data::Binary(bytes) => serde_json::from_slice(bytes).unwrap(),
            other => panic!("unexpected data {other:?}"),
        };
        assert_eq!(
            data,
            json!({"action": "route.update", "revision": 3, "entity": {"id": "r1"}})
        );
    }

    #[test]
    fn subject_events_carry_their_version_store_and_snapshot() {
        let inc = Uuid::new_v4();
        let history = History(vec![Incarnation {
            from: 1,
            id: inc,
            base: 0,
        }]);
        let ext = |e: &Event, name: &str| e.extension(name).map(|v| v.to_string());
        // No version: no version extensions (rows written before versions existed).
        let plain = build(&row(3, "route.update"), b"{}", &history, "urn:n").unwrap();
        assert_eq!(ext(&plain, "subjectversion"), None);
        assert_eq!(ext(&plain, "subjectstore"), None);
        assert_eq!(ext(&plain, "snapshot"), None);
        // A shared store names itself; the version is 20 digits.
        let mut shared = row(4, "route.update");
        shared.version = Some(1_234);
        shared.store = Some("redis:abc".into());
        shared.snapshot = Some("s-1".into());
        let e = build(&shared, b"{}", &history, "urn:n").unwrap();
        assert_eq!(
            ext(&e, "subjectversion").as_deref(),
            Some("00000000000000001234")
        );
        assert_eq!(ext(&e, "subjectstore").as_deref(), Some("redis:abc"));
        assert_eq!(ext(&e, "snapshot").as_deref(), Some("s-1"));
        // This node's own store is named by its source.
        let mut own = row(5, "source.create");
        own.version = Some(7);
        let e = build(&own, b"{}", &history, "urn:n").unwrap();
        assert_eq!(ext(&e, "subjectstore").as_deref(), Some("urn:n"));
    }

    #[test]
    fn each_type_names_its_own_schema_every_time() {
        let history = History(vec![Incarnation {
            from: 1,
            id: Uuid::new_v4(),
            base: 0,
        }]);
        let schema = |action: &str| {
            let e = build(&row(9, action), b"{}", &history, "urn:n").unwrap();
            e.dataschema().unwrap().to_string()
        };
        for _ in 0..2 {
            assert_eq!(
                schema("route.create"),
                "https://ankusa.io/schemas/io.ankusa.route.created.v1.json"
            );
            assert_eq!(
                schema("snapshot.finish"),
                "https://ankusa.io/schemas/io.ankusa.snapshot.finished.v1.json"
            );
        }
        assert_eq!(
            dataschema("io.ankusa.trail.checkpoint"),
            "https://ankusa.io/schemas/io.ankusa.trail.checkpoint.v1.json"
        );
    }

    #[test]
    fn events_carry_the_trace_of_their_row() {
        let history = History(vec![Incarnation {
            from: 1,
            id: Uuid::new_v4(),
            base: 0,
        }]);
        let ext = |e: &Event, name: &str| e.extension(name).map(|v| v.to_string());
        // No trace in the row (rows written before traces were kept): no extension.
        let plain = build(&row(3, "route.update"), b"{}", &history, "urn:n").unwrap();
        assert_eq!(ext(&plain, "traceparent"), None);
        assert_eq!(ext(&plain, "tracestate"), None);
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let mut traced = row(4, "route.update");
        traced.traceparent = Some(parent.into());
        let e = build(&traced, b"{}", &history, "urn:n").unwrap();
        assert_eq!(ext(&e, "traceparent").as_deref(), Some(parent));
        assert_eq!(ext(&e, "tracestate"), None);
        traced.tracestate = Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7".into());
        let e = build(&traced, b"{}", &history, "urn:n").unwrap();
        assert_eq!(ext(&e, "traceparent").as_deref(), Some(parent));
        assert_eq!(
            ext(&e, "tracestate").as_deref(),
            Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
        );
        // A row kept with a tracestate past W3C's limits: the trace goes on, the state not.
        traced.tracestate = Some(format!("congo={}", "a".repeat(600)).into());
        let e = build(&traced, b"{}", &history, "urn:n").unwrap();
        assert_eq!(ext(&e, "traceparent").as_deref(), Some(parent));
        assert_eq!(ext(&e, "tracestate"), None);
    }

    #[test]
    fn spliced_data_is_the_bytes_a_value_serializes_to() {
        let entity = json!({"id": "r\"1\u{e9}", "filter": {"b": [1, 2.5, null], "a": true}});
        let stored = serde_json::to_vec(&entity).unwrap();
        for (action, revision) in [("route.update", Some(3)), ("instance.restore", None)] {
            let mut r = row(7, action);
            r.revision = revision;
            let expected = json!({"action": action, "revision": revision, "entity": entity});
            assert_eq!(data(&r, &stored), serde_json::to_vec(&expected).unwrap());
        }
    }

    #[test]
    fn ids_are_stable_and_differ_across_incarnations() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        assert_eq!(event_id(a, 7), event_id(a, 7));
        assert_ne!(event_id(a, 7), event_id(b, 7));
        assert_ne!(event_id(a, 7), event_id(a, 8));
    }
}
