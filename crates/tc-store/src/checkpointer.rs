//! The checkpointer: a thread with a connection of its own that copies the
//! write-ahead log back into the database file, so that the writer's
//! COMMITs do not.
//!
//! SQLite checkpoints automatically inside the COMMIT that takes the WAL
//! past a threshold, on the connection that committed. With one writer
//! thread that is every caller's wait: the batch that crossed it, and every
//! batch queued behind it, wait while the WAL's pages are copied into the
//! database file and that file is fsynced. Here the writer's WAL hook
//! ([`install`]) only wakes this thread as the WAL grows, and a PASSIVE
//! checkpoint runs beside the writer's transactions (WAL mode lets one
//! checkpoint run while one connection writes) and waits for no lock.
//!
//! SQLite starts the WAL over from its beginning only when every frame in
//! it has been copied, and a checkpoint beside a stream of commits never
//! copies the frames written while it ran. So once the WAL is
//! [`Plan::finish_at`] long, the writer copies what is left itself, between
//! two batches, when this thread's last pass left at most
//! [`Plan::finish_lag`] frames (a short copy); and whatever is left once it
//! is [`Plan::force_at`] long (a reader's snapshot can hold the checkpoint
//! back: then neither copy gets far, as with SQLite's own checkpoints).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::thread::JoinHandle;
use std::time::Instant;

use rusqlite::wal::CheckpointMode;
use rusqlite::{Connection, MAIN_DB};

/// When the WAL is copied back, in WAL frames (a page each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The checkpointer is woken each time the WAL has grown by this many
    /// frames since it last was.
    pub wake_every: u32,
    /// From this length on, the writer finishes the copy when the
    /// checkpointer's last pass left at most `finish_lag` frames behind.
    pub finish_at: u32,
    pub finish_lag: u32,
    /// From this length on, the writer copies whatever is left, once every
    /// `wake_every` frames.
    pub force_at: u32,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            // 8 MiB of 4 KiB pages: a pass copies each page it holds once,
            // however often it changed, so passes far apart copy less.
            wake_every: 2_000,
            // 40 MiB, the length at which the writer used to checkpoint
            // inside its COMMIT (`journal_size_limit` is a little over it).
            finish_at: 10_000,
            finish_lag: 500,
            force_at: 40_000,
        }
    }
}

/// What the checkpointer and the writer's hook share: the WAL's length and
/// how much of it was copied, as the checkpointer's last pass found them,
/// and counts for the tests and the log.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// Held by whoever copies (a pass, or the writer): SQLite lets one
    /// checkpoint run at a time and refuses a second at once, so the
    /// writer's forced copy waits here for the pass to end rather than
    /// being refused.
    copying: Mutex<()>,
    /// The last pass's (frames in the WAL << 32 | frames copied).
    last_pass: AtomicU64,
    /// Passes run by the checkpointer.
    pub passes: AtomicU64,
    /// Copies the writer ran itself.
    pub writer_copies: AtomicU64,
}

impl Shared {
    fn publish(&self, log: u32, copied: u32) {
        let packed = (u64::from(log) << 32) | u64::from(copied);
        self.last_pass.store(packed, Ordering::Release);
    }

    /// What [`Shared::publish`] last stored: (frames in the WAL, frames
    /// copied), zeros before any pass.
    fn last_frames(&self) -> (u32, u32) {
        let packed = self.last_pass.load(Ordering::Acquire);
        ((packed >> 32) as u32, packed as u32)
    }

    /// The frames the last pass left uncopied of a WAL now `pages` long,
    /// or `None` if that pass was over an earlier WAL (the WAL restarted
    /// since) or there was none.
    fn left_behind(&self, pages: u32) -> Option<u32> {
        let (log, copied) = self.last_frames();
        (log > 0 && log <= pages).then(|| pages - copied.min(pages))
    }

    fn copying(&self) -> MutexGuard<'_, ()> {
        self.copying.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The copy lock if no pass holds it now.
    fn copying_if_free(&self) -> Option<MutexGuard<'_, ()>> {
        match self.copying.try_lock() {
            Ok(guard) => Some(guard),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    fn forget(&self) {
        self.last_pass.store(0, Ordering::Release);
    }
}

/// Starts the checkpointer on `conn` (a read-write connection to the
/// writer's file) and hands the writer's connection the WAL hook that
/// wakes it. The thread ends when the writer's connection is closed (the
/// hook, and with it the waking end, is dropped); join the handle after.
pub(crate) fn install(
    writer: &mut Connection,
    conn: Connection,
    plan: Plan,
) -> std::io::Result<(JoinHandle<()>, Arc<Shared>)> {
    let (handle, shared, wake) = start(conn, plan)?;
    let mut hook = Hook {
        plan,
        wake,
        shared: Arc::clone(&shared),
        last_pages: 0,
        woken_at: 0,
        copied_at: 0,
    };
    writer
        .wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, pages| {
            hook.committed(wal, u32::try_from(pages).unwrap_or(0));
            Ok(())
        }))
        .map_err(std::io::Error::other)?;
    Ok((handle, shared))
}

