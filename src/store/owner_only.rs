//! Files and directories the node makes, readable by their owner only.
//!
//! The data dir holds the audit trail, the first-start token's digest and the outbox; the
//! backup dir holds copies of all of it. None of it is for other users of the machine, so
//! what the node creates is 0600 (files) and 0700 (directories) from the start, whatever
//! the umask allows, instead of being narrowed afterwards (a window in which another user
//! could open it). Only creation sets the mode: what exists keeps the operator's choice.
//! RocksDB creates its own files inside the store's directory.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

/// The mode of a file the node creates.
pub const FILE_MODE: u32 = 0o600;
/// The mode of a directory the node creates.
pub const DIR_MODE: u32 = 0o700;

/// `path` and any missing parent, each directory created 0700.
pub fn create_dir_all(path: &Path) -> io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, DIR_MODE);
    builder.create(path)
}

/// Options that create a missing file 0600; the caller says how it opens it.
pub fn options() -> OpenOptions {
    let mut options = OpenOptions::new();
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, FILE_MODE);
    options
}

/// `path` opened to write from the start, created 0600 if missing.
pub fn create_file(path: &Path) -> io::Result<File> {
    options().write(true).create(true).truncate(true).open(path)
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn what_is_created_is_the_owners_only() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("a/b");
        create_dir_all(&deep).unwrap();
        assert_eq!(mode(&dir.path().join("a")), DIR_MODE);
        assert_eq!(mode(&deep), DIR_MODE);
        let file = deep.join("f");
        create_file(&file).unwrap();
        assert_eq!(mode(&file), FILE_MODE);
        // What exists keeps its mode.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        create_file(&file).unwrap();
        assert_eq!(mode(&file), 0o640);
        create_dir_all(&deep).unwrap();
    }
}
