//! A redis-server for the Redis route store: started by the bench on a free port of
//! 127.0.0.1, its data in a temp dir, killed when dropped. `scripts/deps` installs it.
//!
//! Append-only with `appendfsync` from `ANKUSA_BENCH_REDIS_FSYNC` (default `everysec`, what
//! docker-compose.yml's Redis runs with; `always` fsyncs before every reply).

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
    child: Child,
    _dir: tempfile::TempDir,
}

impl Redis {
    /// Start one on a free port and wait until it answers; another port is tried if the
    /// chosen one was taken meanwhile.
    pub fn start() -> Redis {
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
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server must be installed (scripts/deps installs it)");
            if answers(&mut child, port, dir.path()) {
                return Redis {
                    url: format!("redis://127.0.0.1:{port}"),
                    fsync,
                    child,
                    _dir: dir,
                };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("no redis-server of the bench came up on a free port");
    }
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
