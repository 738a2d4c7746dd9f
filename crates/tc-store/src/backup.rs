//! Online backup of a taskcenter SQLite file, safe while a server writes to
//! it: SQLite's backup API, stepped and paced, on a connection of its own.
//!
//! The copy is taken inside one read transaction on the source. In WAL mode
//! (which the store always sets) a reader never blocks the writer and the
//! writer never disturbs a reader's snapshot: every step copies pages of the
//! same snapshot, so the backup never restarts however fast the server
//! writes, and the server's writer is not held at all, only slowed by the
//! I/O the copy makes (hence the pause between steps). The cost is that the
//! WAL cannot be checkpointed past the snapshot until the copy is done: it
//! grows by what is written meanwhile, and shrinks again after.
//!
//! The copy is written to a hidden temporary file beside the target, made
//! durable (fsync), then linked to the target name, which must not exist: a
//! target either does not exist or holds a complete database, and an
//! earlier backup is never overwritten. It is created readable and writable
//! by its owner alone (0600), as the database is: it holds the same
//! destination headers and signing secrets.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};
use tc_model::Timestamp;

/// How a backup paces itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupConfig {
    /// Pages copied per step (4 KiB each by default): a few milliseconds of
    /// I/O.
    pub pages_per_step: u16,
    /// The pause between two steps, leaving the disk to the server's
    /// commits.
    pub pause: Duration,
    /// Every this many steps the copy so far is flushed to disk, so that
    /// the final fsync is small instead of one burst of the whole file
    /// that the server's commit fsyncs would queue behind.
    pub sync_every_steps: u32,
}

impl Default for BackupConfig {
    fn default() -> Self {
        BackupConfig {
            pages_per_step: 256,
            pause: Duration::from_millis(4),
            sync_every_steps: 16,
        }
    }
}

/// What a finished backup made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupReport {
    /// The copy's path (the target given).
    pub path: PathBuf,
    /// The copy's size in bytes.
    pub bytes: u64,
    /// How many tasks the copy holds.
    pub tasks: u64,
    /// The copy holds every commit made before this time, and none made
    /// after the backup returned.
    pub consistent_as_of: Timestamp,
    /// How long the copy took.
    pub duration: Duration,
    /// The longest single step: the longest the copy kept the disk busy
    /// without a pause.
    pub longest_step: Duration,
    /// How many steps it took.
    pub steps: u32,
}

