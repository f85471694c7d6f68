//! The lifecycle events' descriptions: each JSON Schema and the AsyncAPI document served
//! without a token, exactly as kept in the repository; every `$ref` of the AsyncAPI document
//! resolving; and one node driven through every kind of change (routes, sources, a snapshot,
//! a backup and its restore) whose events, through every sink and mode (file, Kafka, webhook
//! binary, structured and batch), carry their `dataschema`, match their schema, and are what
//! the AsyncAPI document says is sent.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::time::Duration;

use ankusa::api::schemas::{named, ASYNCAPI, SCHEMAS};
use ankusa::lifecycle::event::{dataschema, SCHEMA_BASE};
use ankusa_sinks::test_support::{Broker, Receiver, Recorded};
use jsonschema::{Registry, Validator};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::api::lifecycle::read_until;
use crate::support::node::*;
use crate::support::publisher::read_events;
use crate::support::{eventually, schemas};

fn asyncapi() -> Value {
    serde_json::from_str(include_str!("../../../asyncapi/lifecycle-v1.json")).expect("JSON")
}

/// Where the document's relative `$ref`s to the schemas start: `schemas/<name>` beside it, as
/// served (`/admin/v1/asyncapi.json`, `/admin/v1/schemas/`) and as kept (`asyncapi/schemas`
/// links to `schemas/`).
const RELATIVE: &str = "schemas/";

/// A base URI for the document under which its relative refs name the schemas' `$id`s.
const DOCUMENT_BASE: &str = "https://ankusa.io/lifecycle-v1.json";

/// The relative ref of `ty`'s schema.
fn schema_ref(ty: &str) -> String {
    dataschema(ty).replacen(SCHEMA_BASE, RELATIVE, 1)
}

/// Every event type the node publishes.
fn event_types() -> BTreeSet<&'static str> {
    SCHEMAS.iter().filter_map(|s| s.event_type).collect()
}

#[tokio::test]
async fn schemas_and_the_asyncapi_document_are_served_as_kept_without_a_token() {
    let node = TestNode::start().await;
    for schema in SCHEMAS {
        let path = format!("/admin/v1/schemas/{}", schema.name);
        let r = node.send(node.req(Method::GET, &path, None)).await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.text);
        assert_eq!(
            r.header("content-type").as_deref(),
            Some("application/schema+json")
        );
        let file = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("schemas")
            .join(schema.name);
        assert_eq!(r.text, std::fs::read_to_string(file).unwrap(), "{path}");
    }
    for missing in [
        "io.ankusa.route.renamed.v1.json",
        "..%2FCargo.toml",
        "route.v1",
    ] {
        let path = format!("/admin/v1/schemas/{missing}");
        let r = node.send(node.req(Method::GET, &path, None)).await;
        assert_error(&r, 404, "not_found");
    }
    let r = node
        .send(node.req(Method::GET, "/admin/v1/asyncapi.json", None))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(r.json(), asyncapi());
    assert_eq!(r.text, ASYNCAPI);
    assert_eq!(
        r.text,
        std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("asyncapi/lifecycle-v1.json")
        )
        .unwrap()
    );
    // The OpenAPI document names every schema, and only those.
    let openapi: Value = serde_json::from_str(ankusa::api::router::OPENAPI).unwrap();
    let names =
        &openapi["paths"]["/admin/v1/schemas/{name}"]["get"]["parameters"][0]["schema"]["enum"];
    let served: Vec<&str> = SCHEMAS.iter().map(|s| s.name).collect();
    assert_eq!(names, &json!(served));
    node.stop().await;
}

/// A sample `io.ankusa.route.created` as the file sink writes it, `data` as given.
fn created(data: Value) -> Value {
    json!({"id": "e1", "type": "io.ankusa.route.created",
           "dataschema": "https://ankusa.io/schemas/io.ankusa.route.created.v1.json",
           "data": data})
}

fn route() -> Value {
    json!({"id": "r1", "tenant": "t1", "source": "s1", "destination": "https://x.test/",
           "filter": {}, "enabled": true, "revision": 1})
}

#[test]
fn the_check_passes_an_event_of_its_schema() {
    schemas::check(&created(
        json!({"action": "route.create", "entity": route(), "revision": 1}),
    ));
}

