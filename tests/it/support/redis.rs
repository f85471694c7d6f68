//! A real `redis-server` for a test: on a free port of 127.0.0.1, its data in a temp dir
//! (append-only, fsynced on every write, so a restart keeps everything), killed when dropped.
//! `scripts/deps` installs redis-server when it is missing.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server the test owns.
pub struct RedisServer {
    /// Its port on 127.0.0.1.
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// The port of the server it replicates, if it is a replica.
    replica_of: Option<u16>,
}

impl RedisServer {
    /// Start one on a free port and wait until it answers. A port that another test's server
    /// took meanwhile is detected (that server keeps its data elsewhere) and another is tried.
    pub fn start() -> RedisServer {
        RedisServer::launched(None)
    }

    /// Start a replica of the server on port `primary`, as [`start`](RedisServer::start).
    pub fn start_replica_of(primary: u16) -> RedisServer {
        RedisServer::launched(Some(primary))
    }

    fn launched(replica_of: Option<u16>) -> RedisServer {
        let mut server = RedisServer {
            port: 0,
            dir: tempfile::tempdir().expect("tempdir"),
            child: None,
            replica_of,
        };
        for _ in 0..5 {
            server.port = ankusa_sinks::test_support::free_port();
            if server.launch() {
                return server;
            }
        }
        panic!("no redis-server of this test came up on a free port");
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kill it (SIGKILL): every acknowledged write is in its fsynced append-only file.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Send it `signal` (`STOP` to hang it, `CONT` to let it go on).
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id();
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .expect("kill");
        assert!(sent.success());
    }

    /// Start it again on the same port and data, and wait until it answers.
    pub fn restart(&mut self) {
        assert!(
            self.launch(),
            "redis-server on port {} did not come back",
            self.port
        );
    }

    /// Kill it and start it again with no data (a restart without persistence), as a primary
    /// (a promoted replica's configuration, rewritten by Sentinel, says so): its replicas then
    /// copy the empty data set.
    pub fn restart_empty(&mut self) {
        self.stop();
        self.replica_of = None;
        for entry in std::fs::read_dir(self.dir.path()).expect("redis dir") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                std::fs::remove_dir_all(&path).expect("remove the AOF dir");
            } else {
                std::fs::remove_file(&path).expect("remove a data file");
            }
        }
        self.restart();
    }

    /// Spawn redis-server on `self.port` and wait until it answers as this test's server.
    fn launch(&mut self) -> bool {
        self.stop();
        let mut command = Command::new("redis-server");
        if let Some(primary) = self.replica_of {
            command.args(["--replicaof", "127.0.0.1", &primary.to_string()]);
        }
        let child = command
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(["--save", ""])
            .args(["--appendonly", "yes"])
            .args(["--appendfsync", "always"])
            .args(["--protected-mode", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/deps installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                // It exited: the port is taken.
                self.child = None;
                return false;
            }
            if self.answers() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.stop();
        false
    }

    /// Whether the server on the port is this one: its data dir is ours.
    fn answers(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        let mut buf = [0u8; 4096];
        // Redis reports the directory it changed into: the real path.
        let dir = std::fs::canonicalize(self.dir.path()).unwrap_or_else(|_| self.dir.path().into());
        let dir = dir.to_string_lossy().into_owned();
        s.write_all(b"CONFIG GET dir\r\n").is_ok()
            && s.read(&mut buf)
                .is_ok_and(|n| String::from_utf8_lossy(&buf[..n]).contains(&dir))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A Redis Sentinel (`redis-server --sentinel`) the test owns, watching one primary; killed
/// when dropped.
pub struct SentinelServer {
    /// Its port on 127.0.0.1.
    pub port: u16,
    _dir: tempfile::TempDir,
    child: Child,
}

impl SentinelServer {
    /// A sentinel that watches the primary on port `primary` as `master`, calls it down after
    /// `down_after_ms` without an answer, and promotes its replica then (a quorum of one).
    pub fn start(master: &str, primary: u16, down_after_ms: u64) -> SentinelServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = ankusa_sinks::test_support::free_port();
        // Sentinel rewrites its configuration file: it must be one of its own.
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {dir}\n\
                 sentinel monitor {master} 127.0.0.1 {primary} 1\n\
                 sentinel down-after-milliseconds {master} {down_after_ms}\n\
                 sentinel failover-timeout {master} 10000\n\
                 sentinel parallel-syncs {master} 1\n",
                dir = dir.path().display()
            ),
        )
        .unwrap();
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/deps installs it)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the sentinel did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        // The sentinel learns the primary's replicas from its INFO: a primary killed before
        // that leaves it nothing to promote, ever.
        let replicas = query::<String>(primary, redis::cmd("INFO").arg("replication"))
            .lines()
            .find_map(|l| {
                l.strip_prefix("connected_slaves:")?
                    .trim()
                    .parse::<usize>()
                    .ok()
            })
            .unwrap_or(0);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let known: Vec<redis::Value> =
                query(port, redis::cmd("SENTINEL").arg("REPLICAS").arg(master));
            if known.len() >= replicas {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the sentinel did not learn the replicas"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        SentinelServer {
            port,
            _dir: dir,
            child,
        }
    }
}

impl Drop for SentinelServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `cmd`'s answer from the Redis (or sentinel) on `port`, on a connection of its own.
fn query<T: redis::FromRedisValue>(port: u16, cmd: &mut redis::Cmd) -> T {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("connect");
    cmd.query(&mut conn).expect("query")
}

/// A connection to the Redis at `url` and every key it holds.
pub async fn keys(url: &str) -> (redis::aio::MultiplexedConnection, Vec<String>) {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    (conn, keys)
}
