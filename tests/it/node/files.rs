//! The node's own files are its owner's alone: the data dir and what the node creates in it
//! (the first-start token's digest, the file sink's events, backups and their sidecars). The
//! first-start token is kept only once it was shown.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::eventually;
use crate::support::served::{serve, Stream};

/// The permission bits of `path`.
fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// Run `ankusa serve` with its data under `dir` and `stdout` as its stdout until it exits
/// (at most 60 s); returns whether it succeeded and what it wrote on stderr.
fn serve_until_exit(dir: &Path, stdout: Stdio) -> (bool, String) {
    let port = ankusa_sinks::test_support::free_port();
    let config = dir.join("node.toml");
    let toml = format!(
        "[node]\ndata_dir = \"{}\"\n[api]\nlisten = \"127.0.0.1:{port}\"\n",
        dir.join("data").display()
    );
    std::fs::write(&config, toml).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .args(["--config", config.to_str().unwrap(), "serve"])
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ankusa serve");
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ankusa serve did not stop although it could not print its token");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (status.success(), reader.join().unwrap())
}

#[test]
fn a_first_start_that_cannot_print_its_token_fails_and_keeps_no_digest() {
    let full = || {
        Stdio::from(
            std::fs::File::options()
                .write(true)
                .open("/dev/full")
                .unwrap(),
        )
    };
    let closed = || {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        Stdio::from(writer)
    };
    let outs: [(&str, &dyn Fn() -> Stdio); 2] = [("/dev/full", &full), ("a closed pipe", &closed)];
    for (what, stdout) in outs {
        let dir = tempfile::tempdir().unwrap();
        let (ok, stderr) = serve_until_exit(dir.path(), stdout());
        assert!(!ok, "{what}: the start must fail: {stderr}");
        let data = dir.path().join("data");
        let left: Vec<_> = std::fs::read_dir(&data)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("admin-token"))
            .collect();
        assert!(
            left.is_empty(),
            "{what}: a digest no one has seen: {left:?}"
        );
        assert!(
            stderr.contains("could not print the first-start admin token"),
            "{what}: a clear message: {stderr}"
        );

        // The next start, with stdout open, makes and shows a token.
        let again = serve(dir.path(), "", Stream::Stdout);
        let shown = (0..50)
            .filter_map(|_| again.lines.recv_timeout(Duration::from_secs(30)).ok())
            .any(|line| line.starts_with("ANKUSA_TOKEN="));
        assert!(shown, "{what}: the next start shows a token");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_start_keeps_its_files_to_their_owner() {
    let dir = tempfile::tempdir().unwrap();
    let node = serve(dir.path(), "", Stream::Stdout);
    let token = (0..50)
        .filter_map(|_| node.lines.recv_timeout(Duration::from_secs(30)).ok())
        .find_map(|line| line.strip_prefix("ANKUSA_TOKEN=").map(str::to_owned))
        .expect("a token printed");
    let client = reqwest::Client::new();
    let backup = eventually(
        "the node to take a backup",
        Duration::from_secs(30),
        async || {
            client
                .post(format!("{}/admin/v1/backups", node.base))
                .bearer_auth(&token)
                .send()
                .await
                .ok()
        },
    )
    .await;
    assert!(backup.status().is_success(), "{}", backup.status());
    let data = dir.path().join("data");
    let events = data.join("lifecycle-events.jsonl");
    eventually(
        "the file sink's events file",
        Duration::from_secs(5),
        async || events.exists(),
    )
    .await;
    assert_eq!(mode(&data), 0o700, "the data dir");
    assert_eq!(mode(&data.join("admin-token.sha256")), 0o600, "the digest");
    assert_eq!(mode(&events), 0o600, "the file sink's events");
    let backups = dir.path().join("backups");
    assert_eq!(mode(&backups), 0o700, "the backup dir");
    assert_eq!(mode(&backups.join("ankusa")), 0o700, "the sidecar dir");
    for sidecar in std::fs::read_dir(backups.join("ankusa")).unwrap() {
        assert_eq!(mode(&sidecar.unwrap().path()), 0o600, "a sidecar");
    }
}
