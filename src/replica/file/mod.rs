//! The replica file: the replica and the consumer's progress in one JSON document, replaced
//! atomically.
//!
//! One file holds both so that they can never disagree: a Kafka consumer's next offsets (an
//! http watcher's positions) are those of the events the replica holds, so after a kill -9 it
//! resumes exactly where the file it reloads stops (nothing lost, and nothing applied twice in effect: the rule makes a
//! re-read event stale anyway). A write goes to a temporary file in the same directory,
//! fsynced, renamed over the old one, then the directory is fsynced: a crash at any point
//! leaves the old file or the new one, never a mix. A file that does not parse is an error,
//! never a fresh start: a replica silently reset would look exact while being empty.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::rule::Replica;

/// The format version this build reads and writes.
pub const FORMAT: u32 = 1;

/// The contents of a replica file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicaFile {
    /// The format version ([`FORMAT`]).
    pub format: u32,
    /// Where the consumer is.
    #[serde(default)]
    pub progress: Progress,
    /// The replica.
    pub replica: Replica,
}

impl Default for ReplicaFile {
    fn default() -> Self {
        ReplicaFile {
            format: FORMAT,
            progress: Progress::default(),
            replica: Replica::default(),
        }
    }
}

/// The consumer's progress, kept with the replica it produced.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Progress {
    /// A Kafka consumer's position; absent for a webhook receiver (the sink redelivers
    /// until it is answered 2xx, so it needs none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka: Option<KafkaProgress>,
    /// An http watcher's position in each node's events, by the node's URL (as
    /// [`http::NodeUrl`](super::http::NodeUrl) writes it). Absent from files written before
    /// it existed, and left out when empty, so those files read and write as they were.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub http: BTreeMap<String, WatchPosition>,
}

/// A Kafka consumer's position in its topic.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaProgress {
    /// The topic the replica follows.
    pub topic: String,
    /// Per partition, the offset of the next record to read (every record before it is in
    /// the replica).
    pub next: BTreeMap<i32, i64>,
}

/// Where an http watcher is in one node's events: every event up to `position` of
/// `incarnation` is in the replica (or was filtered out by the node).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchPosition {
    /// The seq to resume after (`?after=`).
    pub position: u64,
    /// The incarnation of the store that served it (`?incarnation=`): a node restored from a
    /// backup behind it answers 410 instead of serving other events at the same seqs.
    pub incarnation: String,
}

/// Why a replica file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file system failed.
    #[error("replica file {path}: {source}")]
    Io {
        /// The file (or its directory).
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The file is there but is not a replica file this build can read.
    #[error("replica file {path} is damaged ({detail}); move it aside to start a new replica")]
    Damaged {
        /// The file.
        path: PathBuf,
        /// Where and why it does not parse.
        detail: String,
    },
}

/// The replica file at `path`; `None` when there is none yet.
pub fn load(path: &Path) -> Result<Option<ReplicaFile>, FileError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(io(path, source)),
    };
    let damaged = |detail: String| FileError::Damaged {
        path: path.to_owned(),
        detail,
    };
    let mut json = serde_json::Deserializer::from_slice(&bytes);
    let file: ReplicaFile = serde_path_to_error::deserialize(&mut json)
        .map_err(|e| damaged(format!("at {}: {}", e.path(), e.inner())))?;
    json.end().map_err(|e| damaged(e.to_string()))?;
    if file.format != FORMAT {
        return Err(damaged(format!(
            "format {}, this build reads {FORMAT}",
            file.format
        )));
    }
    Ok(Some(file))
}

/// The bytes of `file` as [`save`] writes them (compact JSON and a newline).
pub fn encode(file: &ReplicaFile) -> Vec<u8> {
    let mut out = serde_json::to_vec(file).expect("a replica always serializes: string keys");
    out.push(b'\n');
    out
}

/// Replace the replica file at `path` with `file`, atomically and durably.
pub fn save(path: &Path, file: &ReplicaFile) -> Result<(), FileError> {
    write(path, &encode(file))
}

/// Replace the file at `path` with `bytes`, atomically and durably.
pub fn write(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    stage(path, bytes)?.commit()
}

/// New contents written and fsynced beside the file, not yet in its place.
pub struct Staged {
    temp: tempfile::NamedTempFile,
    path: PathBuf,
}

/// Write `bytes` to a temporary file beside `path` and fsync it.
pub fn stage(path: &Path, bytes: &[u8]) -> Result<Staged, FileError> {
    let name = path.file_name().ok_or_else(|| {
        io(
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"),
        )
    })?;
    let mut temp = tempfile::Builder::new()
        .prefix(&format!(".{}.", name.to_string_lossy()))
        .suffix(".tmp")
        .tempfile_in(directory(path))
        .map_err(|e| io(path, e))?;
    temp.write_all(bytes).map_err(|e| io(temp.path(), e))?;
    temp.as_file().sync_all().map_err(|e| io(temp.path(), e))?;
    Ok(Staged {
        temp,
        path: path.to_owned(),
    })
}

impl Staged {
    /// Rename the staged file over the file and fsync the directory, so the rename itself
    /// survives a power loss.
    pub fn commit(self) -> Result<(), FileError> {
        let path = self.path;
        self.temp.persist(&path).map_err(|e| io(&path, e.error))?;
        let dir = directory(&path);
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io(dir, e))
    }
}

/// The directory `path` is in (`.` for a bare file name).
fn directory(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

fn io(path: &Path, source: std::io::Error) -> FileError {
    FileError::Io {
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests;
