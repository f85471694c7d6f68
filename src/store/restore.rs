//! Restoring a backup into a store's directory: all of it, or nothing.
//!
//! The backup is verified (every file present), restored into a temporary
//! sibling of the target (RocksDB checks each file's checksum as it copies it), opened, and
//! marked with `m:incarnation_pending`; only then is it renamed into place. A failure at any
//! step removes the temporary directory and leaves the target as it was. The flag is what
//! makes the next boot open a new incarnation (`audit::restore`): the restored store will
//! re-issue seqs that the lost one had already published, and their events must get new ids.
//!
//! A non-empty target is refused unless forced, and even then only when it is a store that
//! no process holds; it is moved aside (`<target>.replaced-<time>`), never deleted, so that a
//! mistaken restore loses nothing. From its first look until the restored store is in its
//! place, the restore holds the lock RocksDB takes on that store (its `LOCK` file), so no node
//! can start on it meanwhile; and the two directories trade places in one atomic rename where
//! the file system can (Linux's `RENAME_EXCHANGE`): no moment leaves the path without a store,
//! for a node starting then to make an empty one.

use std::path::{Path, PathBuf};

use rocksdb::WriteBatch;
use serde::{Deserialize, Serialize};

use super::backup::{last_seq, remove_dir_if_present, BackupDir, BackupError};
use super::{keys, keys::meta, owner_only, Cf, Store};
use crate::telemetry::node as telemetry;

/// The value of `m:incarnation_pending`: what was restored, for the `instance.restore` row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingRestore {
    /// The backup restored.
    pub backup_id: u32,
    /// The `m:audit_seq` of the restored store.
    pub restored_seq: u64,
    /// When it was restored, unix milliseconds.
    pub restored_at: u64,
}

impl PendingRestore {
    /// Decode `m:incarnation_pending` (`None`: not in this format; the flag still counts).
    pub fn decode(bytes: &[u8]) -> Option<PendingRestore> {
        serde_json::from_slice(bytes).ok()
    }
}

/// What to restore, and where.
#[derive(Debug, Clone)]
pub struct RestoreRequest<'a> {
    /// The backup directory.
    pub from: &'a Path,
    /// The backup (`None`: the newest).
    pub id: Option<u32>,
    /// The store directory to restore into.
    pub target: &'a Path,
    /// Replace a store already at `target` (moved aside).
    pub force: bool,
    /// Files of a replaced store that are not the store's but the node's (the admin token's
    /// digest, a file sink's events), relative to `target`, put into the restored directory.
    pub carry: &'a [Carry],
}

/// A file of the node's that a forced restore puts into the restored directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Carry {
    /// Relative to the store directory.
    pub path: PathBuf,
    /// Moved (linked into the restored directory before the swap, then unlinked from the
    /// replaced store: a file sink's events go on in one place), or copied (the replaced
    /// store keeps its own: the admin token's digest, should it be put back).
    pub moved: bool,
}

/// What a restore did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The backup restored.
    pub id: u32,
    /// The `m:audit_seq` the restored store holds.
    pub audit_seq: u64,
    /// Where the replaced store was moved, if one was.
    pub replaced: Option<PathBuf>,
    /// The files of `carry` that were there and now are in the restored directory.
    pub carried: Vec<Carry>,
}

/// What is at the target now.
enum Target {
    Absent,
    Empty,
    /// A store, its lock held until this is dropped.
    Store {
        _held: Held,
    },
}

/// A store's lock, held: RocksDB's own `fcntl` write lock on the whole of its `LOCK` file, so a
/// node opening the store (in another process) is refused as long as this lives. The lock is
/// on the file, so it stays with the store's directory through renames.
struct Held {
    _lock: std::fs::File,
}

impl Held {
    /// Take the lock of the store at `path`; a refusal when another process holds it.
    fn take(path: &Path) -> Result<Held, BackupError> {
        let path = path.join("LOCK");
        let lock = owner_only::options()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| BackupError::io(&path, e))?;
        match rustix::fs::fcntl_lock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Held { _lock: lock }),
            Err(e) if e == rustix::io::Errno::AGAIN || e == rustix::io::Errno::ACCESS => {
                Err(in_use(path.parent().unwrap_or(&path)))
            }
            Err(e) => Err(BackupError::io(&path, e.into())),
        }
    }
}

