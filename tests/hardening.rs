//! Issue 17's defects, over the real HTTP API and the real binary: a write-only secret that
//! cannot be tested by a refused change, a first-start token that is kept only once it was
//! shown, the node's files kept to their owner, and the `X-Forwarded-For` forms that common
//! proxies send.

#[path = "common/api.rs"]
mod api;
#[path = "common/lifecycle.rs"]
mod lifecycle_support;
#[path = "common/redis.rs"]
mod redis_server;
#[path = "common/served.rs"]
mod served;

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use api::*;
use lifecycle_support::Receiver;
use redis_server::RedisServer;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use served::{serve, Stream};

const SOURCES: &str = "/admin/v1/tenants/t1/sources";
const RIGHT: &str = "the-right-secret";
const WRONG: &str = "a-wrong-guess";

/// The one lifecycle sink is a webhook to `url` (retrying quickly), and one unconfirmed row
/// fills the outbox backlog.
fn backlog_of_one(v: &mut Value, url: &str) {
    v["lifecycle"]["sinks"] = json!(["hook"]);
    v["lifecycle"]["sink"]["hook"] = json!({
        "kind": "webhook", "url": url,
        "secrets": ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
        "retry": {"initial": "5ms", "max": "20ms", "max_retry_after": "20ms"},
    });
    v["audit"]["outbox_max_backlog"] = json!(1);
}

async fn patch_secret(node: &TestNode, secret: &str) -> Reply {
    node.call(
        Method::PATCH,
        &format!("{SOURCES}/s1"),
        WRITER,
        Some(json!({"secret": secret})),
    )
    .await
}

