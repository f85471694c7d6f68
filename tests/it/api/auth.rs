//! Authentication and scopes: 401 without a valid token, 403 without the scope, neither
//! writing a row; the first-start admin token of a node with none configured (through the
//! real binary); and `ankusa token new` / `token hash`.

use crate::support::eventually;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::node::*;
use crate::support::served::{serve, Stream};
use reqwest::{Method, StatusCode};
use serde_json::json;

const SOURCES: &str = "/admin/v1/tenants/t1/sources";

#[tokio::test]
async fn missing_or_wrong_tokens_are_401_and_missing_scopes_403_without_rows() {
    let node = TestNode::start().await;
    let body = json!({"id": "s1", "kind": "k"});
    let padded = format!("{ADMIN}x");
    for token in [
        None,
        Some(""),
        Some("tok-admin-6f1d2"),
        Some("TOK-ADMIN-6F1D2C"),
        Some(&*padded),
    ] {
        let mut rb = node.client.post(node.url(SOURCES)).json(&body);
        if let Some(t) = token {
            rb = rb.header("authorization", format!("Bearer {t}"));
        }
        let r = node.send(rb).await;
        assert_error(&r, 401, "unauthorized");
        assert_eq!(r.header("www-authenticate").as_deref(), Some("Bearer"));
    }
    // The scheme is case-insensitive; the token is not.
    let lower = node
        .send(
            node.client
                .get(node.url(SOURCES))
                .header("authorization", format!("bearer {READER}")),
        )
        .await;
    assert_eq!(lower.status, StatusCode::OK);

    let item = format!("{SOURCES}/s1");
    let matrix: [(&str, Method, &str, bool); 12] = [
        (READER, Method::POST, SOURCES, false),
        (READER, Method::GET, SOURCES, true),
        (READER, Method::GET, "/admin/v1/audit", false),
        (WRITER, Method::GET, SOURCES, false),
        (WRITER, Method::GET, &item, false),
        (WRITER, Method::GET, "/admin/v1/audit", false),
        (WRITER, Method::POST, SOURCES, true),
        (AUDITOR, Method::POST, SOURCES, false),
        (AUDITOR, Method::DELETE, &item, false),
        (AUDITOR, Method::GET, SOURCES, false),
        (AUDITOR, Method::GET, "/admin/v1/audit", true),
        (ADMIN, Method::GET, "/admin/v1/audit", true),
    ];
    for (token, method, path, allowed) in matrix {
        let with_body = method == Method::POST;
        let r = node
            .call(method.clone(), path, token, with_body.then(|| body.clone()))
            .await;
        if allowed {
            assert!(r.status.is_success(), "{method} {path}: {}", r.text);
        } else {
            assert_error(&r, 403, "forbidden");
        }
    }
    let rows = node.rows().await;
    assert_eq!(rows.len(), 1, "only the writer's create wrote a row");
    assert_eq!(rows[0]["actor"], "writer");
    node.stop().await;
}

/// A token that may write but not read gets no subject back from a write: a PATCH that
/// changes nothing would otherwise answer the whole subject. Its writes still take effect,
/// with their ETag and row.
#[tokio::test]
async fn a_write_only_token_is_answered_without_the_subject() {
    let node = TestNode::start().await;
    let item = format!("{SOURCES}/s1");
    let created = node
        .call(
            Method::POST,
            SOURCES,
            WRITER,
            Some(json!({"id": "s1", "kind": "k", "config": {"url": "https://a.test/"}})),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED);
    assert_eq!(created.text, "", "no view for a write-only token");
    assert_eq!(created.header("etag").as_deref(), Some("\"1\""));
    // A PATCH that changes nothing answered the whole subject before.
    let same = json!({"kind": "k"});
    let patched = node
        .call(Method::PATCH, &item, WRITER, Some(same.clone()))
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    assert_eq!(patched.text, "");
    // A token that reads too gets the view, as before.
    let patched = node.call(Method::PATCH, &item, ADMIN, Some(same)).await;
    assert_eq!(patched.status, StatusCode::OK);
    assert_eq!(patched.json()["config"]["url"], "https://a.test/");
    let deleted = node.call(Method::DELETE, &item, WRITER, None).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    node.stop().await;
}