fn in_use(store: &Path) -> BackupError {
    BackupError::Refused(format!(
        "the store at {} is in use (is a node running on it?): stop it first",
        store.display()
    ))
}

/// Restore `req` (see the module doc). `stage` hears what it is doing, for progress.
pub fn restore(
    req: &RestoreRequest<'_>,
    now_ms: u64,
    stage: &dyn Fn(&str),
) -> Result<Restored, BackupError> {
    let target = check_target(req.target, req.force)?;
    stage("verifying the backup");
    let mut dir = BackupDir::open(req.from)?;
    let backup = dir.find(req.id)?;
    dir.verify(backup.id)?;
    let tmp = temp_sibling(req.target)?;
    stage(&format!("restoring backup {}", backup.id));
    let copied = dir.restore_to(backup.id, &tmp);
    // RocksDB returns at the first bad file while its copy threads may still be writing the
    // others into `tmp`: closing the engine joins them, so nothing writes there afterwards.
    drop(dir);
    let prepared = copied
        .and_then(|()| mark_pending(&tmp, backup.id, now_ms))
        .and_then(|seq| Ok((seq, carry(req.target, &tmp, req.carry)?)));
    let (audit_seq, carried) = match prepared {
        Ok(done) => done,
        Err(e) => {
            let _ = remove_dir_if_present(&tmp);
            return Err(e);
        }
    };
    stage("moving the restored store into place");
    // The replaced store's lock is let go only once it is aside.
    match swap(&tmp, req.target, &target, now_ms) {
        Ok(replaced) => {
            // Carried files live on in the restored directory only: the replaced store
            // keeps what is its own.
            let moved = carried.iter().filter(|c| c.moved);
            for name in replaced
                .iter()
                .flat_map(|aside| moved.clone().map(|c| aside.join(&c.path)))
            {
                if let Err(e) = std::fs::remove_file(&name) {
                    telemetry::restore_left(
                        "a file carried into the restored store is also left beside the replaced one",
                        &name,
                        &e,
                    );
                }
            }
            Ok(Restored {
                id: backup.id,
                audit_seq,
                replaced,
                carried,
            })
        }
        Err(e) => {
            let _ = remove_dir_if_present(&tmp);
            Err(e)
        }
    }
}

fn check_target(path: &Path, force: bool) -> Result<Target, BackupError> {
    let mut entries = match std::fs::read_dir(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Target::Absent),
        Err(e) => return Err(BackupError::io(path, e)),
        Ok(entries) => entries,
    };
    if entries.next().is_none() {
        return Ok(Target::Empty);
    }
    let shown = path.display();
    if !force {
        return Err(BackupError::Refused(format!(
            "{shown} is not empty: restore into an empty path, or pass --force to replace the \
             store there (it is moved aside, not deleted)"
        )));
    }
    if !path.join("CURRENT").is_file() {
        return Err(BackupError::Refused(format!(
            "{shown} is not empty and holds no store: not replacing it, even with --force"
        )));
    }
    // A node (or a tool) that has the store open holds its lock: opening it tells, in this
    // process too. A store too damaged to open is what restores are for, so any other failure
    // is no refusal. Then the lock is taken, and held until the swap.
    if let Err(e) = Store::open(path) {
        let message = e.to_string();
        if message.contains("lock file") || message.contains("lock hold") {
            return Err(in_use(path));
        }
    }
    Ok(Target::Store {
        _held: Held::take(path)?,
    })
}

/// A fresh hidden directory name beside `target`, on its file system (renames are atomic).
fn temp_sibling(target: &Path) -> Result<PathBuf, BackupError> {
    let name = target
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| BackupError::Refused(format!("{} is not a store path", target.display())))?;
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    owner_only::create_dir_all(&parent).map_err(|e| BackupError::io(&parent, e))?;
    Ok(parent.join(format!(".{name}.restore-{}", uuid::Uuid::new_v4().simple())))
}

