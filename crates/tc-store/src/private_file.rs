//! The files that hold secrets: a database keeps destination
//! headers and signing secrets, and so does every backup of it. A file this
//! crate creates is readable and writable by its owner alone (0600),
//! whatever the umask lets through; SQLite gives the `-wal` and `-shm` files
//! the database file's mode, so they follow. A file that exists already
//! keeps the mode its owner gave it (changing it could lock out a reader
//! set up on purpose), with a warning when others may read it.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// The mode of a file this crate creates.
#[cfg(unix)]
const PRIVATE_MODE: u32 = 0o600;

/// Creates `path`, empty, for its owner alone; fails if anything is there
/// (`AlreadyExists`, a link included).
pub(crate) fn create_new(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, PRIVATE_MODE);
    options.open(path)
}

/// Before SQLite opens the database `path`: creates it for its owner alone
/// when it does not exist, and otherwise warns about each of it, its `-wal`
/// and its `-shm` that others may read. Any other failure is left to
/// SQLite's open, which reports it with the path.
pub(crate) fn prepare_database(path: &Path) {
    match create_new(path) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            for file in [
                path.to_owned(),
                sidecar(path, "-wal"),
                sidecar(path, "-shm"),
            ] {
                warn_if_readable_by_others(&file);
            }
        }
        Err(_) => {}
    }
}

/// `path` with `suffix` appended to its name, as SQLite names its files.
fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Logs `store_file_readable_by_others` when `path` exists and its group
/// or others may read it.
#[cfg(unix)]
fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(metadata) = std::fs::metadata(path) else {
        return;
    };
    let mode = metadata.permissions().mode() & 0o777;
    if readable_by_others(mode) {
        tracing::warn!(
            path = %path.display(),
            mode = format!("{mode:o}"),
            hint = "it holds destination headers and signing secrets: chmod 600 it",
            "store_file_readable_by_others"
        );
    }
}

#[cfg(not(unix))]
fn warn_if_readable_by_others(_: &Path) {}

/// Whether a file's permission bits let anyone but its owner read it.
#[cfg(unix)]
fn readable_by_others(mode: u32) -> bool {
    mode & 0o044 != 0
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn readable_by_others_is_any_read_bit_but_the_owner_s() {
        let check = |mode: u32, expected: bool| {
            assert_eq!(readable_by_others(mode), expected, "{mode:o}");
        };
        check(0o600, false);
        check(0o700, false);
        check(0o200, false);
        check(0o640, true);
        check(0o604, true);
        check(0o644, true);
        check(0o622, false);
    }

    #[test]
    fn a_new_file_is_the_owner_s_alone_and_an_existing_one_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        create_new(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = create_new(&path).map(drop);
        assert_eq!(again.unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(sidecar(&path, "-wal"), dir.path().join("f-wal"));
    }
}
