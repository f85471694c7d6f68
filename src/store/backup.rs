//! Backups of the store: RocksDB's `BackupEngine`, and what it cannot record by itself.
//!
//! A backup directory is a `BackupEngine` directory (`meta/`, `private/`, `shared_checksum/`:
//! table files shared between backups are stored once) plus one sidecar per backup,
//! `ankusa/<id>.json`, saying which `m:audit_seq` it holds: rust-rocksdb exposes no app
//! metadata, and `ankusa backup list` must show it without restoring anything.
//!
//! Consistency. A backup is made from a frozen copy of the store, not from the live store:
//! RocksDB makes the copy (its "checkpoint" API) atomically across every column family (table
//! files hard-linked after a flush, the live WAL copied up to that point), so it holds whole
//! `WriteBatch`es, and each group commit of the audit writer is one: rows with their subjects'
//! ops, outbox entities, counters and sink positions. The frozen copy is then opened as a
//! store of its own, its `m:audit_seq` is read (exactly what the backup holds, whatever the
//! writer commits meanwhile), and the backup engine copies it, flushed. The node's writer is
//! never paused. The frozen copy lives inside the store's directory, so that hard links work
//! (same file system), and is removed afterwards; one left by a crash is removed by the next
//! backup.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rocksdb::backup::{BackupEngine, BackupEngineOptions, RestoreOptions};
use rocksdb::checkpoint::Checkpoint;
use rocksdb::{Env, ErrorKind};
use serde::{Deserialize, Serialize};

use super::{keys, keys::meta, owner_only, Cf, Store, StoreError};

/// The frozen copy a backup is made from, inside the store's directory (a name on disk).
const FROZEN_DIR: &str = ".ankusa-backup-checkpoint";
/// The sidecar directory inside a backup directory.
const SIDECAR_DIR: &str = "ankusa";
/// The format version of a sidecar.
const SIDECAR_FORMAT: u32 = 1;

/// One backup (or discard) at a time in this process: they share the checkpoint directory,
/// and RocksDB's backup engine does not support two writers on one backup directory. An
/// engine numbers a new backup from what the directory had when it was opened, so a backup
/// reopens its engine once it holds this lock.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Why a backup or a restore failed. Each message names the directory or backup to blame.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// RocksDB refused a step.
    #[error("{what}: {source}")]
    Rocks {
        /// The step.
        what: String,
        /// RocksDB's error.
        source: rocksdb::Error,
    },
    /// A file operation failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The store could not be opened or read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The directory holds no backup.
    #[error("no backups in {}", .0.display())]
    NoBackups(PathBuf),
    /// The backup asked for does not exist.
    #[error("no backup {id} in {} (it has: {available:?})", dir.display())]
    NoSuchBackup {
        /// The id asked for.
        id: u32,
        /// The directory.
        dir: PathBuf,
        /// The ids it has.
        available: Vec<u32>,
    },
    /// The backup is damaged: a file is missing, short, or fails its checksum.
    #[error("backup {id} is corrupt and cannot be restored: {detail}")]
    Corrupt {
        /// The backup.
        id: u32,
        /// What RocksDB found.
        detail: String,
    },
    /// The restore target holds something and `--force` was not given (or it is not a store).
    #[error("{}", .0)]
    Refused(String),
}

impl BackupError {
    fn rocks(what: impl Into<String>, source: rocksdb::Error) -> BackupError {
        BackupError::Rocks {
            what: what.into(),
            source,
        }
    }

    pub(crate) fn io(path: &Path, source: std::io::Error) -> BackupError {
        BackupError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// What Ankusa records beside a backup (`ankusa/<id>.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sidecar {
    /// Format version.
    pub v: u32,
    /// The backup's id in its directory.
    pub id: u32,
    /// The `m:audit_seq` the backup holds: its last row.
    pub audit_seq: u64,
    /// When it was made, unix milliseconds.
    pub created_at: u64,
}

/// A backup, as `ankusa backup list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackupInfo {
    /// Its id: ids only grow within a directory.
    pub id: u32,
    /// When it was made, unix seconds (RocksDB's record).
    pub timestamp: i64,
    /// Its size in bytes (files shared with other backups counted in each).
    pub size: u64,
    /// How many files it has.
    pub files: u32,
    /// The `m:audit_seq` it holds (`None`: no sidecar, e.g. a crash right after the backup).
    pub audit_seq: Option<u64>,
}

