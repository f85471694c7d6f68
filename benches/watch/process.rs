//! The node as a process of its own (`ankusa serve`, the release binary cargo built beside
//! this bench), so that its memory figures are its own and not the bench's: a config file
//! over the embedded default, a free loopback port, its `/proc/<pid>/status` read from here.

use std::io::Write as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ankusa::api::auth::digest_hex;

use crate::node::TOKEN;

/// A node process, killed when dropped (its store is a temp dir's).
pub struct Process {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    child: Child,
    dir: tempfile::TempDir,
}

/// The config file: the bench's token, no sink, room for `watchers` (as [`crate::room`]).
fn config(dir: &std::path::Path, port: u16, watchers: usize) -> String {
    let (max_watchers, connections) = crate::caps(watchers);
    format!(
        r#"[node]
data_dir = "{dir}/data"
backup_dir = "{dir}/backups"

[api]
listen = "127.0.0.1:{port}"
max_watchers = {max_watchers}
max_connections = {connections}
max_connections_per_peer = {connections}

[[api.tokens]]
name = "bench"
sha256 = "{digest}"
scopes = {scopes}

[lifecycle]
sinks = []

[log]
level = "warn"
"#,
        dir = dir.display(),
        digest = digest_hex(TOKEN),
        scopes = serde_json::json!(crate::SCOPES),
    )
}

impl Process {
    /// Start a node on a fresh store with room for `watchers`, and wait until it is ready;
    /// another port is tried when the chosen one was taken meanwhile.
    pub fn start(runtime: &tokio::runtime::Runtime, watchers: usize) -> Process {
        for _ in 0..3 {
            let dir = tempfile::tempdir().expect("tempdir");
            let port = ankusa_sinks::test_support::free_port();
            let file = dir.path().join("node.toml");
            std::fs::File::create(&file)
                .and_then(|mut f| f.write_all(config(dir.path(), port, watchers).as_bytes()))
                .expect("the node's config file");
            let log = std::fs::File::create(dir.path().join("node.log")).expect("a log file");
            let child = Command::new(env!("CARGO_BIN_EXE_ankusa"))
                .arg("--config")
                .arg(&file)
                .arg("serve")
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("the log file"))
                .stderr(log)
                .spawn()
                .expect("start the ankusa binary");
            let mut node = Process {
                base: format!("http://127.0.0.1:{port}"),
                child,
                dir,
            };
            if node.ready(runtime) {
                return node;
            }
            eprintln!("the node did not start; its log:\n{}", node.log());
        }
        panic!("no node process came up");
    }

    /// Whether it answers `/readyz` within 60 s (false once it exited).
    fn ready(&mut self, runtime: &tokio::runtime::Runtime) -> bool {
        let url = format!("{}/readyz", self.base);
        let client = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("a client");
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            let answer = runtime.block_on(client.get(&url).send());
            if answer.is_ok_and(|r| r.status() == reqwest::StatusCode::OK) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// What it logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("node.log")).unwrap_or_default()
    }

    /// A figure of its `/proc/<pid>/status` in KiB (`VmRSS`, `VmHWM`).
    pub fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the node's /proc status (Linux)");
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("{field} in the node's /proc status"))
    }

    /// Its CPU time so far, in `/proc` ticks.
    pub fn cpu_ticks(&self) -> Option<u64> {
        crate::cpu::ticks(&std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