#[test]
fn the_check_passes_a_checkpoint_of_the_trails_shape() {
    let note = "ankusa.audit/7f1c6a2e\n12\nq1F2kH0rXb8mWnN1eZs9b3c5mJ8l0q1F2kH0rXb8mWk=\n\n\u{2014} ankusa.audit/7f1c6a2e AAAA\n";
    let entity = json!({"origin": "ankusa.audit/7f1c6a2e", "size": 12,
                        "root": "q1F2kH0rXb8mWnN1eZs9b3c5mJ8l0q1F2kH0rXb8mWk=", "checkpoint": note});
    let mut event =
        created(json!({"action": "trail.checkpoint", "entity": entity, "revision": null}));
    event["type"] = json!("io.ankusa.trail.checkpoint");
    event["dataschema"] = json!("https://ankusa.io/schemas/io.ankusa.trail.checkpoint.v1.json");
    schemas::check(&event);
}

#[test]
#[should_panic(expected = "does not match its schema")]
fn the_check_fails_data_off_its_schema() {
    let mut entity = route();
    entity["secret"] = json!("[redacted]");
    schemas::check(&created(
        json!({"action": "route.create", "entity": entity, "revision": 1}),
    ));
}

#[test]
#[should_panic(expected = "does not match its schema")]
fn the_check_fails_an_action_of_another_type() {
    schemas::check(&created(
        json!({"action": "route.update", "entity": route(), "revision": 1}),
    ));
}

#[test]
#[should_panic(expected = "dataschema of io.ankusa.route.created")]
fn the_check_fails_a_dataschema_of_another_type() {
    let mut event = created(json!({"action": "route.create", "entity": route(), "revision": 1}));
    event["dataschema"] = json!("https://ankusa.io/schemas/io.ankusa.route.updated.v1.json");
    schemas::check(&event);
}

#[test]
#[should_panic(expected = "no schema for event type io.ankusa.route.renamed")]
fn the_check_fails_a_type_without_a_schema() {
    let mut event = created(json!({}));
    event["type"] = json!("io.ankusa.route.renamed");
    schemas::check(&event);
}

/// Every `$ref` in `v`.
fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(map) => {
            if let Some(Value::String(r)) = map.get("$ref") {
                out.push(r);
            }
            map.values().for_each(|v| refs(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

#[test]
fn the_asyncapi_document_resolves_and_describes_every_published_type() {
    let doc = asyncapi();
    assert_eq!(doc["asyncapi"], "3.0.0");
    let mut found = Vec::new();
    refs(&doc, &mut found);
    assert!(found.len() > 50, "{}", found.len());
    for r in found {
        let (base, fragment) = r.split_once('#').unwrap_or((r, ""));
        let target = match base {
            "" => doc.clone(),
            _ => {
                let name = base
                    .strip_prefix(RELATIVE)
                    .unwrap_or_else(|| panic!("{r} is neither local nor a served schema"));
                let schema = named(name).unwrap_or_else(|| panic!("{r}: no schema {name}"));
                serde_json::from_str(schema.text).unwrap()
            }
        };
        assert!(target.pointer(fragment).is_some(), "{r} does not resolve");
    }
    for ty in event_types() {
        for channel in ["kafka", "webhook"] {
            let message = doc["channels"][channel]["messages"][ty]["$ref"]
                .as_str()
                .unwrap_or_else(|| panic!("{channel} carries no {ty}"));
            let message = doc.pointer(&message[1..]).unwrap();
            assert_eq!(message["payload"]["$ref"], schema_ref(ty), "{channel} {ty}");
            let operation = if channel == "kafka" {
                "publishToKafka"
            } else {
                "postToWebhook"
            };
            let sent = doc["operations"][operation]["messages"].as_array().unwrap();
            let listed = json!({"$ref": format!("#/channels/{channel}/messages/{ty}")});
            assert!(sent.contains(&listed), "{operation} sends {ty}");
        }
        let branches = doc["components"]["schemas"]["StructuredEvent"]["oneOf"]
            .as_array()
            .unwrap();
        let data = json!({"$ref": schema_ref(ty)});
        assert!(
            branches.iter().any(|b| b["properties"]["data"] == data),
            "a structured {ty}"
        );
    }
}

/// The AsyncAPI document's schemas, as validators of what the sinks send.
struct Described {
    registry: Registry<'static>,
    validators: HashMap<String, Validator>,
}

impl Described {
    fn new() -> Described {
        let doc = asyncapi();
        let registry = SCHEMAS
            .iter()
            .fold(Registry::new(), |r, s| {
                let schema: Value = serde_json::from_str(s.text).unwrap();
                r.add(format!("{SCHEMA_BASE}{}", s.name), schema).unwrap()
            })
            .add(DOCUMENT_BASE, doc)
            .unwrap()
            .prepare()
            .unwrap();
        Described {
            registry,
            validators: HashMap::new(),
        }
    }

    /// Hold `instance` to the AsyncAPI document's schema at `pointer`.
    fn check(&mut self, pointer: &str, instance: &Value) {
        let Described {
            registry,
            validators,
        } = self;
        let validator = validators.entry(pointer.to_owned()).or_insert_with(|| {
            jsonschema::draft202012::options()
                .with_registry(registry)
                .should_validate_formats(true)
                .build(&json!({"$ref": format!("{DOCUMENT_BASE}#{pointer}")}))
                .unwrap_or_else(|e| panic!("{pointer}: {e}"))
        });
        let errors: Vec<String> = validator
            .iter_errors(instance)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "not as {pointer} says:\n{}\n{instance}",
            errors.join("\n")
        );
    }
}

const TOPIC: &str = "lifecycle-schemas";
const SECRET: &str = "whsec_dGhlIHJlY2VpdmVyJ3Mga2V5LCAzMiBieXRlcyBsb25n";
const MODES: [&str; 3] = ["binary", "structured", "batch"];

/// A request's headers as JSON, by lower-case name.
fn headers_of(request: &Recorded) -> Value {
    let map = request
        .headers
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), json!(v.to_str().unwrap())))
        .collect();
    Value::Object(map)
}

