//! The OpenAPI document is no looser than the server: each request the fuzzer found refused
//! although the document called it valid (issue 17, item 9) is now either ruled out by the
//! document (the constraint is checked here, in the parsed document) or accepted by the
//! server (checked over HTTP, at the document's own bounds).

use crate::support::node::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const NO_CONTROL: &str = "^[^\\x00-\\x1f\\x7f-\\x9f]+$";
const NAME: &str = "^(?:\\.?[A-Za-z0-9_:@-])+\\.?$";

fn doc() -> Value {
    serde_json::from_str(include_str!("../../../openapi/admin-v1.json")).expect("valid JSON")
}

/// `node` with every `$ref` followed.
fn resolve<'a>(doc: &'a Value, node: &'a Value) -> &'a Value {
    match node.get("$ref").and_then(Value::as_str) {
        Some(r) => resolve(doc, doc.pointer(r.trim_start_matches('#')).expect("ref")),
        None => node,
    }
}

/// The schema of parameter `name` of `method path`.
fn parameter<'a>(doc: &'a Value, method: &str, path: &str, name: &str) -> &'a Value {
    let op = &doc["paths"][path][method];
    let params = op["parameters"].as_array().expect("parameters");
    let found = params
        .iter()
        .map(|p| resolve(doc, p))
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{method} {path} has no parameter {name}"));
    resolve(doc, &found["schema"])
}

/// Property `name` of component schema `schema`.
fn property<'a>(doc: &'a Value, schema: &str, name: &str) -> &'a Value {
    resolve(
        doc,
        &doc["components"]["schemas"][schema]["properties"][name],
    )
}

/// Every `(method, path)` whose operation takes `If-Match`.
fn if_match_operations(doc: &Value) -> Vec<(String, String)> {
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let takes = op["parameters"].as_array().is_some_and(|ps| {
                ps.iter()
                    .any(|p| resolve(doc, p)["name"].as_str() == Some("If-Match"))
            });
            if takes {
                ops.push((method.clone(), path.clone()));
            }
        }
    }
    ops
}

#[test]
fn if_match_is_constrained_on_every_patch_put_delete_and_cancel() {
    let doc = doc();
    let ops = if_match_operations(&doc);
    let expected = [
        ("patch", "/admin/v1/tenants/{tenant}/sources/{id}"),
        ("delete", "/admin/v1/tenants/{tenant}/sources/{id}"),
        ("patch", "/admin/v1/tenants/{tenant}/routes/{id}"),
        ("delete", "/admin/v1/tenants/{tenant}/routes/{id}"),
        ("put", "/admin/v1/tenants/{tenant}/overrides/{key}"),
        ("delete", "/admin/v1/tenants/{tenant}/overrides/{key}"),
        ("delete", "/admin/v1/tenants/{tenant}/quarantine/{id}"),
        ("post", "/admin/v1/tenants/{tenant}/replay-jobs/{id}/cancel"),
    ];
    for (method, path) in expected {
        assert!(
            ops.contains(&(method.to_owned(), path.to_owned())),
            "{method} {path} takes If-Match"
        );
        let schema = parameter(&doc, method, path, "If-Match");
        // At most 19 digits: every such revision fits the server's u64.
        assert_eq!(
            schema["pattern"], "^(?:\\*|\"[0-9]{1,19}\"|[0-9]{1,19})$",
            "{method} {path}"
        );
        assert_eq!(schema["minLength"], 1, "{method} {path}: not empty");
        assert_eq!(schema["maxLength"], 21, "{method} {path}");
    }
    assert_eq!(ops.len(), expected.len(), "{ops:?}");
}

/// The longest revision the document allows is a revision the server reads: it answers as to
/// any revision (409), never 400.
#[tokio::test]
async fn the_longest_if_match_the_document_allows_is_accepted() {
    let node = TestNode::start().await;
    let src = "/admin/v1/tenants/t1/sources";
    let made = node
        .call(
            Method::POST,
            src,
            ADMIN,
            Some(json!({"id": "s1", "kind": "k"})),
        )
        .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.text);
    for if_match in ["\"9999999999999999999\"", "9999999999999999999"] {
        let r = node
            .send(
                node.req(Method::PATCH, &format!("{src}/s1"), Some(ADMIN))
                    .header("if-match", if_match)
                    .json(&json!({"kind": "x"})),
            )
            .await;
        assert_error(&r, 409, "revision_mismatch");
    }
    node.stop().await;
}

#[test]
fn source_config_keys_are_constrained_as_the_server_checks_them() {
    let doc = doc();
    for schema in ["NewSource", "SourcePatch"] {
        let names = &property(&doc, schema, "config")["propertyNames"];
        assert_eq!(names["minLength"], 1, "{schema}");
        assert_eq!(names["maxLength"], 128, "{schema}");
        assert_eq!(names["pattern"], NO_CONTROL, "{schema}");
    }
}

