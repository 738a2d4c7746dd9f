//! One tc-server per SQLite file: an advisory lock on a sidecar file
//! (`<db>.lock`) held for the life of the process. The kernel releases it
//! when the holder exits, however it exits, so a `kill -9` never leaves a
//! stale lock behind. Several nodes share work through the Postgres adapter,
//! never through one SQLite file.

use std::ffi::OsString;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Why the database could not be claimed for this process.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LockError {
    /// Another live process holds the lock.
    #[error("database {} is in use by another tc-server (pid {pid})", db.display())]
    InUse {
        /// The database file.
        db: PathBuf,
        /// The holder's pid as it wrote it (`unknown` if unreadable).
        pid: String,
    },
    /// The sidecar file could not be opened or locked.
    #[error("cannot lock {}: {source}", lock.display())]
    Io {
        /// The sidecar file.
        lock: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Held while the process uses the database; dropping it (or exiting)
/// releases the lock.
#[derive(Debug)]
pub(crate) struct DbLock {
    _file: File,
}

/// The sidecar lock file of `db`: the same path with `.lock` appended.
pub(crate) fn lock_path(db: &Path) -> PathBuf {
    let mut path = OsString::from(db.as_os_str());
    path.push(".lock");
    PathBuf::from(path)
}

/// Takes the lock of `db` for this process, or says which process has it.
/// Touches neither the database nor the holder's lock file content.
pub(crate) fn acquire(db: &Path) -> Result<DbLock, LockError> {
    let lock = lock_path(db);
    let io = |source| LockError::Io {
        lock: lock.clone(),
        source,
    };
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock)
        .map_err(io)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            let pid = pid.trim();
            return Err(LockError::InUse {
                db: db.to_owned(),
                pid: if pid.is_empty() { "unknown" } else { pid }.to_owned(),
            });
        }
        Err(TryLockError::Error(e)) => return Err(io(e)),
    }
    // Ours now: say who holds it, for the next one to report.
    file.set_len(0).map_err(io)?;
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    writeln!(file, "{}", std::process::id()).map_err(io)?;
    file.flush().map_err(io)?;
    Ok(DbLock { _file: file })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.db");
        let first = acquire(&db).unwrap();
        assert_eq!(
            std::fs::read_to_string(lock_path(&db)).unwrap().trim(),
            std::process::id().to_string()
        );
        // A second open file description conflicts like another process.
        match acquire(&db) {
            Err(e @ LockError::InUse { .. }) => assert_eq!(
                e.to_string(),
                format!(
                    "database {} is in use by another tc-server (pid {})",
                    db.display(),
                    std::process::id()
                )
            ),
            other => panic!("expected in use, got {other:?}"),
        }
        assert!(!db.exists(), "the database was not touched");
        drop(first);
        acquire(&db).unwrap();
    }
}
