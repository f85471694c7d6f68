//! Appending events to the file, off the async runtime.
//!
//! Writes and `sync_data` are blocking syscalls that can take milliseconds (or far longer on
//! a sick disk), so they run on tokio's blocking pool, never on a worker. One
//! `std::sync::Mutex` guards the open file: it is only held inside the blocking closure, never
//! across an `.await`, and it keeps two overlapping `send` calls from interleaving their lines.
//! A failed write is cut back to where it started, so a retry never leaves half a line behind;
//! half a line a crash left (a write cut short, never confirmed) is cut off when the file is
//! opened, before anything is appended to it.
//!
//! The file is the one at the path, not the one once opened there: before each write the
//! sink checks that the path still names its open file and opens the path again when it does
//! not (rotated, or deleted), so events never go to a file nobody can find.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;

use super::config::FileConfig;
use crate::{encoding, telemetry, Delivery, Outcome, Sink, SinkError};

/// A sink that appends structured CloudEvents as JSON lines to a file.
#[derive(Debug, Clone)]
pub struct FileSink {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    /// The open file, `None` until the first write or after a failed one (then reopened).
    /// A std mutex: held only on the blocking pool, never across an await.
    file: Mutex<Option<File>>,
}

impl FileSink {
    /// Validates `config` and builds the sink. The file is opened on first use.
    pub fn new(config: FileConfig) -> Result<Self, SinkError> {
        config.validate()?;
        Ok(FileSink {
            inner: Arc::new(Inner {
                path: config.path,
                file: Mutex::new(None),
            }),
        })
    }

    /// The file this sink appends to.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }
}

#[async_trait]
impl Sink for FileSink {
    fn kind(&self) -> &'static str {
        "file"
    }

    async fn send(&self, events: &[Delivery]) -> Vec<Outcome> {
        let mut outcomes = vec![Outcome::Delivered; events.len()];
        let mut lines = Vec::with_capacity(events.len() * 512);
        for (outcome, delivery) in outcomes.iter_mut().zip(events) {
            match encoding::structured(&delivery.event) {
                Ok(line) => {
                    lines.extend_from_slice(&line);
                    lines.push(b'\n');
                }
                Err(_) => {
                    telemetry::encode_failed("file", delivery.seq);
                    *outcome = Outcome::Rejected {
                        reason: "encode".into(),
                    };
                }
            }
        }
        if lines.is_empty() {
            return outcomes;
        }
        let inner = Arc::clone(&self.inner);
        let reason =
            match crate::blocking::run("the file's append", move || inner.append(&lines)).await {
                Ok(Ok(())) => return outcomes,
                Ok(Err(e)) => format!("io_{:?}", e.kind()),
                Err(_) => "io_task_failed".to_string(),
            };
        telemetry::attempt_failed("file", &reason, events.len());
        for outcome in outcomes.iter_mut() {
            if *outcome == Outcome::Delivered {
                *outcome = Outcome::Retry {
                    after: None,
                    reason: reason.clone(),
                };
            }
        }
        outcomes
    }

    async fn healthcheck(&self) -> Result<(), SinkError> {
        let path = self.inner.path.clone();
        // Opened (created if missing) but never cut: a write may be under way.
        crate::blocking::run("the healthcheck", move || create(&path).map(drop))
            .await?
            .map_err(SinkError::Io)
    }
}

impl Inner {
    /// Appends `bytes` and syncs them; on error the file is reopened next time.
    fn append(&self, bytes: &[u8]) -> io::Result<()> {
        let mut guard = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(file) = &*guard {
            if !still_at(file, &self.path)? {
                crate::telemetry::file_reopened(&self.path);
                *guard = None;
            }
        }
        let file = match &mut *guard {
            Some(file) => file,
            empty => empty.insert(open(&self.path)?),
        };
        let result = write_synced(file, bytes);
        if result.is_err() {
            *guard = None;
        }
        result
    }
}

/// Whether `path` names `file` (it may have been renamed away or deleted since it was opened).
fn still_at(file: &File, path: &Path) -> io::Result<bool> {
    let open = file.metadata()?;
    match std::fs::metadata(path) {
        Ok(named) => Ok(named.dev() == open.dev() && named.ino() == open.ino()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Opens `path` for appending, creating it if missing (see [`create`]), and cuts off a last
/// line a crash left unfinished.
fn open(path: &Path) -> io::Result<File> {
    let mut file = create(path)?;
    let cut = cut_unfinished_line(&mut file)?;
    if cut > 0 {
        crate::telemetry::unfinished_line_cut(path, cut);
    }
    Ok(file)
}

/// Opens `path` to read and append, creating it (and its directories) if missing; a file it
/// creates has its directory synced, so that it is still there after a crash. What it
/// creates is the owner's only (files 0600, directories 0700): the events describe every
/// change. What exists keeps its mode.
fn create(path: &Path) -> io::Result<File> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    if let Some(dir) = dir {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir)?;
    }
    let existed = path.try_exists()?;
    let mut options = OpenOptions::new();
    options.read(true).append(true).create(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = options.open(path)?;
    if !existed {
        File::open(dir.unwrap_or(Path::new(".")))?.sync_all()?;
    }
    Ok(file)
}

/// Cuts `file` back to the end of its last complete line; returns how many bytes went.
fn cut_unfinished_line(file: &mut File) -> io::Result<u64> {
    const CHUNK: u64 = 64 * 1024;
    let len = file.metadata()?.len();
    let mut end = len;
    let mut chunk = Vec::new();
    while end > 0 {
        let start = end.saturating_sub(CHUNK);
        chunk.resize((end - start) as usize, 0);
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut chunk)?;
        if let Some(newline) = chunk.iter().rposition(|b| *b == b'\n') {
            end = start + newline as u64 + 1;
            break;
        }
        end = start;
    }
    if end < len {
        file.set_len(end)?;
        file.sync_data()?;
    }
    Ok(len - end)
}

/// Writes `bytes` at the end of `file` and waits until they are on disk. On failure the file
/// is cut back to its previous length (best effort) so no partial line stays behind.
fn write_synced(file: &mut File, bytes: &[u8]) -> io::Result<()> {
    let before = file.metadata()?.len();
    let result = file.write_all(bytes).and_then(|()| file.sync_data());
    if result.is_err() {
        let _ = file.set_len(before);
    }
    result
}
