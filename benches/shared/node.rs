//! The node under load: the real node (`ankusa::node::serve`) on 127.0.0.1:0 over a fresh
//! store, on a runtime of its own, so that its tasks and the load generator's do not share a
//! scheduler queue (as with a load generator in another process).

use std::time::{Duration, Instant};

use ankusa::api::auth::digest_hex;
use ankusa::config::Config;
use serde_json::{json, Value};
use tokio::sync::oneshot;

/// The one token of the bench, with every scope.
pub const TOKEN: &str = "tok-bench-7c31e9";

/// A node serving on loopback; stopped (writer flushed, store closed) on [`Node::stop`].
pub struct Node {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    runtime: tokio::runtime::Runtime,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    _dir: tempfile::TempDir,
}

/// The embedded default config with the store in `dir`, the bench's token and no lifecycle
/// sinks (flagged rows still go to the outbox), then `tweak`.
fn config(dir: &std::path::Path, tweak: impl FnOnce(&mut Value)) -> Config {
    use figment::providers::Format as _;
    let mut v: Value = figment::Figment::from(figment::providers::Toml::string(
        ankusa::config::DEFAULT_TOML,
    ))
    .extract()
    .expect("the default config");
    v["node"]["data_dir"] = json!(dir.join("data"));
    v["node"]["backup_dir"] = json!(dir.join("backups"));
    v["api"]["tokens"] = json!([{"name": "bench", "sha256": digest_hex(TOKEN),
        "scopes": ["admin:read", "admin:write", "audit:read"]}]);
    v["lifecycle"]["sinks"] = json!([]);
    tweak(&mut v);
    serde_json::from_value(v).expect("the bench's config")
}

impl Node {
    /// Start a node on a fresh store, its config changed by `tweak`, and wait until ready.
    pub fn start(tweak: impl FnOnce(&mut Value)) -> Node {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = config(dir.path(), tweak);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("node")
            .build()
            .expect("the node's runtime");
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind 127.0.0.1:0");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let (stop, stopped) = oneshot::channel::<()>();
        let task = runtime.spawn(ankusa::node::serve(config, listener, async {
            let _ = stopped.await;
        }));
        let node = Node {
            base,
            runtime,
            stop,
            task,
            _dir: dir,
        };
        node.wait_ready();
        node
    }

    fn wait_ready(&self) {
        let url = format!("{}/readyz", self.base);
        let deadline = Instant::now() + Duration::from_secs(60);
        self.runtime.block_on(async {
            let client = reqwest::Client::builder().no_proxy().build().unwrap();
            loop {
                if let Ok(r) = client.get(&url).send().await {
                    if r.status() == reqwest::StatusCode::OK {
                        return;
                    }
                }
                assert!(Instant::now() < deadline, "the node was not ready in 60 s");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
    }

    /// Stop it and wait until it has flushed and closed its store.
    pub fn stop(self) {
        let _ = self.stop.send(());
        self.runtime
            .block_on(self.task)
            .expect("the node's task")
            .expect("the node ran cleanly");
    }
}