/// Leave `m:incarnation_pending` in the store restored at `path`; returns its last seq.
fn mark_pending(path: &Path, backup_id: u32, now_ms: u64) -> Result<u64, BackupError> {
    let store = Store::open(path)?;
    let restored_seq = last_seq(&store)?;
    let flag = PendingRestore {
        backup_id,
        restored_seq,
        restored_at: now_ms,
    };
    let mut batch = WriteBatch::default();
    batch.put_cf(
        store.cf(Cf::Audit),
        keys::meta_key(meta::INCARNATION_PENDING),
        serde_json::to_vec(&flag).expect("a flag always serializes"),
    );
    // Synced, and flushed: the directory is complete before it is renamed into place. No
    // node has this store yet, so this is not a write behind the audit writer's back.
    store.write(batch, true)?;
    store.flush()?;
    Ok(restored_seq)
}

/// Make `tmp` and `target` trade places: in one atomic rename where the file system can,
/// else by [`exchange_by_renames`]. Returns where what was at `target` is now (`tmp`, unless
/// the fallback's last rename failed). An error means `target` is as it was.
fn exchange(tmp: &Path, target: &Path) -> Result<PathBuf, BackupError> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    match renameat_with(CWD, tmp, CWD, target, RenameFlags::EXCHANGE) {
        Ok(()) => Ok(tmp.to_owned()),
        // Not supported here (the file system, or an old kernel).
        Err(e) if e == rustix::io::Errno::INVAL || e == rustix::io::Errno::NOSYS => {
            exchange_by_renames(tmp, target)
        }
        Err(e) => Err(BackupError::io(target, e.into())),
    }
}

/// [`exchange`] in three renames: `target` aside (to `tmp`'s name with `.old`), `tmp` into
/// its place, then the old `target` to `tmp`'s name; `target` is put back if `tmp` cannot go
/// in. Between the first two, nothing is at `target`. Once `tmp` is in, the exchange is done:
/// should the last rename fail, the old `target` stays at the `.old` name, which is returned.
fn exchange_by_renames(tmp: &Path, target: &Path) -> Result<PathBuf, BackupError> {
    let mut swapped = tmp.as_os_str().to_owned();
    swapped.push(".old");
    let swapped = PathBuf::from(swapped);
    std::fs::rename(target, &swapped).map_err(|e| BackupError::io(target, e))?;
    if let Err(e) = std::fs::rename(tmp, target) {
        let _ = std::fs::rename(&swapped, target);
        return Err(BackupError::io(target, e));
    }
    match std::fs::rename(&swapped, tmp) {
        Ok(()) => Ok(tmp.to_owned()),
        Err(e) => {
            telemetry::restore_left(
                "the restored store is in place; what it replaced stays under this name",
                &swapped,
                &e,
            );
            Ok(swapped)
        }
    }
}

/// Put the files `carry` of the store at `from` into `to`: those to be moved as hard links
/// where the file system allows (a file sink's events may be large), copies otherwise;
/// durable, with the directories made for them. Returns those that were there.
fn carry(from: &Path, to: &Path, carry: &[Carry]) -> Result<Vec<Carry>, BackupError> {
    let mut carried: Vec<Carry> = Vec::new();
    for file in carry {
        // Only paths inside the store, each once: a second link or copy onto the same file
        // would truncate it.
        let inside = file
            .path
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !inside || carried.iter().any(|c| c.path == file.path) {
            continue;
        }
        let source = from.join(&file.path);
        if !source.is_file() {
            continue;
        }
        let dest = to.join(&file.path);
        let dir = dest.parent().unwrap_or(to);
        owner_only::create_dir_all(dir).map_err(|e| BackupError::io(dir, e))?;
        if dest.exists() {
            return Err(BackupError::Refused(format!(
                "{} is in the backup too: not carrying the replaced store's over it",
                file.path.display()
            )));
        }
        if !file.moved || std::fs::hard_link(&source, &dest).is_err() {
            std::fs::copy(&source, &dest)
                .and_then(|_| std::fs::File::open(&dest)?.sync_all())
                .map_err(|e| BackupError::io(&source, e))?;
        }
        // The new entries, and any directory made for them, down from `to`.
        for d in dir.ancestors().take_while(|d| d.starts_with(to)) {
            std::fs::File::open(d)
                .and_then(|f| f.sync_all())
                .map_err(|e| BackupError::io(d, e))?;
        }
        carried.push(file.clone());
    }
    Ok(carried)
}

