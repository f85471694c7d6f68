//! The lifecycle events' machine-readable descriptions: a JSON Schema (draft 2020-12) of each
//! event type's `data` (`schemas/`) and the AsyncAPI 3.0 document of the sinks' channels
//! (`asyncapi/lifecycle-v1.json`), embedded in the binary and served without a token, like the
//! OpenAPI document: an API's description is public.
//!
//! Each event's `dataschema` is its schema's `$id`, `https://ankusa.io/schemas/<name>`
//! ([`crate::lifecycle::event::dataschema`]): fixed, so it names the same schema wherever the
//! node runs and whatever its `node.uri`. `<name>` is the file in `schemas/` and the path under
//! `/admin/v1/schemas/`; the schemas refer to one another by relative `$ref`, which resolves
//! alike against either base. The AsyncAPI document refers to them as `schemas/<name>`, which
//! resolves beside it both as served (`/admin/v1/asyncapi.json`) and as kept
//! (`asyncapi/schemas` links to `schemas/`), so a stock parser reads it with nothing fetched
//! from elsewhere (`scripts/check-asyncapi`).

use axum::http::header;
use axum::response::IntoResponse;

use super::error::ApiError;
use super::extract::ApiPath;

/// One JSON Schema document of `schemas/`.
#[derive(Debug, Clone, Copy)]
pub struct Schema {
    /// Its file name, the last segment of its `$id` and of its path under `/admin/v1/schemas/`.
    pub name: &'static str,
    /// The event type whose `data` it describes; `None` for the parts the others refer to.
    pub event_type: Option<&'static str>,
    /// The document.
    pub text: &'static str,
}

/// `schemas/<name>`, describing the data of `event_type` (if any).
macro_rules! schema {
    ($name:literal, $event_type:expr) => {
        Schema {
            name: $name,
            event_type: $event_type,
            text: include_str!(concat!("../../schemas/", $name)),
        }
    };
}

/// Every schema the node serves: one per event type it publishes, and the parts they share.
pub const SCHEMAS: &[Schema] = &[
    schema!("common.v1.json", None),
    schema!("route.v1.json", None),
    schema!("source.v1.json", None),
    schema!(
        "io.ankusa.route.created.v1.json",
        Some("io.ankusa.route.created")
    ),
    schema!(
        "io.ankusa.route.updated.v1.json",
        Some("io.ankusa.route.updated")
    ),
    schema!(
        "io.ankusa.route.deleted.v1.json",
        Some("io.ankusa.route.deleted")
    ),
    schema!(
        "io.ankusa.route.refreshed.v1.json",
        Some("io.ankusa.route.refreshed")
    ),
    schema!(
        "io.ankusa.source.created.v1.json",
        Some("io.ankusa.source.created")
    ),
    schema!(
        "io.ankusa.source.updated.v1.json",
        Some("io.ankusa.source.updated")
    ),
    schema!(
        "io.ankusa.source.deleted.v1.json",
        Some("io.ankusa.source.deleted")
    ),
    schema!(
        "io.ankusa.source.refreshed.v1.json",
        Some("io.ankusa.source.refreshed")
    ),
    schema!(
        "io.ankusa.instance.restored.v1.json",
        Some("io.ankusa.instance.restored")
    ),
    schema!(
        "io.ankusa.snapshot.started.v1.json",
        Some("io.ankusa.snapshot.started")
    ),
    schema!(
        "io.ankusa.snapshot.finished.v1.json",
        Some("io.ankusa.snapshot.finished")
    ),
    schema!(
        "io.ankusa.trail.checkpoint.v1.json",
        Some("io.ankusa.trail.checkpoint")
    ),
];

/// The AsyncAPI document of the lifecycle channels, kept in the repository.
pub const ASYNCAPI: &str = include_str!("../../asyncapi/lifecycle-v1.json");

/// The schema named `name`.
pub fn named(name: &str) -> Option<&'static Schema> {
    SCHEMAS.iter().find(|s| s.name == name)
}

/// The schema of the data of event type `event_type`.
pub fn of_type(event_type: &str) -> Option<&'static Schema> {
    SCHEMAS.iter().find(|s| s.event_type == Some(event_type))
}

/// `GET /admin/v1/schemas/{name}`: one schema, public like the OpenAPI document.
pub(crate) async fn get(ApiPath(name): ApiPath<String>) -> Result<impl IntoResponse, ApiError> {
    let schema =
        named(&name).ok_or_else(|| ApiError::NotFound("no schema has this name".to_owned()))?;
    Ok((
        [(header::CONTENT_TYPE, "application/schema+json")],
        schema.text,
    ))
}

