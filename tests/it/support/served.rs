//! `ankusa serve` as a child process on a fresh port, with one of its output streams read
//! line by line: for tests of what the real binary prints.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

/// Which of the child's streams a test reads (the other goes nowhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// A running `ankusa serve` child, killed when dropped.
pub struct Served {
    pub child: Child,
    /// The read stream's lines, as they come.
    pub lines: mpsc::Receiver<String>,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `ankusa serve` with its data under `dir`, listening on a free loopback port, with
/// `extra` appended to its config file (more TOML sections), and read `stream`. The
/// environment's `RUST_LOG` and `NO_COLOR` are left out, so the config alone decides logging.
pub fn serve(dir: &Path, extra: &str, stream: Stream) -> Served {
    let port = ankusa_sinks::test_support::free_port();
    let config = dir.join("node.toml");
    std::fs::write(
        &config,
        format!(
            "[node]\ndata_dir = \"{}\"\n[api]\nlisten = \"127.0.0.1:{port}\"\n{extra}",
            dir.join("data").display()
        ),
    )
    .unwrap();
    let piped = |wanted| {
        if stream == wanted {
            Stdio::piped()
        } else {
            Stdio::null()
        }
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .args(["--config", config.to_str().unwrap(), "serve"])
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .stdout(piped(Stream::Stdout))
        .stderr(piped(Stream::Stderr))
        .spawn()
        .expect("spawn ankusa serve");
    let output: Box<dyn Read + Send> = match stream {
        Stream::Stdout => Box::new(child.stdout.take().unwrap()),
        Stream::Stderr => Box::new(child.stderr.take().unwrap()),
    };
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(output).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Served {
        child,
        lines,
        base: format!("http://127.0.0.1:{port}"),
    }
}