/// Put `tmp` at `target`, moving what is there aside (a store) or away (an empty directory);
/// returns where a store went.
///
/// Until the restored store is at `target`, a failure changes nothing (the caller removes
/// `tmp`, the restored copy). From then on the restore is done: what fails afterwards is
/// logged, never undone, and never reported as a failure, since the caller would then remove
/// `tmp`, which by then holds the replaced store.
fn swap(
    tmp: &Path,
    target: &Path,
    existing: &Target,
    now_ms: u64,
) -> Result<Option<PathBuf>, BackupError> {
    let aside = match existing {
        Target::Absent => {
            std::fs::rename(tmp, target).map_err(|e| BackupError::io(target, e))?;
            None
        }
        Target::Empty => {
            let old = exchange(tmp, target)?;
            // The empty directory, unless something (a node starting meanwhile) wrote into
            // it: then it is kept and reported like a replaced store.
            match std::fs::remove_dir(&old) {
                Ok(()) => None,
                Err(e) => {
                    telemetry::restore_left(
                        "the restore is in place; the directory it replaced is kept",
                        &old,
                        &e,
                    );
                    Some(old)
                }
            }
        }
        Target::Store { .. } => {
            let stamp = chrono::DateTime::from_timestamp_millis(now_ms as i64)
                .map(|t| t.format("%Y%m%dT%H%M%S%3f").to_string())
                .unwrap_or_else(|| now_ms.to_string());
            let mut name = target.as_os_str().to_owned();
            name.push(format!(".replaced-{stamp}"));
            let aside = PathBuf::from(name);
            let old = exchange(tmp, target)?;
            // `old` is the replaced store: a crash before this rename leaves it there, whole,
            // under its temporary name; so does a rename that fails.
            match rename_aside(&old, &aside) {
                Ok(()) => Some(aside),
                Err(e) => {
                    telemetry::restore_left(
                        "the restore is in place; the replaced store stays under its temporary name",
                        &old,
                        &e,
                    );
                    Some(old)
                }
            }
        }
    };
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    // The renames are durable once the parent directory is synced.
    if let Err(e) = std::fs::File::open(parent).and_then(|d| d.sync_all()) {
        telemetry::restore_unsynced(parent, &e);
    }
    Ok(aside)
}

/// Move the replaced store (at `tmp`) to `aside`.
fn rename_aside(tmp: &Path, aside: &Path) -> std::io::Result<()> {
    fail::fail_point!("restore::aside", |_| Err(std::io::Error::other(
        "injected: restore::aside"
    )));
    std::fs::rename(tmp, aside)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both ways of trading two directories leave each with the other's files, and nothing
    /// else beside them.
    #[test]
    fn exchanges_trade_two_directories() {
        type Trade = fn(&Path, &Path) -> Result<PathBuf, BackupError>;
        for trade in [exchange as Trade, exchange_by_renames] {
            let dir = tempfile::tempdir().unwrap();
            let (a, b) = (dir.path().join("a"), dir.path().join("b"));
            for (path, marker) in [(&a, "from-a"), (&b, "from-b")] {
                std::fs::create_dir(path).unwrap();
                std::fs::write(path.join(marker), marker).unwrap();
            }
            assert_eq!(trade(&a, &b).unwrap(), a);
            assert!(a.join("from-b").is_file() && b.join("from-a").is_file());
            assert!(!a.join("from-a").exists() && !b.join("from-b").exists());
            let mut names: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            assert_eq!(names, ["a", "b"]);
        }
    }
}