async fn wait_ready(client: &reqwest::Client, base: &str) {
    let ready = async || {
        let r = client.get(format!("{base}/readyz")).send().await;
        r.is_ok_and(|r| r.status() == StatusCode::OK)
    };
    eventually("ankusa serve to be ready", Duration::from_secs(30), ready).await;
}

#[tokio::test]
async fn a_fresh_node_makes_one_admin_token_and_prints_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let first = serve(dir.path(), "", Stream::Stdout);
    wait_ready(&client, &first.base).await;
    let mut printed = Vec::new();
    let token = loop {
        let line = first
            .lines
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("no token printed: {printed:?}"));
        if let Some(token) = line.strip_prefix("ANKUSA_TOKEN=") {
            break token.to_owned();
        }
        printed.push(line);
    };
    assert!(
        printed.iter().any(|l| l.contains("shown only this once")),
        "{printed:?}"
    );
    let kept = std::fs::read_to_string(dir.path().join("data/admin-token.sha256")).unwrap();
    assert_eq!(kept.trim(), ankusa::api::auth::digest_hex(&token));
    assert!(!kept.contains(&token));
    let create = client
        .post(format!("{}{SOURCES}", first.base))
        .bearer_auth(&token)
        .json(&json!({"id": "s1", "kind": "k"}))
        .send()
        .await
        .unwrap();
    assert_eq!(create.status(), StatusCode::CREATED);
    drop(first);

    // A later start reads the digest: the same token works, and nothing is printed.
    let second = serve(dir.path(), "", Stream::Stdout);
    wait_ready(&client, &second.base).await;
    let rows: serde_json::Value = client
        .get(format!("{}/admin/v1/audit", second.base))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(rows["rows"][0]["actor"], "admin");
    assert_eq!(rows["rows"][0]["action"], "source.create");
    std::thread::sleep(Duration::from_millis(200));
    let printed: Vec<String> = second.lines.try_iter().collect();
    assert!(
        printed.iter().all(|l| !l.contains("ANKUSA_TOKEN")),
        "{printed:?}"
    );
}

#[test]
fn token_new_and_hash_agree() {
    let out = Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .args(["token", "new"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let token = text
        .lines()
        .find_map(|l| l.strip_prefix("token:  "))
        .unwrap();
    let digest = text
        .lines()
        .find_map(|l| l.strip_prefix("sha256: "))
        .unwrap();
    let mut hash = Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .args(["token", "hash"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(hash.stdin.take().unwrap(), "{token}").unwrap();
    let out = hash.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), digest);
    assert_eq!(digest, ankusa::api::auth::digest_hex(token));
}

/// A node whose start fails once its store is open (here: the admin token's digest cannot be
/// read) stops what it started and closes the store before it returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_that_fails_after_the_store_opened_closes_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join(ankusa::api::auth::ADMIN_TOKEN_FILE)).unwrap();
    let events = dir.path().join("events.jsonl");
    let config = config(&data, |v| {
        v["api"]["tokens"] = json!([]);
        // A sink whose lane, had it started, would hold the store too.
        v["lifecycle"]["sinks"] = json!(["file"]);
        v["lifecycle"]["sink"]["file"]["path"] = json!(events);
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let served = ankusa::node::serve(config, listener, std::future::pending::<()>());
    let err = tokio::time::timeout(Duration::from_secs(60), served)
        .await
        .expect("the failed start returns")
        .unwrap_err();
    assert!(format!("{err:#}").contains("admin API's tokens"), "{err:#}");
    ankusa::store::Store::open(&data).expect("the store is closed");
}