/// Why a backup was not made. No target file is left behind by any of them.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The target already exists: backups are never overwritten.
    #[error("{}: already exists; choose a new file (a backup never overwrites)", .0.display())]
    TargetExists(PathBuf),
    /// The target's directory does not exist or is not a directory.
    #[error("{}: its directory does not exist", .0.display())]
    NoTargetDirectory(PathBuf),
    /// No file can be created in the target's directory (permissions, a
    /// read-only file system).
    #[error("{}: cannot create a file there: {message}", path.display())]
    NotWritable {
        /// The target.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The target names no file (empty, or ends in `..` or `/`).
    #[error("{}: names no file", .0.display())]
    NoFileName(PathBuf),
    /// The source cannot be read as a taskcenter database.
    #[error("{}: {message}", path.display())]
    Source {
        /// The source database.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// Writing the copy failed (disk full, permissions).
    #[error("{}: {message}", path.display())]
    Target {
        /// The target file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

/// Copies the taskcenter database at `source` to a new file `target`,
/// consistently, while a server may be writing to `source`. Blocks: call it
/// from a thread or `spawn_blocking`.
pub fn backup(
    source: &Path,
    target: &Path,
    config: &BackupConfig,
) -> Result<BackupReport, BackupError> {
    let started = Instant::now();
    let temporary = check_target(target)?;
    let result = copy(source, &temporary, config).and_then(|mut report| {
        publish(&temporary, target)?;
        report.path = target.to_owned();
        report.bytes = std::fs::metadata(target)
            .map_err(|e| target_error(target, "read its size", e))?
            .len();
        report.duration = started.elapsed();
        Ok(report)
    });
    // Gone on success (linked to the target) and on failure alike.
    let _ = std::fs::remove_file(&temporary);
    result
}

/// The rules for a target, and the temporary file beside it.
fn check_target(target: &Path) -> Result<PathBuf, BackupError> {
    let Some(name) = target.file_name() else {
        return Err(BackupError::NoFileName(target.to_owned()));
    };
    if target.symlink_metadata().is_ok() {
        return Err(BackupError::TargetExists(target.to_owned()));
    }
    let dir = match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(BackupError::NoTargetDirectory(target.to_owned()));
    }
    let mut temporary = std::ffi::OsString::from(".");
    temporary.push(name);
    temporary.push(format!(".tc-backup-{}", std::process::id()));
    let temporary = dir.join(temporary);
    // Created here, so that a directory this process cannot write is
    // refused before any work, as the caller's mistake rather than a failed
    // copy. A file of that name is a leftover of a crashed backup of a
    // process with this pid.
    let _ = std::fs::remove_file(&temporary);
    // For its owner alone, as the database: the copy holds the same
    // secrets. The link to the target keeps the mode.
    crate::private_file::create_new(&temporary).map_err(|e| BackupError::NotWritable {
        path: target.to_owned(),
        message: e.to_string(),
    })?;
    Ok(temporary)
}

fn copy(
    source: &Path,
    temporary: &Path,
    config: &BackupConfig,
) -> Result<BackupReport, BackupError> {
    let src = open_source(source)?;
    let source_error = |doing: &str, e: rusqlite::Error| BackupError::Source {
        path: source.to_owned(),
        message: format!("{doing}: {e}"),
    };
    // The snapshot: every page copied below is read in this one
    // transaction, so the copy is the database as of this instant.
    src.execute_batch("BEGIN DEFERRED")
        .map_err(|e| source_error("begin a read transaction", e))?;
    let consistent_as_of = now();
    let tasks: i64 = src
        .query_row("SELECT count(*) FROM tasks", [], |row| row.get(0))
        .map_err(|e| source_error("count the tasks", e))?;

    // A fresh (empty) file, ours alone until it is linked: no journal, no
    // fsync per step; one fsync at the end makes it durable.
    let mut dst = Connection::open(temporary).map_err(|e| sqlite_target(temporary, "open", e))?;
    dst.execute_batch("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;")
        .map_err(|e| sqlite_target(temporary, "configure", e))?;
    let (steps, longest_step) = {
        let backup =
            Backup::new(&src, &mut dst).map_err(|e| sqlite_target(temporary, "start", e))?;
        let flush =
            std::fs::File::open(temporary).map_err(|e| target_error(temporary, "open", e))?;
        run_steps(&backup, &flush, config).map_err(|e| sqlite_target(temporary, "copy", e))?
    };
    src.execute_batch("COMMIT")
        .map_err(|e| source_error("end the read transaction", e))?;
    dst.close()
        .map_err(|(_, e)| sqlite_target(temporary, "close", e))?;
    std::fs::File::open(temporary)
        .and_then(|f| f.sync_all())
        .map_err(|e| target_error(temporary, "fsync", e))?;
    Ok(BackupReport {
        path: temporary.to_owned(),
        bytes: 0,
        tasks: u64::try_from(tasks).unwrap_or(0),
        consistent_as_of,
        duration: Duration::ZERO,
        longest_step,
        steps,
    })
}

/// The source, opened read-write (a WAL reader needs the shared-memory
/// file) but never written; never created.
fn open_source(source: &Path) -> Result<Connection, BackupError> {
    let fail = |message: String| BackupError::Source {
        path: source.to_owned(),
        message,
    };
    if !source.is_file() {
        return Err(fail("no database file there".to_owned()));
    }
    let src = Connection::open_with_flags(
        source,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| fail(format!("open: {e}")))?;
    src.busy_timeout(Duration::from_secs(5))
        .map_err(|e| fail(format!("set busy_timeout: {e}")))?;
    let application_id: i32 = src
        .query_row("PRAGMA application_id", [], |row| row.get(0))
        .map_err(|e| fail(format!("not an SQLite database ({e})")))?;
    if application_id != crate::schema::APPLICATION_ID {
        return Err(fail("not a taskcenter database".to_owned()));
    }
    Ok(src)
}

/// Steps to the end; a busy or locked step (another connection changing
/// the page size or a checkpoint's truncation) is retried after the pause,
/// a bounded number of times in a row.
fn run_steps(
    backup: &Backup<'_, '_>,
    flush: &std::fs::File,
    config: &BackupConfig,
) -> rusqlite::Result<(u32, Duration)> {
    const MAX_BUSY_IN_A_ROW: u32 = 5_000;
    let (mut steps, mut busy, mut longest) = (0u32, 0u32, Duration::ZERO);
    loop {
        let step = Instant::now();
        let result = backup.step(i32::from(config.pages_per_step.max(1)))?;
        longest = longest.max(step.elapsed());
        steps = steps.saturating_add(1);
        match result {
            StepResult::Done => return Ok((steps, longest)),
            StepResult::More => busy = 0,
            StepResult::Busy | StepResult::Locked => {
                busy += 1;
                if busy >= MAX_BUSY_IN_A_ROW {
                    return Err(rusqlite::Error::SqliteFailure(
                        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                        Some("the database stayed busy".to_owned()),
                    ));
                }
            }
            // StepResult is non-exhaustive: treat anything new as "more".
            _ => {}
        }
        if config.sync_every_steps > 0 && steps.is_multiple_of(config.sync_every_steps) {
            // Best effort: the fsync at the end is the one that counts.
            let _ = flush.sync_data();
        }
        std::thread::sleep(config.pause);
    }
}

/// Gives the finished copy its name, refusing to replace a file that
/// appeared meanwhile (a hard link fails where a rename would overwrite),
/// and makes the name durable.
fn publish(temporary: &Path, target: &Path) -> Result<(), BackupError> {
    match std::fs::hard_link(temporary, target) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(BackupError::TargetExists(target.to_owned()));
        }
        // A file system without hard links: a rename, after checking again.
        Err(_) if target.symlink_metadata().is_err() => std::fs::rename(temporary, target)
            .map_err(|e| target_error(target, "rename the finished copy", e))?,
        Err(e) => return Err(target_error(target, "link the finished copy", e)),
    }
    if let Some(dir) = target.parent().filter(|d| !d.as_os_str().is_empty()) {
        // Best effort: not every platform can open a directory to sync it.
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

fn now() -> Timestamp {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    Timestamp::from_millis(ms)
}

fn target_error(path: &Path, doing: &str, e: std::io::Error) -> BackupError {
    BackupError::Target {
        path: path.to_owned(),
        message: format!("{doing}: {e}"),
    }
}

fn sqlite_target(path: &Path, doing: &str, e: rusqlite::Error) -> BackupError {
    BackupError::Target {
        path: path.to_owned(),
        message: format!("{doing}: {e}"),
    }
}
