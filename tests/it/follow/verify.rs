//! `ankusa follow verify`, the real binary, against a real HTTP server answering the admin
//! API's list endpoints: exit 0 and one summary line when the replica equals what it lists,
//! exit 1 and one line per difference otherwise; the token is never printed.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use ankusa::replica::{file, Replica, ReplicaFile};
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::events::*;

const TOKEN: &str = "ak_verify_token_not_to_be_printed";

/// What the stub API lists: `tenant/plural` -> items in id order.
type Listed = Arc<Mutex<BTreeMap<String, Vec<Value>>>>;

async fn list(
    State(listed): State<Listed>,
    UrlPath((tenant, plural)): UrlPath<(String, String)>,
    Query(query): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if headers.get("authorization").and_then(|v| v.to_str().ok())
        != Some(&format!("Bearer {TOKEN}"))
    {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let items = listed
        .lock()
        .unwrap()
        .get(&format!("{tenant}/{plural}"))
        .cloned()
        .unwrap_or_default();
    // Pages of one item, so that the reader follows `next`.
    let after = query.get("after");
    let start = after.map_or(0, |a| {
        items.iter().position(|i| i["id"] == **a).unwrap() + 1
    });
    let page: Vec<Value> = items.get(start).cloned().into_iter().collect();
    let next = (start + 1 < items.len()).then(|| items[start]["id"].clone());
    axum::Json(json!({"items": page, "next": next})).into_response()
}

async fn serve(listed: Listed) -> String {
    let app = axum::Router::new()
        .route(
            "/admin/v1/tenants/{tenant}/{plural}",
            axum::routing::get(list),
        )
        .with_state(listed);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

fn verify(replica: &Path, url: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .args(["follow", "verify", "--url", url, "--replica"])
        .arg(replica)
        .env("ANKUSA_FOLLOW_TOKEN", TOKEN)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_exits_0_when_equal_and_1_with_each_difference() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replica.json");
    let mut replica = Replica::default();
    for event in scenario() {
        replica.apply_event(&event).unwrap();
    }
    file::save(
        &path,
        &ReplicaFile {
            replica,
            ..ReplicaFile::default()
        },
    )
    .unwrap();
    let listed: Listed = Arc::default();
    listed.lock().unwrap().extend([
        (
            "acme/routes".to_owned(),
            vec![
                route("r1", "http://d.example/1"),
                route("r2", "http://c.example/2"),
            ],
        ),
        (
            "acme/sources".to_owned(),
            vec![json!({"id": "s1", "secret": "[redacted]"})],
        ),
    ]);
    let url = serve(listed.clone()).await;

    let equal = verify(&path, &url);
    let stdout = String::from_utf8_lossy(&equal.stdout);
    assert!(
        equal.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&equal.stderr)
    );
    assert_eq!(
        stdout,
        format!("the replica equals {url}: 3 subjects kept\n")
    );

    // The node has r3 again (its delete is all the replica knows), and r1 changed.
    listed.lock().unwrap().insert(
        "acme/routes".into(),
        vec![
            route("r1", "http://e.example/1"),
            route("r2", "http://c.example/2"),
            route("r3", "http://a.example/3"),
        ],
    );
    let differs = verify(&path, &url);
    assert_eq!(differs.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&differs.stdout);
    let r1 = |d: &str| serde_json::to_string(&route("r1", d)).unwrap();
    let r3 = serde_json::to_string(&route("r3", "http://a.example/3")).unwrap();
    assert_eq!(stdout, format!(
        "different acme/routes/r1 (destination): replica {}, api {}\nmissing   acme/routes/r3: api {r3}\n",
        r1("http://d.example/1"),
        r1("http://e.example/1"),
    ));
    let stderr = String::from_utf8_lossy(&differs.stderr);
    assert!(
        stderr.contains(&format!("the replica differs from {url} in 2 subjects")),
        "{stderr}"
    );
    for output in [&equal, &differs] {
        let all = [&output.stdout[..], &output.stderr[..]].concat();
        assert!(!String::from_utf8_lossy(&all).contains(TOKEN));
    }

    // A damaged file is an error, not an empty replica.
    std::fs::write(&path, b"{\"format\":1,").unwrap();
    let damaged = verify(&path, &url);
    assert_eq!(damaged.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&damaged.stderr);
    assert!(stderr.contains("is damaged"), "{stderr}");
}
