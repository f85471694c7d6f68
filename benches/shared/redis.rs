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
        for _ in 0..5 {
            let port = ankusa_sinks::test_support::free_port();
            let dir = tempfile::tempdir().expect("tempdir");
            // Sentinel rewrites its configuration file: it must be one of its own.
            let conf = dir.path().join("sentinel.conf");
            let text = format!(
                "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {dir}\nsentinel monitor {master} 127.0.0.1 {primary} 1\n\
                 sentinel down-after-milliseconds {master} {down_after_ms}\n\
                 sentinel failover-timeout {master} 10000\n",
                dir = dir.path().display()
            );
            std::fs::write(&conf, text).expect("sentinel.conf");
            let mut child = Command::new("redis-server")
                .arg(&conf)
                .arg("--sentinel")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server must be installed (scripts/deps installs it)");
            if pings(&mut child, port) {
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
        panic!("no sentinel of the bench came up on a free port");
    }

    fn launch(extra: &[&str]) -> Redis {
        let fsync = std::env::var("ANKUSA_BENCH_REDIS_FSYNC").unwrap_or_else(|_| "everysec".into());
        for _ in 0..5 {
            let port = ankusa_sinks::test_support::free_port();
            let dir = tempfile::tempdir().expect("tempdir");
            let mut child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .arg("--dir")
                .arg(dir.path())
                .args(["--save", "", "--appendonly", "yes", "--appendfsync", &fsync])
                .args(["--protected-mode", "no"])
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server must be installed (scripts/deps installs it)");
            if answers(&mut child, port, dir.path()) {
                return Redis {
                    url: format!("redis://127.0.0.1:{port}"),
                    fsync,
                    port,
                    child,
                    _dir: dir,
                };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("no redis-server of the bench came up on a free port");
    }

    /// Kill it (SIGKILL) now.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the sentinel on `port` answers PING within 10 s.
fn pings(child: &mut Child, port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
            let mut buf = [0u8; 64];
            if s.write_all(b"PING\r\n").is_ok()
                && s.read(&mut buf)
                    .is_ok_and(|n| buf[..n].starts_with(b"+PONG"))
            {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Whether the server on `port` comes up as this one (it reports our data dir) in 10 s.
fn answers(child: &mut Child, port: u16, dir: &std::path::Path) -> bool {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.into());
    let dir = dir.to_string_lossy().into_owned();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            // It exited: the port was taken.
            return false;
        }
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
            let mut buf = [0u8; 4096];
            if s.write_all(b"CONFIG GET dir\r\n").is_ok()
                && s.read(&mut buf)
                    .is_ok_and(|n| String::from_utf8_lossy(&buf[..n]).contains(&dir))
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
