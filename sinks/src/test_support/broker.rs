//! A real Kafka-compatible broker for tests and benchmarks: tansu, started on a free loopback
//! port with in-memory storage, killed when dropped.
//!
//! `scripts/tansu` installs it when missing (`scripts/test` and `make bench` call it); set
//! `TANSU_BIN` to use another binary.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::ClientConfig;

/// The broker process, killed when dropped.
pub struct Broker {
    child: Child,
    /// `host:port` for `bootstrap.servers`.
    pub address: String,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Broker {
    /// Start a broker and wait until it listens.
    pub fn start() -> Broker {
        let port = super::free_port();
        let url = format!("tcp://127.0.0.1:{port}");
        let child = Command::new(tansu().expect(
            "tansu is not installed: run scripts/tansu (cargo install tansu --features dynostore)",
        ))
        .arg("broker")
        .args(["--listener-url", &url, "--advertised-listener-url", &url])
        .args(["--storage-engine", "memory://tansu/"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tansu");
        let address = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(&address).is_err() {
            assert!(
                Instant::now() < deadline,
                "tansu did not listen on {address}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Broker { child, address }
    }

    /// Create `topic` with `partitions` partitions (replication 1).
    pub async fn create_topic(&self, topic: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.address)
            .create()
            .unwrap();
        let topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
        let results = admin
            .create_topics([&topic], &AdminOptions::new())
            .await
            .unwrap();
        for r in results {
            r.unwrap();
        }
    }
}

/// Whether a tansu binary is there to start (the benchmark asks; the tests start it or fail).
pub fn installed() -> bool {
    tansu().is_some()
}

/// The tansu binary: `TANSU_BIN`, else the first on `PATH`, else `~/.cargo/bin/tansu`.
fn tansu() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TANSU_BIN") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let candidates = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("tansu"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo/bin/tansu"));
    candidates.into_iter().chain(home).find(|p| p.is_file())
}
