//! The node under test: a real node served on 127.0.0.1:0 over a fresh store, with known
//! tokens, and a client that keeps every response body it saw.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ankusa::api::auth::digest_hex;
use ankusa::config::Config;
use reqwest::header::HeaderMap;
use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Every scope; its name (`alice`) is the actor of the rows it writes.
pub const ADMIN: &str = "tok-admin-6f1d2c";
/// `admin:read` only.
pub const READER: &str = "tok-reader-91ab07";
/// `admin:write` only.
pub const WRITER: &str = "tok-writer-44e0c1";
/// `audit:read` only.
pub const AUDITOR: &str = "tok-auditor-d2f9aa";
/// `events:read` only: a consumer watching the lifecycle events.
pub const WATCHER: &str = "tok-watcher-5c3e80";
/// Every test token.
pub const TOKENS: [&str; 5] = [ADMIN, READER, WRITER, AUDITOR, WATCHER];

/// The node's configuration for a test: the embedded default, with the store in `dir`, the
/// five test tokens, and no lifecycle sinks (the outbox is still written), then `tweak`.
pub fn config(dir: &Path, tweak: impl FnOnce(&mut Value)) -> Config {
    use figment::providers::Format as _;
    let mut v: Value = figment::Figment::from(figment::providers::Toml::string(
        ankusa::config::DEFAULT_TOML,
    ))
    .extract()
    .expect("default config");
    v["node"]["data_dir"] = json!(dir);
    v["api"]["tokens"] = json!([
        {"name": "alice", "sha256": digest_hex(ADMIN),
         "scopes": ["admin:read", "admin:write", "audit:read"]},
        {"name": "reader", "sha256": digest_hex(READER), "scopes": ["admin:read"]},
        {"name": "writer", "sha256": digest_hex(WRITER), "scopes": ["admin:write"]},
        {"name": "auditor", "sha256": digest_hex(AUDITOR), "scopes": ["audit:read"]},
        {"name": "watcher", "sha256": digest_hex(WATCHER), "scopes": ["events:read"]},
    ]);
    if v["lifecycle"].get("sinks").is_some() {
        v["lifecycle"]["sinks"] = json!([]);
    }
    tweak(&mut v);
    serde_json::from_value(v).expect("test config")
}

/// A response, read whole.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub text: String,
}

impl Reply {
    /// The body as JSON (`Null` if it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null)
    }

    /// The echoed `X-Request-Id`.
    pub fn request_id(&self) -> String {
        self.header("x-request-id")
            .expect("every response echoes X-Request-Id")
    }

    /// The seq of the row the change wrote.
    pub fn seq(&self) -> Option<u64> {
        self.header("x-audit-seq")
            .map(|s| s.parse().expect("numeric seq"))
    }

    /// A header as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().expect("ASCII header").to_owned())
    }

    /// The error code of a JSON error body.
    pub fn code(&self) -> String {
        self.json()["error"].as_str().unwrap_or_default().to_owned()
    }
}

/// A node serving on 127.0.0.1:0.
pub struct TestNode {
    pub base: String,
    pub dir: tempfile::TempDir,
    pub client: reqwest::Client,
    /// Every response body this node's helpers received.
    pub bodies: Arc<Mutex<Vec<String>>>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

impl TestNode {
    /// A node on a fresh store with the test tokens.
    pub async fn start() -> TestNode {
        Self::start_with(|_| {}).await
    }

    /// A node on a fresh store, its config changed by `tweak`.
    pub async fn start_with(tweak: impl FnOnce(&mut Value)) -> TestNode {
        Self::start_on(tempfile::tempdir().expect("tempdir"), tweak).await
    }

    /// A node on the store in `dir` (`<dir>/data`, as [`TestNode::stop`] hands it back),
    /// its config changed by `tweak`.
    pub async fn start_on(dir: tempfile::TempDir, tweak: impl FnOnce(&mut Value)) -> TestNode {
        let data = dir.path().join("data");
        let config = config(&data, tweak);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(ankusa::node::serve(config, listener, async {
            let _ = stopped.await;
        }));
        let node = TestNode {
            base,
            dir,
            client: reqwest::Client::new(),
            bodies: Arc::default(),
            stop: Some(stop),
            task: Some(task),
        };
        node.wait_ready().await;
        node
    }

