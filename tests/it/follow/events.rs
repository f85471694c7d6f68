//! Lifecycle events of the replica contract, built as the publisher builds them (JSON data
//! as bytes, `datacontenttype: application/json`), and the sink deliveries that carry them.

use ankusa_sinks::Delivery;
use cloudevents::{Event, EventBuilder, EventBuilderV10};
use serde_json::{json, Value};

/// The shared (Redis) store of the scenarios.
pub const FLEET: &str = "redis:7f9c0d2e-5b1a-4c3e-9a60-2f1d8e7c4b10";
/// A node's own store (its local sources): the node's `source`.
pub const NODE: &str = "urn:ankusa:node-a";

/// A route or source event: `verb` of `tenant/<plural>/id` at `version` in `store`.
pub fn subject(seq: u64, verb: &str, key: &str, store: &str, version: u64, entity: Value) -> Event {
    let kind = if key.contains("/sources/") {
        "source"
    } else {
        "route"
    };
    let action = match verb {
        "created" => "create",
        "deleted" => "delete",
        _ => "update",
    };
    let action = format!("{kind}.{action}");
    let data = json!({"action": action, "entity": entity, "revision": 1});
    base(seq, &format!("io.ankusa.{kind}.{verb}"), key, data)
        .extension("subjectversion", format!("{version:020}"))
        .extension("subjectstore", store)
        .build()
        .unwrap()
}

/// A `refreshed` item of snapshot `snapshot`.
pub fn item(
    seq: u64,
    key: &str,
    store: &str,
    version: u64,
    entity: Value,
    snapshot: &str,
) -> Event {
    let mut event = subject(seq, "refreshed", key, store, version, entity);
    event.set_extension("snapshot", snapshot);
    event
}

/// `io.ankusa.snapshot.started` of `id`, covering the routes of [`FLEET`] at `floor`.
pub fn started(seq: u64, id: &str, floor: u64) -> Event {
    let stores = json!([{"kind": "route", "store": FLEET, "floor": format!("{floor:020}")}]);
    let data = json!({"action": "snapshot.start", "entity": {"id": id, "stores": stores}, "revision": null});
    base(
        seq,
        "io.ankusa.snapshot.started",
        &format!("snapshots/{id}"),
        data,
    )
    .build()
    .unwrap()
}

/// `io.ankusa.snapshot.finished` of `id` with `count` items.
pub fn finished(seq: u64, id: &str, count: u64) -> Event {
    let data = json!({"action": "snapshot.finish", "entity": {"id": id, "count": count}, "revision": null});
    base(
        seq,
        "io.ankusa.snapshot.finished",
        &format!("snapshots/{id}"),
        data,
    )
    .build()
    .unwrap()
}

/// `io.ankusa.instance.restored`: the replica ignores it.
pub fn restored(seq: u64) -> Event {
    let data =
        json!({"action": "instance.restore", "entity": {"restored_seq": 3}, "revision": null});
    base(seq, "io.ankusa.instance.restored", "instance", data)
        .build()
        .unwrap()
}

fn base(seq: u64, ty: &str, key: &str, data: Value) -> EventBuilderV10 {
    EventBuilderV10::new()
        .id(format!("00000000-0000-4000-8000-{seq:012}"))
        .ty(ty)
        .source(NODE)
        .subject(key.split_once('/').map_or(key, |(_, rest)| rest))
        .time(chrono::DateTime::from_timestamp_millis(1_700_000_000_000 + seq as i64).unwrap())
        .data("application/json", serde_json::to_vec(&data).unwrap())
        .extension("sequence", format!("{seq:020}"))
        .extension("incarnation", "6f1c2f9e-9a43-4d7e-8a37-0f4f8d1b2c3d")
        .extension("partitionkey", key)
}

/// A route's entity.
pub fn route(id: &str, destination: &str) -> Value {
    json!({"id": id, "tenant": "acme", "source": "s1", "destination": destination,
           "filter": {}, "enabled": true, "revision": 1})
}

