//! Hostile and broken input: malformed JSON, wrong types, oversize bodies, unknown fields,
//! bad headers, path traversal. Each is a clear 4xx with a JSON body and an echoed request
//! id, writes no row, and leaves the node serving.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::support::node::*;
use reqwest::header::HeaderValue;
use reqwest::{Method, StatusCode};
use serde_json::json;

const SOURCES: &str = "/admin/v1/tenants/t1/sources";
const LIMIT: usize = 2048;

async fn node() -> TestNode {
    TestNode::start_with(|c| c["api"]["body_limit"] = json!(LIMIT)).await
}

fn raw(node: &TestNode, body: &str) -> reqwest::RequestBuilder {
    node.req(Method::POST, SOURCES, Some(ADMIN))
        .header("content-type", "application/json")
        .body(body.to_owned())
}

#[tokio::test]
async fn broken_bodies_are_refused_with_the_field_named() {
    let node = node().await;
    let cases: Vec<(&str, u16, &str, Option<&str>)> = vec![
        (r#"{"id": "s1", "kind": "#, 400, "bad_request", Some("body")),
        ("", 400, "bad_request", Some("body")),
        ("not json", 400, "bad_request", Some("body")),
        (
            r#"{"id": "s1", "kind": "k"} trailing"#,
            400,
            "bad_request",
            Some("body"),
        ),
        (
            r#"{"id": 5, "kind": "k"}"#,
            422,
            "invalid_input",
            Some("id"),
        ),
        (
            r#"{"id": "s1", "kind": ["k"]}"#,
            422,
            "invalid_input",
            Some("kind"),
        ),
        (
            r#"{"id": "s1", "kind": "k", "config": "x"}"#,
            422,
            "invalid_input",
            Some("config"),
        ),
        (
            r#"{"id": "s1", "kind": "k", "secret": 42}"#,
            422,
            "invalid_input",
            Some("secret"),
        ),
        (r#"{"kind": "k"}"#, 422, "invalid_input", Some("id")),
        (
            r#"{"id": "s1", "kind": "k", "owner": "eve"}"#,
            422,
            "invalid_input",
            Some("owner"),
        ),
        (r#""a string""#, 422, "invalid_input", Some("body")),
        (r#"[1, 2]"#, 422, "invalid_input", Some("body")),
        // A struct's fields in order are still not an object.
        (r#"["s1", "k"]"#, 422, "invalid_input", Some("body")),
        (
            r#"{"id": "s1", "kind": "k", "secret": "\ud800"}"#,
            400,
            "bad_request",
            Some("body"),
        ),
    ];
    for (body, status, code, field) in cases {
        let r = node.send(raw(&node, body)).await;
        assert_error(&r, status, code);
        assert_eq!(r.json()["field"].as_str(), field, "{body}: {}", r.text);
    }
    let unknown = node
        .send(raw(&node, r#"{"id": "s1", "kind": "k", "owner": "eve"}"#))
        .await;
    assert!(unknown.json()["message"]
        .as_str()
        .unwrap()
        .contains("owner"));
    let deep = node
        .send(raw(
            &node,
            &format!("{}1{}", "[".repeat(200), "]".repeat(200)),
        ))
        .await;
    assert!(deep.status.is_client_error(), "{}", deep.text);
    // Not JSON at all.
    let form = node
        .send(
            node.req(Method::POST, SOURCES, Some(ADMIN))
                .body("id=s1&kind=k"),
        )
        .await;
    assert_error(&form, 415, "unsupported_media_type");
    // A patch with an unknown field, and a wrong type in an override.
    let patch = node
        .call(
            Method::PATCH,
            &format!("{SOURCES}/s1"),
            ADMIN,
            Some(json!({"kind": "k", "revision": 9})),
        )
        .await;
    assert_error(&patch, 422, "invalid_input");
    assert_eq!(patch.json()["field"], "revision");
    let rate = node
        .call(
            Method::PUT,
            "/admin/v1/tenants/t1/overrides/k",
            ADMIN,
            Some(json!({"rate": "fast"})),
        )
        .await;
    assert_error(&rate, 422, "invalid_input");
    assert_eq!(rate.json()["field"], "rate");
    let negative = node
        .call(
            Method::PUT,
            "/admin/v1/tenants/t1/overrides/k",
            ADMIN,
            Some(json!({"rate": -1})),
        )
        .await;
    assert_error(&negative, 422, "invalid_input");
    // A body with no fields takes an empty object, never an empty array.
    for path in ["/admin/v1/backups", "/admin/v1/lifecycle/snapshot"] {
        let array = node.call(Method::POST, path, ADMIN, Some(json!([]))).await;
        assert_error(&array, 422, "invalid_input");
        assert_eq!(array.json()["field"], "body", "{path}");
    }
    assert!(node.rows().await.is_empty());
    node.stop().await;
}

#[tokio::test]
async fn oversize_bodies_are_413() {
    let node = node().await;
    let big = json!({"id": "s1", "kind": "k", "config": {"blob": "x".repeat(LIMIT)}});
    let r = node
        .send(node.oversized(Method::POST, SOURCES, big.to_string()))
        .await;
    assert_error(&r, 413, "too_large");
    let huge = "y".repeat(4 << 20);
    let r = node.send(node.oversized(Method::POST, SOURCES, huge)).await;
    assert_error(&r, 413, "too_large");
    // Just under the limit is read (and then judged on its content).
    let fits = json!({"id": "s1", "kind": "k", "config": {"blob": "x".repeat(LIMIT - 100)}});
    let r = node.call(Method::POST, SOURCES, ADMIN, Some(fits)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(node.rows().await.len(), 1);
    node.stop().await;
}

#[tokio::test]
async fn path_traversal_and_bad_names_are_refused() {
    let node = node().await;
    let body = json!({"kind": "k"});
    for path in [
        "/admin/v1/tenants/t1/sources/..%2F..%2Fetc%2Fpasswd",
        "/admin/v1/tenants/t1/sources/..%2Ft2%2Fs1",
        "/admin/v1/tenants/t1/sources/a%2Fb",
        "/admin/v1/tenants/t1/sources/..",
        "/admin/v1/tenants/t1/sources/%2E%2E",
        "/admin/v1/tenants/t1/sources/a%00b",
        "/admin/v1/tenants/t1/sources/a%0Ab",
        "/admin/v1/tenants/t1/sources/a%20b",
        "/admin/v1/tenants/t1/sources/%C3%A9",
        "/admin/v1/tenants/t1/sources/%FF",
        "/admin/v1/tenants/..%2Ft2/sources/s1",
        &format!("/admin/v1/tenants/t1/sources/{}", "a".repeat(129)),
    ] {
        for method in [Method::GET, Method::PATCH, Method::DELETE] {
            let r = node
                .call(method.clone(), path, ADMIN, Some(body.clone()))
                .await;
            assert!(
                r.status.is_client_error(),
                "{method} {path}: {} {}",
                r.status,
                r.text
            );
            assert!(
                r.code() != "internal" && !r.code().is_empty(),
                "{path}: {}",
                r.text
            );
            assert!(r.header("x-request-id").is_some());
        }
    }
    let r = node
        .call(
            Method::GET,
            "/admin/v1/tenants/t1/sources/..%2F..%2Fetc",
            READER,
            None,
        )
        .await;
    assert_error(&r, 422, "invalid_input");
    assert_eq!(r.json()["field"], "id");
    for id in ["../x", "a/b", "..", ".", "", "a\u{0}b", "é"] {
        let r = node
            .call(
                Method::POST,
                SOURCES,
                ADMIN,
                Some(json!({"id": id, "kind": "k"})),
            )
            .await;
        assert_error(&r, 422, "invalid_input");
        assert_eq!(r.json()["field"], "id", "{id:?}");
    }
    let r = node
        .call(
            Method::POST,
            "/admin/v1/tenants/t%2F1/sources",
            ADMIN,
            Some(json!({"id": "s", "kind": "k"})),
        )
        .await;
    assert_error(&r, 422, "invalid_input");
    assert_eq!(r.json()["field"], "tenant");
    for q in ["?limit=abc", "?limit=0", "?after=..%2Fx", "?bogus=1"] {
        let r = node
            .call(Method::GET, &format!("{SOURCES}{q}"), READER, None)
            .await;
        assert!(r.status.is_client_error(), "{q}: {}", r.text);
    }
    assert!(node.rows().await.is_empty());
    node.stop().await;
}

#[tokio::test]
async fn hostile_headers_are_refused() {
    let node = node().await;
    let body = json!({"id": "s1", "kind": "k"});
    let post = || node.req(Method::POST, SOURCES, Some(ADMIN)).json(&body);
    let hostile_ids: Vec<HeaderValue> = vec![
        HeaderValue::from_str(&"r".repeat(129)).unwrap(),
        HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
        HeaderValue::from_bytes(b"\xff\xfe").unwrap(),
        HeaderValue::from_bytes(b"a\tb").unwrap(),
        HeaderValue::from_static(""),
    ];
    for id in hostile_ids {
        let r = node.send(post().header("x-request-id", id.clone())).await;
        assert_error(&r, 400, "bad_request");
        assert_eq!(r.json()["field"], "X-Request-Id");
        let echoed = r.request_id();
        assert!(
            uuid::Uuid::parse_str(&echoed).is_ok(),
            "a fresh id, not the hostile one: {echoed}"
        );
    }
    let twice = node
        .send(
            post()
                .header("x-request-id", "a")
                .header("x-request-id", "b"),
        )
        .await;
    assert_error(&twice, 400, "bad_request");
    for if_match in ["W/\"1\"", "abc", "\"1\", \"2\"", "-3"] {
        let r = node
            .send(
                node.req(Method::PATCH, &format!("{SOURCES}/s1"), Some(ADMIN))
                    .header("if-match", if_match)
                    .json(&json!({"kind": "x"})),
            )
            .await;
        assert_error(&r, 400, "bad_request");
        assert_eq!(r.json()["field"], "If-Match");
    }
    for auth in [
        HeaderValue::from_bytes(b"Bearer \xff\xfe").unwrap(),
        HeaderValue::from_str(&format!("Bearer {}", "t".repeat(10_000))).unwrap(),
        HeaderValue::from_static("Bearer"),
        HeaderValue::from_static("Basic YWxpY2U6c2VjcmV0"),
    ] {
        let r = node
            .send(
                node.client
                    .post(node.url(SOURCES))
                    .header("authorization", auth)
                    .json(&body),
            )
            .await;
        assert_error(&r, 401, "unauthorized");
    }
    // Bytes no HTTP client library would send: the server refuses them and stays up.
    let addr = node.base.trim_start_matches("http://").to_owned();
    let raw_requests: [&[u8]; 3] = [
        b"POST /admin/v1/tenants/t1/sources HTTP/1.1\r\nhost: x\r\nx-request-id: a\x01b\r\ncontent-length: 2\r\n\r\n{}",
        b"GET /admin/v1/tenants/t1/sources/\x00 HTTP/1.1\r\nhost: x\r\n\r\n",
        b"GARBAGE\r\n\r\n",
    ];
    for request in raw_requests {
        let addr = addr.clone();
        let answer = ankusa::store::blocking::run("a raw request", move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s.write_all(request).unwrap();
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out);
            String::from_utf8_lossy(&out).into_owned()
        })
        .await
        .unwrap();
        assert!(answer.starts_with("HTTP/1.1 4"), "{answer}");
    }
    let health = node.send(node.req(Method::GET, "/healthz", None)).await;
    assert_eq!(health.status, StatusCode::OK);
    assert!(node.rows().await.is_empty());
    // The node still takes a good change afterwards.
    let ok = node.send(post().header("x-request-id", "fine-1")).await;
    assert_eq!(ok.status, StatusCode::CREATED, "{}", ok.text);
    assert_eq!(node.rows().await.len(), 1);
    node.stop().await;
}