#[test]
fn route_filter_keys_are_constrained_as_the_server_checks_them() {
    let doc = doc();
    for schema in ["NewRoute", "RoutePatch"] {
        let names = &property(&doc, schema, "filter")["propertyNames"];
        assert_eq!(names["minLength"], 1, "{schema}");
        assert_eq!(names["maxLength"], 128, "{schema}");
        assert_eq!(names["pattern"], NO_CONTROL, "{schema}");
    }
}

/// JSON Schema's `maxLength` counts characters: keys and texts at the document's bounds, in
/// characters of several bytes each, are accepted.
#[tokio::test]
async fn lengths_are_counted_in_characters_as_the_document_counts_them() {
    let node = TestNode::start().await;
    let key = "é".repeat(128);
    let created = node
        .call(
            Method::POST,
            "/admin/v1/tenants/t1/sources",
            ADMIN,
            Some(json!({"id": "s1", "kind": "k", "secret": "ü".repeat(4096),
                        "config": {key.clone(): 1}})),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let patched = node
        .call(
            Method::PATCH,
            "/admin/v1/tenants/t1/sources/s1",
            ADMIN,
            Some(json!({"config": {key.clone(): 2}})),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    let route = node
        .call(
            Method::POST,
            "/admin/v1/tenants/t1/routes",
            ADMIN,
            Some(json!({"id": "r1", "source": "s1",
                        "destination": format!("https://h/{}", "é".repeat(2048 - 10)),
                        "filter": {key.clone(): "x"}})),
        )
        .await;
    assert_eq!(route.status, StatusCode::CREATED, "{}", route.text);
    let until = (chrono::Utc::now() + chrono::Duration::days(1)).to_rfc3339();
    let entry = node
        .call(
            Method::POST,
            "/admin/v1/tenants/t1/quarantine",
            ADMIN,
            Some(
                json!({"id": "q1", "resource": "sources/s1", "reason": "ß".repeat(512),
                        "until": until}),
            ),
        )
        .await;
    assert_eq!(entry.status, StatusCode::CREATED, "{}", entry.text);
    // One character past each bound is still refused.
    let over = node
        .call(
            Method::POST,
            "/admin/v1/tenants/t1/sources",
            ADMIN,
            Some(json!({"id": "s2", "kind": "k", "config": {"é".repeat(129): 1}})),
        )
        .await;
    assert_error(&over, 422, "invalid_input");
    node.stop().await;
}

#[test]
fn seqs_and_afters_stay_within_the_servers_integers() {
    let doc = doc();
    for (method, path, name) in [
        (
            "delete",
            "/admin/v1/lifecycle/sinks/{sink}/dead-letters/{seq}",
            "seq",
        ),
        (
            "get",
            "/admin/v1/lifecycle/sinks/{sink}/dead-letters",
            "after",
        ),
        ("get", "/admin/v1/audit/{seq}", "seq"),
        ("get", "/admin/v1/audit", "after"),
    ] {
        let schema = parameter(&doc, method, path, name);
        assert_eq!(schema["type"], "integer", "{method} {path} {name}");
        assert_eq!(
            schema["maximum"].as_u64(),
            Some(u64::MAX),
            "{method} {path} {name}"
        );
    }
}

/// The largest seq the document allows is read as a seq: 404, never 400.
#[tokio::test]
async fn the_largest_seq_the_document_allows_is_accepted() {
    let node = TestNode::start().await;
    let max = u64::MAX;
    let row = node
        .call(Method::GET, &format!("/admin/v1/audit/{max}"), ADMIN, None)
        .await;
    assert_error(&row, 404, "not_found");
    let page = node
        .call(
            Method::GET,
            &format!("/admin/v1/audit?after={max}"),
            ADMIN,
            None,
        )
        .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text);
    node.stop().await;
}

#[test]
fn audit_filters_are_constrained_as_the_server_checks_them() {
    let doc = doc();
    for name in ["tenant", "action", "resource"] {
        let schema = parameter(&doc, "get", "/admin/v1/audit", name);
        assert_eq!(schema["minLength"], 1, "{name}");
        assert_eq!(schema["maxLength"], 256, "{name}");
        assert_eq!(schema["pattern"], NO_CONTROL, "{name}");
    }
}

#[tokio::test]
async fn an_audit_filter_at_the_documents_bound_is_accepted() {
    let node = TestNode::start().await;
    let tenant = "ü".repeat(256);
    let r = node
        .send(
            node.req(Method::GET, "/admin/v1/audit", Some(ADMIN))
                .query(&[("tenant", tenant.as_str()), ("action", "source.create")]),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    node.stop().await;
}

#[test]
fn a_quarantine_resource_is_a_collection_and_an_id() {
    let doc = doc();
    let resource = property(&doc, "NewQuarantine", "resource");
    let patterns: Vec<&str> = resource["allOf"]
        .as_array()
        .expect("allOf")
        .iter()
        .map(|s| s["pattern"].as_str().expect("pattern"))
        .collect();
    assert_eq!(
        patterns,
        [
            "^[a-z-]{1,32}/(?:\\.?[A-Za-z0-9_:@-])+\\.?$",
            "^[^/]{1,32}/[^/]{1,128}$"
        ]
    );
    assert_eq!(resource["maxLength"], 32 + 1 + 128);
    let reason = property(&doc, "NewQuarantine", "reason");
    assert_eq!(reason["pattern"], NO_CONTROL);
}

#[test]
fn names_rule_out_dot_and_double_dot() {
    let doc = doc();
    let name = &doc["components"]["schemas"]["Name"];
    assert_eq!(name["pattern"], NAME);
    assert_eq!(name["maxLength"], 128);
}

/// A rule across fields (and with the clock) that JSON Schema cannot say is said in words;
/// `scripts/fuzz-api` (its hooks, `scripts/ankusa_fuzz_hooks.py`) leaves it out of "schema-valid
/// must be accepted".
#[test]
fn replay_range_rules_are_documented_in_words() {
    let doc = doc();
    let to = property(&doc, "NewReplay", "to");
    let said = to["description"].as_str().unwrap();
    assert!(
        said.starts_with("After `from`, at most 366 days after it"),
        "{said}"
    );
    assert!(said.contains("JSON Schema cannot say"), "{said}");
    let op = &doc["paths"]["/admin/v1/tenants/{tenant}/replay-jobs"]["post"];
    assert!(op["description"]
        .as_str()
        .unwrap()
        .contains("`to` must be after `from`"));
    let hooks = include_str!("../../../scripts/ankusa_fuzz_hooks.py");
    assert!(hooks.contains("createReplayJob: `to` after `from`"));
}

#[tokio::test]
async fn an_integer_rate_written_with_a_fraction_of_zero_is_accepted() {
    let node = TestNode::start().await;
    let key = "/admin/v1/tenants/t1/overrides/k1";
    let r = node
        .call(
            Method::PUT,
            key,
            ADMIN,
            Some(json!({"rate": 1.0, "burst": 1214.0})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(r.json()["rate"], 1);
    assert_eq!(r.json()["burst"], 1214);
    for bad in [json!({"rate": 1.5}), json!({"rate": 1, "burst": 2.5})] {
        let r = node.call(Method::PUT, key, ADMIN, Some(bad)).await;
        assert_error(&r, 422, "invalid_input");
    }
    node.stop().await;
}

/// The document's optional fields are never `null`: the server refuses a `null` where it used
/// to read it as a field left out (the fuzzer's "schema-violating request accepted").
#[tokio::test]
async fn a_null_where_the_document_has_no_null_is_refused() {
    let node = TestNode::start().await;
    let made = node
        .call(
            Method::POST,
            "/admin/v1/tenants/t1/sources",
            ADMIN,
            Some(json!({"id": "s1", "kind": "k"})),
        )
        .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.text);
    let route = node
        .call(
            Method::POST,
            "/admin/v1/tenants/t1/routes",
            ADMIN,
            Some(json!({"id": "r1", "source": "s1", "destination": "https://h"})),
        )
        .await;
    assert_eq!(route.status, StatusCode::CREATED, "{}", route.text);
    let rows = node.rows().await.len();
    for (method, path, body, field) in [
        (
            Method::PUT,
            "/admin/v1/tenants/t1/overrides/k1",
            json!({"rate": 1, "burst": null}),
            "burst",
        ),
        (
            Method::PATCH,
            "/admin/v1/tenants/t1/routes/r1",
            json!({"enabled": null, "source": "s1"}),
            "enabled",
        ),
        (
            Method::PATCH,
            "/admin/v1/tenants/t1/sources/s1",
            json!({"kind": "k2", "secret": null}),
            "secret",
        ),
        (
            Method::POST,
            "/admin/v1/tenants/t1/sources",
            json!({"id": "s2", "kind": "k", "secret": null}),
            "secret",
        ),
    ] {
        let r = node.call(method, path, ADMIN, Some(body)).await;
        assert_error(&r, 422, "invalid_input");
        assert_eq!(r.json()["field"], field, "{}", r.text);
    }
    assert_eq!(node.rows().await.len(), rows, "no row for a refused null");
    node.stop().await;
}
