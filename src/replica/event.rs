//! What a lifecycle CloudEvent says to a replica: a change of one subject, a snapshot
//! marker, or nothing (an event type the replica does not keep).
//!
//! Reading is strict: an event of a kept type that lacks an extension of the contract, or
//! carries one the contract does not allow, is an [`EventError`] naming the event and the
//! field, so a consumer never guesses at an order it cannot know.

use cloudevents::{AttributesReader, Data, Event};
use serde_json::Value;

use super::snapshot::{Finished, Started};
use super::version::Version;

/// The prefix of every Ankusa event type.
const PREFIX: &str = "io.ankusa.";

/// The kind of subject a replica keeps.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A route (`io.ankusa.route.*`).
    Route,
    /// A source (`io.ankusa.source.*`).
    Source,
}

impl Kind {
    /// The kind named `name` (`route`, `source`), if it is one.
    pub fn parse(name: &str) -> Option<Kind> {
        match name {
            "route" => Some(Kind::Route),
            "source" => Some(Kind::Source),
            _ => None,
        }
    }

    /// The kind's name, as event types and the admin API spell it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Route => "route",
            Kind::Source => "source",
        }
    }
}

/// A change of one subject: what a route or source event says.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// The kind of the subject.
    pub kind: Kind,
    /// The store that issued the version (`subjectstore`).
    pub store: String,
    /// The subject's key (`partitionkey`: `tenant/routes/id`).
    pub key: String,
    /// The subject's version after the change (`subjectversion`).
    pub version: Version,
    /// The subject as it is after the change; `None` when it no longer exists (a `deleted`
    /// event, or a `refreshed` event whose entity is null).
    pub entity: Option<Value>,
    /// The snapshot this event is an item of (`snapshot`), if any.
    pub snapshot: Option<String>,
}

/// What one event means to a replica.
#[derive(Debug, Clone, PartialEq)]
pub enum Meaning {
    /// A route or source changed (or was refreshed).
    Change(Change),
    /// `io.ankusa.snapshot.started`.
    SnapshotStarted(Started),
    /// `io.ankusa.snapshot.finished`.
    SnapshotFinished(Finished),
    /// Any other type (`io.ankusa.instance.restored`, ...): nothing to apply. A restore needs
    /// no action here: versions never repeat, so what it rolled back arrives as new versions
    /// (or as a snapshot that prunes it).
    Ignored,
}

/// An event of a kept type that breaks the contract.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("event {id} ({ty}): {detail}")]
pub struct EventError {
    /// The event's id.
    pub id: String,
    /// The event's type.
    pub ty: String,
    /// What is wrong, naming the field.
    pub detail: String,
}

/// What `event` means to a replica.
pub fn read(event: &Event) -> Result<Meaning, EventError> {
    let err = |detail: String| EventError {
        id: event.id().to_owned(),
        ty: event.ty().to_owned(),
        detail,
    };
    let Some((kind, verb)) = event
        .ty()
        .strip_prefix(PREFIX)
        .and_then(|t| t.split_once('.'))
    else {
        return Ok(Meaning::Ignored);
    };
    match (kind, verb) {
        ("snapshot", "started") => entity(event)
            .and_then(Started::parse)
            .map(Meaning::SnapshotStarted)
            .map_err(err),
        ("snapshot", "finished") => entity(event)
            .and_then(Finished::parse)
            .map(Meaning::SnapshotFinished)
            .map_err(err),
        _ => match (Kind::parse(kind), verb) {
            (Some(kind), "created" | "updated" | "deleted" | "refreshed") => {
                change(event, kind, verb).map(Meaning::Change).map_err(err)
            }
            _ => Ok(Meaning::Ignored),
        },
    }
}

/// The change a route or source event of `verb` says.
fn change(event: &Event, kind: Kind, verb: &str) -> Result<Change, String> {
    let version = extension(event, "subjectversion")?;
    let version = Version::parse(&version)
        .ok_or_else(|| format!("subjectversion {version:?} is not a 20-digit decimal"))?;
    let entity = entity(event)?;
    let entity = match (verb, entity) {
        ("deleted", _) | ("refreshed", Value::Null) => None,
        (_, entity @ Value::Object(_)) => Some(entity),
        (_, other) => {
            return Err(format!(
                "data.entity is {}, not an object",
                json_kind(&other)
            ))
        }
    };
    let snapshot = optional_extension(event, "snapshot");
    if snapshot.is_some() && verb != "refreshed" {
        return Err("only a refreshed event is a snapshot item".into());
    }
    Ok(Change {
        kind,
        store: extension(event, "subjectstore")?,
        key: extension(event, "partitionkey")?,
        version,
        entity,
        snapshot,
    })
}

/// The text of extension `name`, which must be there and not empty.
fn extension(event: &Event, name: &str) -> Result<String, String> {
    optional_extension(event, name).ok_or_else(|| {
        format!("no {name} extension (a node older than the replica contract sent it)")
    })
}

/// The text of extension `name`, if it is there and not empty.
fn optional_extension(event: &Event, name: &str) -> Option<String> {
    event
        .extension(name)
        .map(|v| v.to_string())
        .filter(|v| !v.is_empty())
}