async fn wait_backlog_empty(node: &TestNode) {
    for _ in 0..500 {
        let s = node
            .call(Method::GET, "/admin/v1/lifecycle", ADMIN, None)
            .await
            .json();
        if s["backlog"] == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the backlog did not drain");
}

/// With the backlog full, a change naming the source's secret is refused the same way
/// whether the secret is the one it has or not; with room again, the same secret writes a
/// row. `store` places the sources (local or Redis).
async fn a_refused_secret_change_tells_nothing(store: impl Fn(&mut Value)) {
    let (receiver, url) = Receiver::start(503).await;
    let node = TestNode::start_with(|v| {
        backlog_of_one(v, &url);
        store(v);
    })
    .await;
    let source = json!({"id": "s1", "kind": "webhook", "secret": RIGHT, "config": {}});
    let created = node.call(Method::POST, SOURCES, ADMIN, Some(source)).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);

    // The sink answers 503: the create's row stays unconfirmed and fills the backlog.
    let right = patch_secret(&node, RIGHT).await;
    let wrong = patch_secret(&node, WRONG).await;
    assert_eq!(
        right.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        right.text
    );
    assert_eq!(
        (right.status, &right.text, right.seq()),
        (wrong.status, &wrong.text, wrong.seq()),
        "the answer tells whether the secret was right"
    );
    assert_eq!(right.header("retry-after"), wrong.header("retry-after"));
    assert_eq!(right.code(), "audit_backlog");
    assert_eq!(node.rows().await.len(), 1, "a refusal writes no row");

    // Room again: the same secret is a change like any other, with its row.
    receiver.answer(200);
    wait_backlog_empty(&node).await;
    let same = patch_secret(&node, RIGHT).await;
    assert_eq!(same.status, StatusCode::OK, "{}", same.text);
    let seq = same.seq().expect("the same secret again writes a row");
    assert_eq!(same.json()["revision"], 2);
    assert_eq!(same.json()["secret"], "[redacted]");
    let row = node.row(seq).await;
    assert_eq!(row["action"], "source.update");
    assert_eq!(row["detail"], json!({"fields": 1}));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_change_of_a_local_source_does_not_tell_whether_its_secret_matched() {
    a_refused_secret_change_tells_nothing(|_| {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_change_of_a_redis_source_does_not_tell_whether_its_secret_matched() {
    let redis = RedisServer::start();
    let url = redis.url();
    a_refused_secret_change_tells_nothing(move |v| {
        v["sources"]["store"] = json!("redis");
        v["sources"]["redis_url"] = json!(url);
        v["settlement"]["interval"] = json!("100ms");
    })
    .await;
}

/// The permission bits of `path`.
fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// Run `ankusa serve` with its data under `dir` and `stdout` as its stdout until it exits
/// (at most 60 s); returns whether it succeeded and what it wrote on stderr.
fn serve_until_exit(dir: &Path, stdout: Stdio) -> (bool, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.join("node.toml");
    let toml = format!(
        "[node]\ndata_dir = \"{}\"\n[api]\nlisten = \"127.0.0.1:{port}\"\n",
        dir.join("data").display()
    );
    std::fs::write(&config, toml).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .args(["--config", config.to_str().unwrap(), "serve"])
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ankusa serve");
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ankusa serve did not stop although it could not print its token");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (status.success(), reader.join().unwrap())
}

#[test]
fn a_first_start_that_cannot_print_its_token_fails_and_keeps_no_digest() {
    let full = || {
        Stdio::from(
            std::fs::File::options()
                .write(true)
                .open("/dev/full")
                .unwrap(),
        )
    };
    let closed = || {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        Stdio::from(writer)
    };
    let outs: [(&str, &dyn Fn() -> Stdio); 2] = [("/dev/full", &full), ("a closed pipe", &closed)];
    for (what, stdout) in outs {
        let dir = tempfile::tempdir().unwrap();
        let (ok, stderr) = serve_until_exit(dir.path(), stdout());
        assert!(!ok, "{what}: the start must fail: {stderr}");
        let data = dir.path().join("data");
        let left: Vec<_> = std::fs::read_dir(&data)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("admin-token"))
            .collect();
        assert!(
            left.is_empty(),
            "{what}: a digest no one has seen: {left:?}"
        );
        assert!(
            stderr.contains("could not print the first-start admin token"),
            "{what}: a clear message: {stderr}"
        );

        // The next start, with stdout open, makes and shows a token.
        let again = serve(dir.path(), "", Stream::Stdout);
        let shown = (0..50)
            .filter_map(|_| again.lines.recv_timeout(Duration::from_secs(30)).ok())
            .any(|line| line.starts_with("ANKUSA_TOKEN="));
        assert!(shown, "{what}: the next start shows a token");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_start_keeps_its_files_to_their_owner() {
    let dir = tempfile::tempdir().unwrap();
    let node = serve(dir.path(), "", Stream::Stdout);
    let token = (0..50)
        .filter_map(|_| node.lines.recv_timeout(Duration::from_secs(30)).ok())
        .find_map(|line| line.strip_prefix("ANKUSA_TOKEN=").map(str::to_owned))
        .expect("a token printed");
    let client = reqwest::Client::new();
    let backup = loop {
        if let Ok(r) = client
            .post(format!("{}/admin/v1/backups", node.base))
            .bearer_auth(&token)
            .send()
            .await
        {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(backup.status().is_success(), "{}", backup.status());
    let data = dir.path().join("data");
    let events = data.join("lifecycle-events.jsonl");
    for _ in 0..100 {
        if events.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(mode(&data), 0o700, "the data dir");
    assert_eq!(mode(&data.join("admin-token.sha256")), 0o600, "the digest");
    assert_eq!(mode(&events), 0o600, "the file sink's events");
    let backups = dir.path().join("backups");
    assert_eq!(mode(&backups), 0o700, "the backup dir");
    assert_eq!(mode(&backups.join("ankusa")), 0o700, "the sidecar dir");
    for sidecar in std::fs::read_dir(backups.join("ankusa")).unwrap() {
        assert_eq!(mode(&sidecar.unwrap().path()), 0o600, "a sidecar");
    }
}

async fn create_via(node: &TestNode, id: &str, xff: &str) -> Reply {
    node.send(
        node.req(Method::POST, SOURCES, Some(ADMIN))
            .header("x-forwarded-for", xff)
            .json(&json!({"id": id, "kind": "k"})),
    )
    .await
}

#[tokio::test]
async fn forwarded_for_takes_the_forms_proxies_send() {
    let node = TestNode::start_with(|c| c["api"]["trusted_proxies"] = json!(["127.0.0.0/8"])).await;
    let cases = [
        ("203.0.113.7:41234", "203.0.113.7"),
        ("[2001:db8::1]:443", "2001:db8::1"),
        ("[2001:db8::1]", "2001:db8::1"),
        ("2001:db8::2", "2001:db8::2"),
        (
            "198.51.100.1, 203.0.113.8:8080, 127.0.0.2:80",
            "203.0.113.8",
        ),
        // Not an address: the walk stops there, at the proxy that sent it.
        ("unknown", "127.0.0.1"),
        ("_hidden, 127.0.0.2", "127.0.0.1"),
        ("203.0.113.9, unknown", "127.0.0.1"),
    ];
    for (i, (xff, client)) in cases.iter().enumerate() {
        let r = create_via(&node, &format!("s{i}"), xff).await;
        assert_eq!(r.status, StatusCode::CREATED, "{xff}: {}", r.text);
        let row = node.row(r.seq().unwrap()).await;
        assert_eq!(row["remote_ip"], *client, "{xff}");
    }
    node.stop().await;
}