async fn call(node: &TestNode, method: Method, path: &str, body: Option<Value>, status: u16) {
    let r = node.call(method.clone(), path, ADMIN, body).await;
    assert_eq!(r.status.as_u16(), status, "{method} {path}: {}", r.text);
}

/// Routes and sources created, changed and deleted, and a snapshot taken, on `node`.
async fn every_change(node: &TestNode) {
    let routes = "/admin/v1/tenants/t1/routes";
    let sources = "/admin/v1/tenants/t1/sources";
    for id in ["r1", "r2"] {
        let route = json!({"id": id, "source": "s1", "destination": "https://example.test/x",
                           "filter": {"kind": "order"}});
        call(node, Method::POST, routes, Some(route), 201).await;
    }
    let patch = json!({"enabled": false});
    call(
        node,
        Method::PATCH,
        &format!("{routes}/r1"),
        Some(patch),
        200,
    )
    .await;
    call(node, Method::DELETE, &format!("{routes}/r2"), None, 204).await;
    let s1 = json!({"id": "s1", "kind": "webhook", "secret": "sekrit", "config": {"a": 1}});
    call(node, Method::POST, sources, Some(s1), 201).await;
    call(
        node,
        Method::POST,
        sources,
        Some(json!({"id": "s2", "kind": "kafka"})),
        201,
    )
    .await;
    let patch = json!({"config": {"a": 2}});
    call(
        node,
        Method::PATCH,
        &format!("{sources}/s1"),
        Some(patch),
        200,
    )
    .await;
    call(node, Method::DELETE, &format!("{sources}/s2"), None, 204).await;
    call(
        node,
        Method::POST,
        "/admin/v1/lifecycle/snapshot",
        None,
        202,
    )
    .await;
    read_until(node, "/admin/v1/lifecycle/snapshot", |s| {
        s["last"]["state"] == "finished"
    })
    .await;
}