/// `GET /admin/v1/asyncapi.json`: the AsyncAPI document, public like the OpenAPI document.
pub(crate) async fn asyncapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], ASYNCAPI)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::Value;

    use super::*;
    use crate::lifecycle::event::{dataschema, event_type, SCHEMA_BASE};
    use crate::lifecycle::outbox::EventRow;

    fn parsed(schema: &Schema) -> Value {
        serde_json::from_str(schema.text)
            .unwrap_or_else(|e| panic!("{} is not JSON: {e}", schema.name))
    }

    /// A flagged row of `action`, flagged by reconcile or not.
    fn row(action: &str, refresh: bool) -> EventRow<'static> {
        EventRow {
            seq: 1,
            at: 1,
            action: action.to_owned().into(),
            tenant: None,
            resource: "r".into(),
            revision: None,
            publish: true,
            refresh,
            version: None,
            store: None,
            snapshot: None,
            traceparent: None,
            tracestate: None,
        }
    }

    /// Every action a flagged row can have, and whether settlement may flag it `refresh`,
    /// where the code gives a change an entity: `subjects::change::apply` (a local source's
    /// create, update, delete) and `change::snapshot_item` (`source.refresh`);
    /// `subjects::remote::write` (a route's or Redis source's dual write, which settlement
    /// flags `refresh` when it found the subject changed meanwhile); `audit::restore::refresh`
    /// (`<kind>.refresh`); `audit::restore::first_boot` (`instance.restore`);
    /// `subjects::snapshot` (`snapshot.start`, `snapshot.finish`); the trail's checkpoints
    /// (`trail.checkpoint`).
    const FLAGGED: &[(&str, bool)] = &[
        ("route.create", true),
        ("route.update", true),
        ("route.delete", true),
        ("route.refresh", false),
        ("source.create", true),
        ("source.update", true),
        ("source.delete", true),
        ("source.refresh", false),
        ("instance.restore", false),
        ("snapshot.start", false),
        ("snapshot.finish", false),
        ("trail.checkpoint", false),
    ];

    #[test]
    fn every_schema_is_a_valid_draft_2020_12_schema_with_its_id() {
        let registry = SCHEMAS.iter().fold(jsonschema::Registry::new(), |r, s| {
            r.add(format!("{SCHEMA_BASE}{}", s.name), parsed(s))
                .unwrap()
        });
        let registry = registry.prepare().unwrap();
        for schema in SCHEMAS {
            let doc = parsed(schema);
            assert_eq!(
                doc["$schema"], "https://json-schema.org/draft/2020-12/schema",
                "{}",
                schema.name
            );
            assert_eq!(doc["$id"], format!("{SCHEMA_BASE}{}", schema.name));
            if let Err(e) = jsonschema::draft202012::meta::validate(&doc) {
                panic!("{} is not a valid draft 2020-12 schema: {e}", schema.name);
            }
            // Every `$ref` resolves among the served schemas (none is fetched).
            let built = jsonschema::draft202012::options()
                .with_registry(&registry)
                .build(&doc);
            if let Err(e) = built {
                panic!("{} does not build: {e}", schema.name);
            }
        }
    }

    #[test]
    fn every_type_a_flagged_row_can_have_has_a_schema_named_by_its_dataschema() {
        let mut types = BTreeSet::new();
        for &(action, settled) in FLAGGED {
            types.insert(event_type(&row(action, false)));
            if settled {
                types.insert(event_type(&row(action, true)));
            }
        }
        for ty in &types {
            let schema = of_type(ty).unwrap_or_else(|| panic!("no schema for {ty}"));
            assert_eq!(dataschema(ty), format!("{SCHEMA_BASE}{}", schema.name));
            assert_eq!(parsed(schema)["$id"], dataschema(ty));
        }
        // And no schema describes a type the node never publishes.
        let described: BTreeSet<String> = SCHEMAS
            .iter()
            .filter_map(|s| s.event_type.map(str::to_owned))
            .collect();
        assert_eq!(described, types);
        assert_eq!(types.len(), 12);
    }

    #[test]
    fn schemas_are_found_by_name_and_type() {
        let created = named("io.ankusa.route.created.v1.json").unwrap();
        assert_eq!(created.event_type, Some("io.ankusa.route.created"));
        assert_eq!(
            of_type("io.ankusa.route.created").unwrap().name,
            created.name
        );
        assert!(named("route.v1.json").unwrap().event_type.is_none());
        assert!(named("../Cargo.toml").is_none());
        assert!(of_type("io.ankusa.route.renamed").is_none());
    }
}