/// An open backup directory.
pub struct BackupDir {
    path: PathBuf,
    engine: BackupEngine,
}

impl std::fmt::Debug for BackupDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackupDir")
            .field("path", &self.path)
            .finish()
    }
}

/// RocksDB's backup engine on the directory at `path`, as the directory is now.
fn engine(path: &Path) -> Result<BackupEngine, BackupError> {
    let rocks = |e| BackupError::rocks(format!("opening backup directory {}", path.display()), e);
    let options = BackupEngineOptions::new(path).map_err(rocks)?;
    BackupEngine::open(&options, &Env::new().map_err(rocks)?).map_err(rocks)
}

impl BackupDir {
    /// Open the backup directory at `path`, creating it if missing (to back up into).
    pub fn create(path: &Path) -> Result<BackupDir, BackupError> {
        // The owner's only: a backup is the whole trail.
        owner_only::create_dir_all(path).map_err(|e| BackupError::io(path, e))?;
        BackupDir::open_engine(path)
    }

    /// Open an existing backup directory (to list or restore): one that holds no backup is
    /// an error.
    pub fn open(path: &Path) -> Result<BackupDir, BackupError> {
        if !path.join("meta").is_dir() {
            return Err(BackupError::NoBackups(path.to_owned()));
        }
        BackupDir::open_engine(path)
    }

