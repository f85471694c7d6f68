//! `[node]`: where the node keeps its store and its backups, and its URI; with the path
//! checks that keep the backups out of the store (also used by `cli/backup.rs`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{invalid, ConfigError};

/// `[node]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// Where the RocksDB store lives.
    pub data_dir: PathBuf,
    /// The node's URI, the `source` of its CloudEvents.
    pub uri: String,
    /// Where `POST /admin/v1/backups` writes backups (outside `data_dir`).
    pub backup_dir: PathBuf,
}

impl NodeConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.uri.trim().is_empty() {
            return invalid("node.uri", "must not be empty");
        }
        if self.uri.chars().any(char::is_whitespace) {
            return invalid("node.uri", "must be a URI reference (no whitespace)");
        }
        if self.data_dir.as_os_str().is_empty() {
            return invalid("node.data_dir", "must not be empty");
        }
        // Inside the store, a restore with --force would move the backups aside with it.
        let backups = &self.backup_dir;
        if backups.as_os_str().is_empty() || within(backups, &self.data_dir) {
            return invalid("node.backup_dir", "must be set, outside node.data_dir");
        }
        Ok(())
    }
}

/// Whether `path` is `dir` or inside it, however either is written: relative or absolute,
/// with `.` or `..` (taken as written, before symlinks), through symlinks (as far as the
/// paths exist).
pub fn within(path: &Path, dir: &Path) -> bool {
    resolved(path).starts_with(resolved(dir))
}

/// `path` relative to `dir` when it is inside it (as [`within`] decides) and not `dir`
/// itself, else `None`.
pub fn relative_within(path: &Path, dir: &Path) -> Option<PathBuf> {
    resolved(path)
        .strip_prefix(resolved(dir))
        .ok()
        .filter(|rel| !rel.as_os_str().is_empty())
        .map(Path::to_owned)
}

/// `path` made absolute, `.` and `..` taken out as written, then its deepest existing
/// ancestor resolved (symlinks).
fn resolved(path: &Path) -> PathBuf {
    use std::path::Component;
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let mut normal = PathBuf::new();
    for part in absolute.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                normal.pop();
            }
            other => normal.push(other),
        }
    }
    let mut existing = normal.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            return rest.iter().rev().fold(real, |path, part| path.join(part));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name);
                existing = parent;
            }
            _ => return normal,
        }
    }
}