/// Every sink of `node` has delivered every row.
async fn delivered(node: &TestNode) {
    read_until(node, "/admin/v1/lifecycle", |s| {
        let sinks = s["sinks"].as_array().unwrap();
        sinks.len() == 5 && sinks.iter().all(|k| k["position"] == s["audit_seq"])
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_change_publishes_events_of_their_schemas_through_every_sink() {
    let broker = Broker::start();
    broker.create_topic(TOPIC, 2).await;
    let hooks = [
        Receiver::start().await,
        Receiver::start().await,
        Receiver::start().await,
    ];
    let urls: Vec<String> = hooks.iter().map(Receiver::url).collect();
    let work = tempfile::tempdir().unwrap();
    let (events, backups) = (work.path().join("events.jsonl"), work.path().join("b"));
    let sinks = |v: &mut Value| {
        v["node"]["backup_dir"] = json!(backups);
        v["lifecycle"]["sinks"] = json!(["file", "kafka", "binary", "structured", "batch"]);
        v["lifecycle"]["sink"]["file"]["path"] = json!(events);
        v["lifecycle"]["sink"]["kafka"] =
            json!({"kind": "kafka", "brokers": broker.address, "topic": TOPIC});
        for (mode, url) in MODES.iter().zip(&urls) {
            v["lifecycle"]["sink"][mode] = json!({
                "kind": "webhook", "url": url, "mode": mode, "secrets": [SECRET],
                "retry": {"initial": "5ms", "max": "20ms", "max_retry_after": "20ms"},
            });
        }
    };
    // A life with every change, backed up; then restored, which opens a new incarnation,
    // refreshes the routes (the memory store is empty again) and snapshots every kind.
    let node = TestNode::start_with(sinks).await;
    every_change(&node).await;
    call(&node, Method::POST, "/admin/v1/backups", None, 201).await;
    delivered(&node).await;
    let dir = node.stop().await;
    let data = dir.path().join("data");
    crate::restore::backup_cli::ok(&crate::restore::backup_cli::ankusa(&[
        "backup",
        "restore",
        "--from",
        backups.to_str().unwrap(),
        "--store",
        data.to_str().unwrap(),
        "--force",
    ]));
    let node = TestNode::start_on(dir, sinks).await;
    let gone_route =
        |e: &Value| e["type"] == "io.ankusa.route.refreshed" && e["data"]["entity"].is_null();
    let all_types = |events: &[Value]| {
        let types: BTreeSet<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
        let published = event_types()
            .into_iter()
            .filter(|t| *t != "io.ankusa.trail.checkpoint");
        published.collect::<BTreeSet<_>>().is_subset(&types) && events.iter().any(gone_route)
    };
    let read = async || Some(read_events(&events)).filter(|e| all_types(e));
    eventually("every kind of event", Duration::from_secs(60), read).await;
    read_until(&node, "/admin/v1/lifecycle/snapshot", |s| {
        s["running"].is_null() && s["last"]["state"] == "finished"
    })
    .await;
    delivered(&node).await;

    let mut described = Described::new();
    // The file sink: structured events.
    let written = read_events(&events);
    schemas::check_all(&written);
    let mut expected = BTreeSet::new();
    for e in &written {
        let ty = e["type"].as_str().unwrap();
        assert_eq!(
            e["dataschema"],
            format!("https://ankusa.io/schemas/{ty}.v1.json"),
            "{e}"
        );
        described.check("/components/schemas/StructuredEvent", e);
        expected.insert(ty.to_owned());
    }
    assert!(written
        .iter()
        .any(|e| e["data"]["entity"]["secret"] == "[redacted]"));
    assert!(written.iter().any(
        |e| e["type"] == "io.ankusa.source.created" && e["data"]["entity"]["secret"].is_null()
    ));
    assert!(written
        .iter()
        .any(|e| e["type"] == "io.ankusa.route.refreshed" && e["data"]["entity"].is_object()));

    // Kafka: binary mode, `ce_` headers, each as the message of its type says.
    let records = schemas::check_topic(&broker.address, TOPIC, 2, Duration::from_secs(3)).await;
    let mut types = BTreeSet::new();
    for headers in &records {
        let ty = &headers["ce_type"];
        assert_eq!(headers["ce_dataschema"], dataschema(ty));
        described.check(
            &format!("/components/messages/kafka.{ty}/headers"),
            &json!(headers),
        );
        types.insert(ty.clone());
    }
    assert_eq!(types, expected, "Kafka carries every type");

    // The webhooks, in each mode.
    for (mode, hook) in MODES.iter().zip(&hooks) {
        let mut types = BTreeSet::new();
        for request in hook.requests() {
            let sent = schemas::check_request(&request);
            let headers = headers_of(&request);
            let body: Value = serde_json::from_slice(&request.body).unwrap();
            match *mode {
                "binary" => {
                    let pointer = format!("/components/messages/webhook.{}/headers", sent[0]);
                    described.check(&pointer, &headers);
                }
                "structured" => {
                    described.check("/components/schemas/WebhookStructuredHeaders", &headers);
                    described.check("/components/schemas/StructuredEvent", &body);
                }
                _ => {
                    described.check("/components/schemas/WebhookBatchHeaders", &headers);
                    described.check("/components/schemas/Batch", &body);
                }
            }
            types.extend(sent);
        }
        assert_eq!(types, expected, "the {mode} webhook carries every type");
    }
    node.stop().await;
}
