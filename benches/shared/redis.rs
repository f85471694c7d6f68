//! redis-server processes for the benches of the Redis stores: a primary, a replica of one,
//! or a sentinel (`redis-server --sentinel`), each started on a free port of 127.0.0.1 with
//! its files in a temp dir and killed when dropped. `scripts/deps` installs redis-server.
//!
//! Append-only with `appendfsync` from `ANKUSA_BENCH_REDIS_FSYNC` (default `everysec`, what
//! docker-compose.yml's Redis runs with; `always` fsyncs before every reply).

// Each bench includes this file and uses some of it.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server the bench owns.
pub struct Redis {
    /// `redis://127.0.0.1:<port>`.
    pub url: String,
    /// Its `appendfsync` policy.
    pub fsync: String,
    /// Its port.
    pub port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Redis {
    /// Start a primary on a free port and wait until it answers; another port is tried if
    /// the chosen one was taken meanwhile.
    pub fn start() -> Redis {
        Redis::launch(&[])
    }

    /// Start a replica of the server on port `primary`, as [`Redis::start`].
    pub fn replica_of(primary: u16) -> Redis {
        Redis::launch(&["--replicaof", "127.0.0.1", &primary.to_string()])
    }

    /// A sentinel watching the primary on port `primary` as `master`, which it calls down
    /// after `down_after_ms` without an answer and replaces by its replica (a quorum of one).
    pub fn sentinel(master: &str, primary: u16, down_after_ms: u64) -> Redis {
        let mut redis = Redis::spawned("sentinel", |port, dir| {
            // Sentinel rewrites its configuration file: it must be one of its own.
            let conf = dir.join("sentinel.conf");
            let text = format!(
                "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {dir}\n\
                 sentinel monitor {master} 127.0.0.1 {primary} 1\n\
                 sentinel down-after-milliseconds {master} {down_after_ms}\n\
                 sentinel failover-timeout {master} 10000\n",
                dir = dir.display()
            );
            std::fs::write(&conf, text).expect("sentinel.conf");
            let mut command = Command::new("redis-server");
            command.arg(&conf).arg("--sentinel");
            (command, b"PING\r\n", "+PONG".to_owned())
        });
        redis.fsync = String::new();
        redis
    }

    fn launch(extra: &[&str]) -> Redis {
        let fsync = std::env::var("ANKUSA_BENCH_REDIS_FSYNC").unwrap_or_else(|_| "everysec".into());
        let mut redis = Redis::spawned("redis-server", |port, dir| {
            let mut command = Command::new("redis-server");
            command
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .arg("--dir")
                .arg(dir)
                .args(["--save", "", "--appendonly", "yes", "--appendfsync", &fsync])
                .args(["--protected-mode", "no"])
                .args(extra);
            // A server that answers with our data dir is this one, not another on the port.
            let ours = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.into());
            (
                command,
                b"CONFIG GET dir\r\n",
                ours.to_string_lossy().into_owned(),
            )
        });
        redis.fsync = fsync;
        redis
    }

    /// Start `what` on a free port with its files in a temp dir, as `command` makes it from
    /// the two; it is up once its answer to the command it gives holds the text it gives.
    /// Another port is tried if the chosen one was taken meanwhile.
    fn spawned(
        what: &str,
        command: impl Fn(u16, &std::path::Path) -> (Command, &'static [u8], String),
    ) -> Redis {
        for _ in 0..5 {
            let port = ankusa_sinks::test_support::free_port();
            let dir = tempfile::tempdir().expect("tempdir");
            let (mut command, ask, expect) = command(port, dir.path());
            let mut child = command
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server must be installed (scripts/deps installs it)");
            if comes_up(&mut child, port, ask, &expect) {
                return Redis {
                    url: format!("redis://127.0.0.1:{port}"),
                    fsync: String::new(),
                    port,
                    child,
                    _dir: dir,
                };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("no {what} of the bench came up on a free port");
    }

    /// Kill it (SIGKILL) now.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the server on `port` answers `ask` with `expect` in it within 10 s.
fn comes_up(child: &mut Child, port: u16, ask: &[u8], expect: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            // It exited: the port was taken.
            return false;
        }
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
            let mut buf = [0u8; 4096];
            if s.write_all(ask).is_ok()
                && s.read(&mut buf)
                    .is_ok_and(|n| String::from_utf8_lossy(&buf[..n]).contains(expect))
            {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

impl Redis {
    /// The server's CPU time so far (utime + stime, in `/proc` ticks); `None` where there is
    /// no `/proc`.
    pub fn cpu_ticks(&self) -> Option<u64> {
        crate::cpu::ticks(&std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