    async fn wait_ready(&self) {
        let ready = async || {
            let r = self.client.get(self.url("/readyz")).send().await;
            r.is_ok_and(|r| r.status() == StatusCode::OK)
        };
        super::eventually("the node to be ready", Duration::from_secs(60), ready).await;
    }

    /// The store's directory.
    pub fn data_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("data")
    }

    /// The URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A request to `path`, with a bearer `token` if given.
    pub fn req(&self, method: Method, path: &str, token: Option<&str>) -> RequestBuilder {
        let rb = self.client.request(method, self.url(path));
        match token {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        }
    }

    /// A JSON request whose body is over the node's limit: the node answers 413 without
    /// reading it and closes the connection, so it goes on a connection of its own (one
    /// taken from the pool again could race that close and fail the next request).
    pub fn oversized(&self, method: Method, path: &str, body: String) -> RequestBuilder {
        self.req(method, path, Some(ADMIN))
            .header("connection", "close")
            .header("content-type", "application/json")
            .body(body)
    }

    /// Send `rb` and read the whole response.
    pub async fn send(&self, rb: RequestBuilder) -> Reply {
        let r = rb.send().await.expect("request");
        let status = r.status();
        let headers = r.headers().clone();
        let text = r.text().await.expect("body");
        self.bodies.lock().unwrap().push(text.clone());
        Reply {
            status,
            headers,
            text,
        }
    }

    /// What `/metrics` renders now.
    pub async fn metrics(&self) -> String {
        let r = self
            .client
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("/metrics");
        r.text().await.expect("/metrics body")
    }

    /// `method path` with `token` and an optional JSON body.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> Reply {
        let mut rb = self.req(method, path, Some(token));
        if let Some(body) = body {
            rb = rb.json(&body);
        }
        self.send(rb).await
    }

    /// Every row of the trail, through the audit API.
    pub async fn rows(&self) -> Vec<Value> {
        let mut rows = Vec::new();
        let mut after = 0;
        loop {
            let r = self
                .call(
                    Method::GET,
                    &format!("/admin/v1/audit?after={after}&limit=1000"),
                    AUDITOR,
                    None,
                )
                .await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.text);
            let page = r.json();
            rows.extend(page["rows"].as_array().expect("rows").iter().cloned());
            match page["next"].as_u64() {
                Some(next) => after = next,
                None => return rows,
            }
        }
    }

    /// The row of `seq`, through the audit API.
    pub async fn row(&self, seq: u64) -> Value {
        let r = self
            .call(
                Method::GET,
                &format!("/admin/v1/audit/{seq}"),
                AUDITOR,
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        r.json()
    }

    /// Stop the node (it flushes the writer and the store) and hand back its directory.
    pub async fn stop(self) -> tempfile::TempDir {
        let (dir, ran) = self.stop_as_it_ran().await;
        ran.expect("node ran cleanly");
        dir
    }

    /// Stop the node and hand back its directory and what its run returned.
    pub async fn stop_as_it_ran(mut self) -> (tempfile::TempDir, anyhow::Result<()>) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let ran = match self.task.take() {
            Some(task) => task.await.expect("node task"),
            None => Ok(()),
        };
        let dir = tempfile::tempdir().expect("tempdir");
        (std::mem::replace(&mut self.dir, dir), ran)
    }
}

/// A 64-hex-digit hash.
pub fn is_hash(v: &Value) -> bool {
    v.as_str()
        .is_some_and(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Assert that `reply` is a JSON error of `status` and `code` that echoes a request id.
pub fn assert_error(reply: &Reply, status: u16, code: &str) {
    assert_eq!(reply.status.as_u16(), status, "{}", reply.text);
    assert_eq!(reply.code(), code, "{}", reply.text);
    assert!(reply.json()["message"].is_string(), "{}", reply.text);
    assert!(
        reply.header("x-request-id").is_some(),
        "no request id echoed"
    );
}