/// The checkpointer's thread, the state it shares, and the end that wakes
/// it (the thread ends once every such end is dropped).
fn start(
    conn: Connection,
    plan: Plan,
) -> std::io::Result<(JoinHandle<()>, Arc<Shared>, SyncSender<()>)> {
    let shared = Arc::new(Shared::default());
    let (wake, woken) = sync_channel(1);
    let handle = {
        let shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("tc-store-ckpt".to_owned())
            .spawn(move || run(&conn, &woken, &shared, plan))?
    };
    Ok((handle, shared, wake))
}

/// The writer's side: called after each commit with the WAL's length.
struct Hook {
    plan: Plan,
    wake: SyncSender<()>,
    shared: Arc<Shared>,
    /// The WAL's length at the last commit: a shorter one means it
    /// started over.
    last_pages: u32,
    /// The length at which the checkpointer was last woken, and at which
    /// the writer last copied.
    woken_at: u32,
    copied_at: u32,
}

impl Hook {
    fn committed(&mut self, wal: &mut rusqlite::hooks::Wal, pages: u32) {
        if pages < self.last_pages {
            // The WAL started over: what the last pass found is of the old one.
            self.shared.forget();
            self.woken_at = 0;
            self.copied_at = 0;
        }
        self.last_pages = pages;
        if pages >= self.woken_at.saturating_add(self.plan.wake_every) {
            self.woken_at = pages;
            // Full: a wake is already pending. Disconnected: the thread is
            // gone; the writer's own copies below still bound the WAL.
            if let Err(TrySendError::Disconnected(())) = self.wake.try_send(()) {
                tracing::debug!("store_checkpointer_gone");
            }
        }
        let caught_up = self
            .shared
            .left_behind(pages)
            .is_some_and(|left| left <= self.plan.finish_lag);
        let forced = pages >= self.plan.force_at
            && pages >= self.copied_at.saturating_add(self.plan.wake_every);
        // Finishing: only if no pass runs now (it is doing the work; the next
        // commit looks again). Forced: after the pass.
        let guard = if forced {
            Some(self.shared.copying())
        } else if pages >= self.plan.finish_at
            && caught_up
            && pages >= self.copied_at.saturating_add(self.plan.finish_lag)
        {
            self.shared.copying_if_free()
        } else {
            None
        };
        if let Some(_copying) = guard {
            self.copied_at = pages;
            copy(wal, &self.shared, forced && !caught_up);
        }
    }
}

/// The writer's own copy of what is left of the WAL, between two batches.
fn copy(wal: &mut rusqlite::hooks::Wal, shared: &Shared, forced: bool) {
    let started = Instant::now();
    let copied = wal.checkpoint_v2(CheckpointMode::PASSIVE);
    shared.writer_copies.fetch_add(1, Ordering::Relaxed);
    if let Some((log, done)) = frames(copied, "store_writer_checkpoint_failed") {
        // So that a copy held back (a reader's snapshot) is not taken for
        // a finished one at the next commit.
        shared.publish(log, done);
        tracing::debug!(
            frames = log,
            copied = done,
            forced,
            elapsed_us = started.elapsed().as_micros() as u64,
            "store_writer_checkpoint"
        );
    }
}

/// The most passes one wake runs: each copies what the writer added during
/// the one before, so they shrink; a pass that copies nothing new (a
/// reader's snapshot holds it back) ends them.
const MAX_PASSES: usize = 4;

fn run(conn: &Connection, woken: &Receiver<()>, shared: &Shared, plan: Plan) {
    while woken.recv().is_ok() {
        let mut before = None;
        for _ in 0..MAX_PASSES {
            let started = Instant::now();
            let pass = {
                let _copying = shared.copying();
                conn.wal_checkpoint_v2(Some(MAIN_DB), CheckpointMode::PASSIVE)
            };
            let Some((log, copied)) = frames(pass, "store_checkpoint_failed") else {
                shared.passes.fetch_add(1, Ordering::Release);
                break;
            };
            shared.publish(log, copied);
            shared.passes.fetch_add(1, Ordering::Release);
            tracing::debug!(
                frames = log,
                copied,
                elapsed_us = started.elapsed().as_micros() as u64,
                "store_checkpoint"
            );
            if log.saturating_sub(copied) <= plan.finish_lag || before == Some(copied) {
                break;
            }
            before = Some(copied);
        }
    }
}