/// Sink deliveries of `events`, seq in order.
pub fn deliveries(events: &[Event]) -> Vec<Delivery> {
    events
        .iter()
        .enumerate()
        .map(|(i, event)| Delivery {
            seq: i as u64 + 1,
            event: event.clone(),
        })
        .collect()
}

/// The scenario both consumers are fed, in the order sent: creates, updates, a delete and
/// a re-create, duplicates and stale redeliveries, an ignored type, and a snapshot (floor 10)
/// that prunes r4 (its delete never published) and bumps the deleted r3 to the floor.
pub fn scenario() -> Vec<Event> {
    let r = |id: &str| format!("acme/routes/{id}");
    vec![
        subject(
            1,
            "created",
            &r("r1"),
            FLEET,
            1,
            route("r1", "http://a.example/1"),
        ),
        subject(
            2,
            "created",
            &r("r2"),
            FLEET,
            2,
            route("r2", "http://a.example/2"),
        ),
        subject(
            3,
            "created",
            &r("r3"),
            FLEET,
            3,
            route("r3", "http://a.example/3"),
        ),
        subject(
            4,
            "updated",
            &r("r1"),
            FLEET,
            4,
            route("r1", "http://b.example/1"),
        ),
        subject(
            5,
            "deleted",
            &r("r2"),
            FLEET,
            5,
            route("r2", "http://a.example/2"),
        ),
        subject(
            1,
            "created",
            &r("r1"),
            FLEET,
            1,
            route("r1", "http://a.example/1"),
        ),
        subject(
            6,
            "deleted",
            &r("r3"),
            FLEET,
            6,
            route("r3", "http://a.example/3"),
        ),
        subject(
            7,
            "created",
            &r("r4"),
            FLEET,
            7,
            route("r4", "http://a.example/4"),
        ),
        subject(
            8,
            "created",
            "acme/sources/s1",
            NODE,
            1,
            json!({"id": "s1", "secret": "[redacted]"}),
        ),
        restored(9),
        subject(
            10,
            "created",
            &r("r2"),
            FLEET,
            9,
            route("r2", "http://c.example/2"),
        ),
        subject(
            5,
            "deleted",
            &r("r2"),
            FLEET,
            5,
            route("r2", "http://a.example/2"),
        ),
        started(11, "snap-1", 10),
        item(
            12,
            &r("r1"),
            FLEET,
            4,
            route("r1", "http://b.example/1"),
            "snap-1",
        ),
        item(
            13,
            &r("r2"),
            FLEET,
            9,
            route("r2", "http://c.example/2"),
            "snap-1",
        ),
        item(
            13,
            &r("r2"),
            FLEET,
            9,
            route("r2", "http://c.example/2"),
            "snap-1",
        ),
        finished(14, "snap-1", 2),
        subject(
            15,
            "updated",
            &r("r1"),
            FLEET,
            11,
            route("r1", "http://d.example/1"),
        ),
    ]
}

/// The replica the scenario ends on, as the replica file holds it.
pub fn scenario_replica() -> Value {
    let route = |id: &str, d: &str, v: u64| json!({"kind": "route", "version": format!("{v:020}"), "entity": route(id, d)});
    let deleted = |v: u64| json!({"kind": "route", "version": format!("{v:020}"), "entity": null});
    json!({
        "subjects": {
            FLEET: {
                "acme/routes/r1": route("r1", "http://d.example/1", 11),
                "acme/routes/r2": route("r2", "http://c.example/2", 9),
                "acme/routes/r3": deleted(10),
                "acme/routes/r4": deleted(10),
            },
            NODE: {
                "acme/sources/s1": {"kind": "source", "version": format!("{:020}", 1),
                                    "entity": {"id": "s1", "secret": "[redacted]"}},
            },
        },
        "snapshots": {},
        "completed": ["snap-1"],
    })
}
