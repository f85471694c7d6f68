//! A source's secret appears nowhere: not in a row, not in an outbox entity, not in any
//! response body (errors included), not in a log line, not in the RocksDB files. And
//! changing only the secret changes the row's hashes and nothing else anyone can read.
//!
//! The logs are captured by a process-wide `tracing` subscriber writing to a buffer, at
//! `debug` for everything and `trace` for the node.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use crate::support::node::*;
use ankusa::store::{keys, Cf, Store};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const SOURCES: &str = "/admin/v1/tenants/t1/sources";
/// A token no one configured: refused, and never logged either.
const BOGUS: &str = "tok-bogus-19c7e3";

/// The captured log output of this test process.
fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = buffer.clone();
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("debug,ankusa=trace"))
            .with_ansi(false)
            .with_writer(move || Capture(writer.clone()))
            .init();
        buffer
    })
    .clone()
}

struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Every file under `dir`, with its bytes.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push((path.display().to_string(), std::fs::read(&path).unwrap()));
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn the_secret_is_in_no_row_entity_response_log_or_file() {
    let logs = logs();
    let node = TestNode::start().await;
    let secrets = [
        "S3cr3t-alpha-7Q9xv", // set on create
        "S3cr3t-bravo-4K2mn", // set by an update, then sent again (a no-op)
        "S3cr3t-charlie-8Z1", // in refused creates and a wrong-typed body
        "S3cr3t-delta-3W0pl", // in the wrong field of another kind
    ];
    let marker = "stored-marker-5T8qq"; // stored in plain: proves the file scan sees values
    let create = node
        .call(Method::POST, SOURCES, ADMIN,
              Some(json!({"id": "s1", "kind": "webhook", "secret": secrets[0], "config": {"m": marker}})))
        .await;
    assert_eq!(create.status, StatusCode::CREATED, "{}", create.text);
    for _ in 0..2 {
        let r = node
            .call(
                Method::PATCH,
                &format!("{SOURCES}/s1"),
                ADMIN,
                Some(json!({"secret": secrets[1]})),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    }
    let refused = [
        json!({"id": "s2", "kind": "BAD KIND", "secret": secrets[2]}),
        json!({"id": "../s2", "kind": "k", "secret": secrets[2]}),
        json!({"id": "s2", "kind": "k", "secret": secrets[2], "config": 5}),
        json!({"id": "s2", "kind": "k", "secret": secrets[2], "extra": secrets[2]}),
        json!({"id": "s2", "kind": "k", "secret": [secrets[2]]}),
    ];
    for body in refused {
        let r = node.call(Method::POST, SOURCES, ADMIN, Some(body)).await;
        assert!(r.status.is_client_error(), "{}", r.text);
    }
    let r = node
        .call(
            Method::PUT,
            "/admin/v1/tenants/t1/overrides/k",
            ADMIN,
            Some(json!({"rate": secrets[3]})),
        )
        .await;
    assert_error(&r, 422, "invalid_input");
    let r = node
        .call(
            Method::PATCH,
            &format!("{SOURCES}/s1"),
            READER,
            Some(json!({"secret": secrets[3]})),
        )
        .await;
    assert_error(&r, 403, "forbidden");
    let r = node
        .call(
            Method::PATCH,
            &format!("{SOURCES}/s1"),
            BOGUS,
            Some(json!({"secret": secrets[3]})),
        )
        .await;
    assert_error(&r, 401, "unauthorized");
    // Reads of every kind: the subject, the list, the trail, one row.
    let got = node
        .call(Method::GET, &format!("{SOURCES}/s1"), READER, None)
        .await;
    assert_eq!(got.json()["secret"], "[redacted]");
    node.call(Method::GET, SOURCES, READER, None).await;
    let rows = node.rows().await;
    assert_eq!(
        rows.len(),
        3,
        "create and two updates (a secret sent is always set)"
    );
    node.row(2).await;

    // Responses.
    for body in node.bodies.lock().unwrap().iter() {
        for s in secrets {
            assert!(!body.contains(s), "a response holds a secret: {body}");
        }
    }
    // Files while the node runs (the WAL holds every batch, uncompressed).
    let data = node.data_dir();
    let running = files(&data);
    assert!(
        running.iter().any(|(_, b)| contains(b, marker)),
        "the scan sees stored values"
    );
    for (path, bytes) in &running {
        for s in secrets {
            assert!(!contains(bytes, s), "{path} holds a secret");
        }
    }
    // Files after the node stopped and flushed its memtables to table files.
    let dir = node.stop().await;
    for (path, bytes) in files(&data_path(&dir)) {
        for s in secrets {
            assert!(
                !contains(&bytes, s),
                "{path} holds a secret after the flush"
            );
        }
    }
    // The outbox entities: the redacted source, secret and all.
    let store = Store::open(&data_path(&dir)).unwrap();
    let mut entities = Vec::new();
    store
        .scan(Cf::Audit, &[keys::OUTBOX], &[keys::OUTBOX], |_, v| {
            entities.push(serde_json::from_slice::<Value>(v).unwrap());
            true
        })
        .unwrap();
    assert_eq!(entities.len(), 3, "one entity per source change");
    for e in &entities {
        assert_eq!(e["secret"], "[redacted]", "{e}");
        for s in secrets {
            assert!(!e.to_string().contains(s));
        }
    }
    drop(store);
    // Logs: they did capture the node's requests, and hold no secret and no token.
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(text.contains("admin request"), "{text}");
    for s in secrets.iter().chain(TOKENS.iter()).chain([BOGUS].iter()) {
        assert!(!text.contains(s), "a log line holds {s}");
    }
}

fn data_path(dir: &tempfile::TempDir) -> std::path::PathBuf {
    dir.path().join("data")
}

#[tokio::test]
async fn changing_only_the_secret_changes_the_hash_and_nothing_readable() {
    let _logs = logs();
    let node = TestNode::start().await;
    let item = format!("{SOURCES}/s1");
    let created = node
        .call(
            Method::POST,
            SOURCES,
            ADMIN,
            Some(json!({"id": "s1", "kind": "webhook", "secret": "one-1111", "config": {"a": 1}})),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let before = node.call(Method::GET, &item, READER, None).await.json();
    let changed = node
        .call(
            Method::PATCH,
            &item,
            ADMIN,
            Some(json!({"secret": "two-2222"})),
        )
        .await;
    assert_eq!(changed.status, StatusCode::OK);
    let after = node.call(Method::GET, &item, READER, None).await.json();
    // The readable source differs only in its revision.
    let mut expected = before.clone();
    expected["revision"] = json!(2);
    assert_eq!(after, expected);
    assert_eq!(changed.json(), after);

    let r1 = node.row(created.seq().unwrap()).await;
    let r2 = node.row(changed.seq().unwrap()).await;
    assert_eq!(r2["before_hash"], r1["after_hash"]);
    assert_ne!(
        r2["after_hash"], r2["before_hash"],
        "the hash shows that the secret changed"
    );
    assert_eq!(
        r2["detail"],
        json!({"fields": 1}),
        "a count, not which field"
    );
    assert_eq!(r2["action"], "source.update");

    // The same secret again is a change like any other (a row): telling it apart would let
    // a caller test a guess (issue 17).
    let again = node
        .call(
            Method::PATCH,
            &item,
            ADMIN,
            Some(json!({"secret": "two-2222"})),
        )
        .await;
    assert_eq!(again.status, StatusCode::OK);
    assert!(again.seq().is_some());
    assert_eq!(again.json()["revision"], 3);
    // Setting the first secret back makes a new hash (salted): an auditor cannot tell a
    // secret came back, nor test a guess.
    let back = node
        .call(
            Method::PATCH,
            &item,
            ADMIN,
            Some(json!({"secret": "one-1111"})),
        )
        .await;
    let r3 = node.row(back.seq().unwrap()).await;
    assert_ne!(r3["after_hash"], r1["after_hash"]);
    assert_eq!(node.rows().await.len(), 4);
    node.stop().await;
}