/// A checkpoint's (frames in the WAL, frames copied), or `None` if it
/// failed, logged as `event`: a warning, unless another process's
/// checkpoint was running (SQLite lets one run at a time; the next pass
/// copies what this one did not).
fn frames(result: rusqlite::Result<(i32, i32)>, event: &'static str) -> Option<(u32, u32)> {
    match result {
        Ok((log, copied)) => Some((
            u32::try_from(log).unwrap_or(0),
            u32::try_from(copied).unwrap_or(0),
        )),
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => {
            tracing::debug!(error = %e, "{event}");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "{event}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    use super::*;
    use crate::config::StoreConfig;
    use crate::schema::{Target, open_checkpointer, open_writer};

    /// A writer connection on a new file with a table to fill, and a
    /// connection for the checkpointer.
    fn setup(dir: &tempfile::TempDir) -> (Connection, Connection, PathBuf) {
        let path = dir.path().join("ckpt.db");
        let target = Target::File(path.clone());
        let writer = open_writer(&target, &StoreConfig::default()).unwrap();
        writer
            .execute_batch("CREATE TABLE filler (n INTEGER PRIMARY KEY, pad BLOB)")
            .unwrap();
        let conn = open_checkpointer(&target, &StoreConfig::default()).unwrap();
        (writer, conn, path)
    }

    /// Commits `n` transactions of a new page or more each.
    fn fill(writer: &Connection, n: usize) {
        for _ in 0..n {
            writer
                .execute("INSERT INTO filler (pad) VALUES (zeroblob(3000))", [])
                .unwrap();
        }
    }

    fn wal_bytes(path: &Path) -> u64 {
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        std::fs::metadata(wal).map(|m| m.len()).unwrap_or(0)
    }

    /// The WAL's frames, as the writer's own (PASSIVE) checkpoint reports
    /// them.
    fn wal_frames(writer: &Connection) -> i64 {
        writer
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| row.get(1))
            .unwrap()
    }

    #[test]
    fn a_woken_checkpointer_copies_the_wal_and_the_next_commit_starts_it_over() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, conn, path) = setup(&dir);
        let (handle, shared, wake) = start(conn, Plan::default()).unwrap();
        fill(&writer, 60);
        wake.send(()).unwrap();
        // The writer is idle, so the pass this wake runs copies every frame.
        let deadline = Instant::now() + Duration::from_secs(30);
        while shared.passes.load(Ordering::Acquire) == 0 {
            assert!(Instant::now() < deadline, "no pass ran");
            std::thread::yield_now();
        }
        let (log, copied) = shared.last_frames();
        assert!(log >= 60, "{log} frames for 60 commits");
        assert_eq!(copied, log);
        // Every page is in the database file now, not only in the WAL.
        let pages: i64 = writer
            .query_row("PRAGMA page_count", [], |row| row.get(0))
            .unwrap();
        let bytes = std::fs::metadata(&path).unwrap().len();
        assert_eq!(i64::try_from(bytes).unwrap(), pages * 4096);
        // All copied, the next commit starts the WAL over from its start:
        // its one commit (a few pages) is all the WAL holds.
        fill(&writer, 1);
        let frames = wal_frames(&writer);
        assert!((1..10).contains(&frames), "{frames} frames, {log} before");
        drop(wake);
        handle.join().unwrap();
    }

    #[test]
    fn under_a_stream_of_commits_the_wal_stays_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let (mut writer, conn, path) = setup(&dir);
        let plan = Plan {
            wake_every: 20,
            finish_at: 100,
            finish_lag: 30,
            force_at: 200,
        };
        let (handle, shared) = install(&mut writer, conn, plan).unwrap();
        let mut longest = 0;
        for _ in 0..40 {
            fill(&writer, 25);
            longest = longest.max(wal_bytes(&path));
        }
        // 1,000 commits of a page or more each: without the writer's own
        // copies the WAL would hold them all (the checkpointer's passes
        // never catch the last frames of a stream). With them it starts
        // over by `force_at` frames, plus the commit that crossed it.
        let frame = 4096 + 24;
        assert!(
            longest <= 32 + (200 + 8) * frame,
            "the WAL grew to {longest} bytes"
        );
        assert!(shared.writer_copies.load(Ordering::Relaxed) >= 1);
        drop(writer);
        handle.join().unwrap();
        // The wakes were taken before the thread saw the writer go.
        assert!(shared.passes.load(Ordering::Relaxed) >= 1);
    }
}
