//! The processes of a fleet test: `ankusa serve` nodes and `ankusa follow` consumers, each a
//! child of the test that it kills with -9 and starts again on the same files and port.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ankusa::api::auth::digest_hex;
use serde_json::Value;

use crate::support::eventually;
use crate::support::node::ADMIN;

pub use ankusa_sinks::test_support::free_port;

/// A child process the test restarts: its command line, log file and the running child.
pub struct Proc {
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

impl Proc {
    /// `ankusa <args>`, logging to `log` (appended over restarts).
    pub fn new(args: Vec<String>, log: PathBuf) -> Proc {
        Proc {
            args,
            log,
            child: None,
        }
    }

    /// Start it.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_ankusa"))
            .args(&self.args)
            .env_remove("ANKUSA_CONFIG")
            .env("ANKUSA_LOG__LEVEL", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("spawn ankusa");
        self.child = Some(child);
    }

    /// Panic with its log if it has exited (a node that could not start, say on a port another
    /// process took between `free_port` and its bind).
    pub fn assert_running(&mut self) {
        let exited = self.child.as_mut().map(|c| c.try_wait());
        if let Some(Ok(Some(status))) = exited {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            panic!("ankusa {:?} exited ({status}); its log:\n{log}", self.args);
        }
    }

    /// kill -9, and wait for it to be gone.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A node of the fleet: its config file, data and backup dirs, and its port.
pub struct NodeProc {
    pub uri: String,
    pub url: String,
    pub data: PathBuf,
    pub backups: PathBuf,
    pub proc: Proc,
}

/// What the nodes of a fleet share: Redis, the broker and topic, the webhook follower.
pub struct Shared<'a> {
    pub redis_url: &'a str,
    /// More `[routes]` settings (Sentinel, replicas), as TOML lines.
    pub routes: &'a str,
    pub brokers: &'a str,
    pub topic: &'a str,
    pub hook_url: &'a str,
    pub hook_secret: &'a str,
}

impl NodeProc {
    /// Node `name` under `dir`: routes in the shared Redis, its own sources, Kafka (with
    /// tombstones) and webhook sinks.
    pub fn new(dir: &Path, name: &str, shared: &Shared<'_>) -> NodeProc {
        let home = dir.join(name);
        std::fs::create_dir_all(&home).unwrap();
        let port = free_port();
        let (data, backups) = (home.join("data"), home.join("backups"));
        let uri = format!("urn:ankusa:{name}");
        let config = format!(
            r#"
[node]
uri = "{uri}"
data_dir = "{data}"
backup_dir = "{backups}"

[api]
listen = "127.0.0.1:{port}"
tokens = [{{ name = "fleet", sha256 = "{digest}", scopes = ["admin:read", "admin:write", "audit:read", "events:read"] }}]

[routes]
store = "redis"
redis_url = "{redis}"
{routes}

[settlement]
interval = "200ms"

[lifecycle]
sinks = ["kafka", "hook"]

[lifecycle.sink.kafka]
kind = "kafka"
brokers = "{brokers}"
topic = "{topic}"
tombstones = true
retry = {{ initial = "20ms", max = "200ms" }}

[lifecycle.sink.hook]
kind = "webhook"
url = "{hook}"
secrets = ["{secret}"]
retry = {{ initial = "20ms", max = "200ms", max_retry_after = "200ms" }}
"#,
            data = data.display(),
            backups = backups.display(),
            digest = digest_hex(ADMIN),
            redis = shared.redis_url,
            routes = shared.routes,
            brokers = shared.brokers,
            topic = shared.topic,
            hook = shared.hook_url,
            secret = shared.hook_secret,
        );
        let path = home.join("config.toml");
        std::fs::write(&path, config).unwrap();
        let args = vec![
            "--config".into(),
            path.to_str().unwrap().into(),
            "serve".into(),
        ];
        NodeProc {
            uri,
            url: format!("http://127.0.0.1:{port}"),
            data,
            backups,
            proc: Proc::new(args, home.join("node.log")),
        }
    }

    /// Start it and wait until it is ready.
    pub async fn start(&mut self) {
        self.proc.start();
        let client = reqwest::Client::new();
        let ready = format!("{}/readyz", self.url);
        let proc = &mut self.proc;
        let up = async || {
            proc.assert_running();
            let r = client.get(&ready).send().await;
            r.is_ok_and(|r| r.status().is_success())
        };
        eventually("the node to be ready", Duration::from_secs(60), up).await;
    }

    /// `GET path` as JSON.
    pub async fn get(&self, path: &str) -> Value {
        reqwest::Client::new()
            .get(format!("{}{path}", self.url))
            .bearer_auth(ADMIN)
            .send()
            .await
            .expect("GET")
            .json()
            .await
            .expect("JSON")
    }

    /// Wait until every sink has confirmed every row, and no snapshot runs.
    pub async fn drained(&self) {
        let drained = async || {
            let s = self.get("/admin/v1/lifecycle").await;
            let seq = s["audit_seq"].as_u64().unwrap();
            let sinks = s["sinks"].as_array().unwrap();
            let snapshot = self.get("/admin/v1/lifecycle/snapshot").await;
            sinks.iter().all(|k| k["position"].as_u64() == Some(seq))
                && snapshot["running"].is_null()
        };
        eventually(
            "every sink to confirm every row",
            Duration::from_secs(90),
            drained,
        )
        .await;
    }
}