/// The `entity` of the event's data (`{"action", "entity", "revision"}`); `null` when absent.
fn entity(event: &Event) -> Result<Value, String> {
    let data: Value = match event.data() {
        Some(Data::Json(value)) => value.clone(),
        Some(Data::Binary(bytes)) => {
            serde_json::from_slice(bytes).map_err(|e| format!("data is not JSON: {e}"))?
        }
        Some(Data::String(text)) => {
            serde_json::from_str(text).map_err(|e| format!("data is not JSON: {e}"))?
        }
        None => return Err("no data".into()),
    };
    match data {
        Value::Object(mut map) => Ok(map.remove("entity").unwrap_or(Value::Null)),
        other => Err(format!("data is {}, not an object", json_kind(&other))),
    }
}

/// A JSON value's type, for errors (never the value: it may be a subject's content).
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use cloudevents::{EventBuilder, EventBuilderV10};
    use serde_json::json;

    use super::*;

    fn event(ty: &str, data: Value, extensions: &[(&str, &str)]) -> Event {
        let mut builder = EventBuilderV10::new()
            .id("e1")
            .ty(ty)
            .source("urn:n")
            .data("application/json", serde_json::to_vec(&data).unwrap());
        for (name, value) in extensions {
            builder = builder.extension(name, *value);
        }
        builder.build().unwrap()
    }

    const V7: &str = "00000000000000000007";

    fn route(ty: &str, entity: Value) -> Event {
        let ext = [
            ("subjectversion", V7),
            ("subjectstore", "redis:a"),
            ("partitionkey", "t/routes/r1"),
        ];
        event(
            ty,
            json!({"action": "route.x", "entity": entity, "revision": 1}),
            &ext,
        )
    }

    #[test]
    fn route_events_are_changes() {
        let m = read(&route("io.ankusa.route.updated", json!({"id": "r1"}))).unwrap();
        let expected = Change {
            kind: Kind::Route,
            store: "redis:a".into(),
            key: "t/routes/r1".into(),
            version: Version::parse(V7).unwrap(),
            entity: Some(json!({"id": "r1"})),
            snapshot: None,
        };
        assert_eq!(m, Meaning::Change(expected.clone()));
        let deleted = read(&route("io.ankusa.route.deleted", json!({"id": "r1"}))).unwrap();
        assert_eq!(
            deleted,
            Meaning::Change(Change {
                entity: None,
                ..expected.clone()
            })
        );
        let gone = read(&route("io.ankusa.route.refreshed", Value::Null)).unwrap();
        assert_eq!(
            gone,
            Meaning::Change(Change {
                entity: None,
                ..expected
            })
        );
    }

    #[test]
    fn other_types_are_ignored() {
        for ty in [
            "io.ankusa.instance.restored",
            "io.ankusa.override.updated",
            "com.other.x",
        ] {
            assert_eq!(read(&event(ty, json!({}), &[])).unwrap(), Meaning::Ignored);
        }
    }

    #[test]
    fn contract_breaches_are_errors_naming_the_field() {
        let no_version = event("io.ankusa.route.created", json!({"entity": {}}), &[]);
        let e = read(&no_version).unwrap_err();
        assert!(e.to_string().contains("no subjectversion extension"), "{e}");
        let bad = [
            ("subjectversion", "7"),
            ("subjectstore", "s"),
            ("partitionkey", "k"),
        ];
        let e = read(&event(
            "io.ankusa.route.created",
            json!({"entity": {}}),
            &bad,
        ))
        .unwrap_err();
        assert!(e.detail.contains("20-digit"), "{e}");
        let e = read(&route("io.ankusa.route.created", json!("x"))).unwrap_err();
        assert_eq!(e.detail, "data.entity is a string, not an object");
        assert_eq!(e.id, "e1");
    }

    #[test]
    fn snapshot_markers_are_read_whole_or_refused() {
        let floor = json!({"kind": "source", "store": "urn:n", "floor": "00000000000000000004"});
        let data = json!({"entity": {"id": "s1", "stores": [floor]}});
        let Meaning::SnapshotStarted(started) =
            read(&event("io.ankusa.snapshot.started", data, &[])).unwrap()
        else {
            panic!("a started marker");
        };
        assert_eq!(
            (started.id.as_str(), started.stores[0].kind),
            ("s1", Kind::Source)
        );
        let data = json!({"entity": {"id": "s1", "count": 3}});
        let finished = read(&event("io.ankusa.snapshot.finished", data, &[])).unwrap();
        assert_eq!(
            finished,
            Meaning::SnapshotFinished(Finished {
                id: "s1".into(),
                count: 3
            })
        );
        let data = json!({"entity": {"id": "s1", "count": -1}});
        let e = read(&event("io.ankusa.snapshot.finished", data, &[])).unwrap_err();
        assert!(e.detail.starts_with("snapshot.finished entity: "), "{e}");
        let item = [
            ("subjectversion", V7),
            ("subjectstore", "s"),
            ("partitionkey", "k"),
            ("snapshot", "s1"),
        ];
        let e = read(&event(
            "io.ankusa.route.updated",
            json!({"entity": {}}),
            &item,
        ))
        .unwrap_err();
        assert_eq!(e.detail, "only a refreshed event is a snapshot item");
    }
}