    fn open_engine(path: &Path) -> Result<BackupDir, BackupError> {
        Ok(BackupDir {
            path: path.to_owned(),
            engine: engine(path)?,
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every backup, oldest first.
    pub fn list(&self) -> Vec<BackupInfo> {
        let mut all: Vec<BackupInfo> = self
            .engine
            .get_backup_info()
            .into_iter()
            .map(|i| BackupInfo {
                id: i.backup_id,
                timestamp: i.timestamp,
                size: i.size,
                files: i.num_files,
                audit_seq: self.sidecar(i.backup_id).map(|s| s.audit_seq),
            })
            .collect();
        all.sort_by_key(|b| b.id);
        all
    }

    /// The backup `id`, or the newest when `None`.
    pub fn find(&self, id: Option<u32>) -> Result<BackupInfo, BackupError> {
        let all = self.list();
        let found = match id {
            Some(id) => all.iter().find(|b| b.id == id),
            None => all.last(),
        };
        found.cloned().ok_or_else(|| match id {
            None => BackupError::NoBackups(self.path.clone()),
            Some(id) => BackupError::NoSuchBackup {
                id,
                dir: self.path.clone(),
                available: all.iter().map(|b| b.id).collect(),
            },
        })
    }

    /// Back up `store` (which may be serving: see the module doc). Returns the new backup.
    pub fn back_up(&mut self, store: &Store, now_ms: u64) -> Result<BackupInfo, BackupError> {
        let _serial = serial();
        // Another backup may have been made in this directory since the engine was opened.
        self.engine = engine(&self.path)?;
        let scratch = store.path().join(FROZEN_DIR);
        remove_dir_if_present(&scratch)?;
        let made = self.back_up_frozen(store, &scratch, now_ms);
        // The frozen copy is only hard links and a WAL copy: always remove it.
        if let Err(e) = remove_dir_if_present(&scratch) {
            crate::telemetry::node::backup_copy_left(&e);
        }
        made
    }

    fn back_up_frozen(
        &mut self,
        store: &Store,
        scratch: &Path,
        now_ms: u64,
    ) -> Result<BackupInfo, BackupError> {
        Checkpoint::new(&store.db.db)
            .and_then(|c| c.create_checkpoint(scratch))
            .map_err(|e| BackupError::rocks("making a frozen copy of the store", e))?;
        let snapshot = Store::open(scratch)?;
        let audit_seq = last_seq(&snapshot)?;
        let before = self.list().last().map_or(0, |b| b.id);
        // Flushed first, so the backup holds table files only and restores without a WAL.
        self.engine
            .create_new_backup_flush(&snapshot.db.db, true)
            .map_err(|e| BackupError::rocks("writing the backup", e))?;
        drop(snapshot);
        let id = self
            .list()
            .last()
            .map(|b| b.id)
            .filter(|id| *id > before)
            .ok_or_else(|| BackupError::Corrupt {
                id: before,
                detail: "the backup engine reported no new backup".into(),
            })?;
        let sidecar = Sidecar {
            v: SIDECAR_FORMAT,
            id,
            audit_seq,
            created_at: now_ms,
        };
        self.write_sidecar(&sidecar)?;
        self.find(Some(id))
    }

    /// Check backup `id`: every file it lists is present, at the size RocksDB knows for it.
    /// This is cheap and catches a missing file; a damaged one is caught by its checksum as
    /// [`BackupDir::restore_to`] copies it.
    pub fn verify(&self, id: u32) -> Result<(), BackupError> {
        self.engine
            .verify_backup(id)
            .map_err(|e| BackupError::Corrupt {
                id,
                detail: e.into_string(),
            })
    }

    /// Restore backup `id` into `target` (a directory that does not exist yet), checking each
    /// file's checksum. On an error, drop `self` before removing `target`: the engine's copy
    /// threads may still be writing there until it is closed.
    pub fn restore_to(&mut self, id: u32, target: &Path) -> Result<(), BackupError> {
        self.engine
            .restore_from_backup(target, target, &RestoreOptions::default(), id)
            .map_err(|e| match e.kind() {
                ErrorKind::Corruption | ErrorKind::NotFound | ErrorKind::IOError => {
                    BackupError::Corrupt {
                        id,
                        detail: e.into_string(),
                    }
                }
                _ => BackupError::rocks(format!("restoring backup {id}"), e),
            })
    }

    /// Remove backup `id` just made (its row could not be written): its description, its
    /// private files and its sidecar. Files it shared with no other backup stay until
    /// RocksDB's next garbage collection in this directory.
    pub fn discard(self, id: u32) -> Result<(), BackupError> {
        let _serial = serial();
        let BackupDir { path, engine } = self;
        drop(engine);
        let meta = path.join("meta").join(id.to_string());
        std::fs::remove_file(&meta).map_err(|e| BackupError::io(&meta, e))?;
        remove_dir_if_present(&path.join("private").join(id.to_string()))?;
        let sidecar = sidecar_path(&path, id);
        match std::fs::remove_file(&sidecar) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(BackupError::io(&sidecar, e)),
            _ => Ok(()),
        }
    }

    fn sidecar(&self, id: u32) -> Option<Sidecar> {
        let bytes = std::fs::read(sidecar_path(&self.path, id)).ok()?;
        serde_json::from_slice::<Sidecar>(&bytes)
            .ok()
            .filter(|s| s.id == id)
    }

    /// Write the sidecar atomically: a temporary file, synced, renamed into place.
    fn write_sidecar(&self, sidecar: &Sidecar) -> Result<(), BackupError> {
        let dir = self.path.join(SIDECAR_DIR);
        owner_only::create_dir_all(&dir).map_err(|e| BackupError::io(&dir, e))?;
        let path = sidecar_path(&self.path, sidecar.id);
        let tmp = path.with_extension("json.tmp");
        let bytes = serde_json::to_vec_pretty(sidecar).expect("a sidecar always serializes");
        let write = || -> std::io::Result<()> {
            use std::io::Write as _;
            let mut f = owner_only::create_file(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            std::fs::File::open(&dir)?.sync_all()
        };
        write().map_err(|e| BackupError::io(&path, e))
    }
}

/// The last seq a store holds: `m:audit_seq`, or its last row if that is larger (as boot
/// reads it).
pub fn last_seq(store: &Store) -> Result<u64, StoreError> {
    let row_seq = store
        .last(Cf::Audit, &[keys::ROW])?
        .and_then(|(k, _)| keys::decode_row_key(&k))
        .map_or(0, |(seq, _)| seq);
    Ok(store.meta_u64(meta::AUDIT_SEQ)?.max(row_seq))
}

fn sidecar_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(SIDECAR_DIR).join(format!("{id}.json"))
}

/// Remove a directory and everything in it; absent is fine.
pub(crate) fn remove_dir_if_present(path: &Path) -> Result<(), BackupError> {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(BackupError::io(path, e)),
        _ => Ok(()),
    }
}
