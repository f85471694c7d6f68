//! Memory: the peak RSS of a process draining a backlog to a file sink, the store filled by
//! another process first, so that only the drain counts.

use std::sync::Arc;

use ankusa_sinks::{FileConfig, FileSink, RetryPolicy};

use crate::backlog::{drain, fill, trail};
use crate::clock::status_kib;
use crate::runtime;

/// The memory of a drain process, KiB: its peak, and its resident set once the store was
/// open but before the drain began (all of it, and the part that is mapped files: code).
pub struct DrainMemory {
    pub peak: u64,
    pub before: u64,
    pub before_files: u64,
}

/// Fill a store with `n` rows in one process, drain it in another; the drain's memory.
pub fn rss_drain(n: u64) -> DrainMemory {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let me = std::env::current_exe().unwrap();
    let status = std::process::Command::new(&me)
        .arg("--fill")
        .arg(&store)
        .arg(n.to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let out = std::process::Command::new(&me)
        .arg("--drain")
        .arg(&store)
        .arg(n.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let figures: Vec<u64> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect();
    DrainMemory {
        peak: figures[0],
        before: figures[1],
        before_files: figures[2],
    }
}

pub fn fill_process(store: &str, n: u64) {
    let runtime = runtime();
    runtime.block_on(async {
        let trail = trail(std::path::Path::new(store), &["file"]);
        fill(&trail, n).await;
        trail.shutdown().await;
    });
}

pub fn drain_process(store: &str, n: u64) {
    let runtime = runtime();
    let path = std::path::Path::new(store).with_extension("jsonl");
    let (before, last) = runtime.block_on(async {
        let trail = trail(std::path::Path::new(store), &["file"]);
        let before = (status_kib("VmRSS"), status_kib("RssFile"));
        let sink = FileSink::new(FileConfig {
            path: path.clone(),
            retry: RetryPolicy::default(),
        })
        .unwrap();
        drain(&trail, Arc::new(sink), "file").await;
        let last = *trail.committed().borrow();
        trail.shutdown().await;
        (before, last)
    });
    let peak = status_kib("VmHWM");
    // Every row is one event: the fill's n changes and the trail's checkpoint rows.
    assert!(last >= n, "{last} rows, {n} changes");
    let file = std::io::BufReader::new(std::fs::File::open(&path).unwrap());
    let events = std::io::BufRead::lines(file).count() as u64;
    assert_eq!(events, last, "events in {}", path.display());
    println!("{peak} {} {}", before.0, before.1);
}
