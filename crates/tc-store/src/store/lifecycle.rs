//! How a [`SqliteStore`] opens (the schema, the writer thread, the read
//! pool), hands a write to its writer, and closes.

use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

use rusqlite::Connection;
use tc_model::store::StoreError;
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::SqliteStore;
use crate::checkpointer;
use crate::config::StoreConfig;
use crate::read_pool::Readers;
use crate::schema::{self, OpenError, Target};
use crate::writer::{self, Undo};

/// The writer's connection and, for a file, the checkpointer thread its
/// WAL hook wakes (a database in memory has no WAL).
fn open_writer(
    target: &Target,
    config: &StoreConfig,
) -> Result<(Connection, Option<JoinHandle<()>>), OpenError> {
    let mut conn = schema::open_writer(target, config)?;
    let Target::File(_) = target else {
        return Ok((conn, None));
    };
    let fail = |doing: &str, e: &dyn std::fmt::Display| OpenError::Sqlite {
        path: target.path(),
        message: format!("{doing}: {e}"),
    };
    let ckpt = schema::open_checkpointer(target, config)
        .map_err(|e| fail("open the checkpointer's connection", &e))?;
    let (thread, _) = checkpointer::install(&mut conn, ckpt, checkpointer::Plan::default())
        .map_err(|e| fail("start the checkpointer", &e))?;
    Ok((conn, Some(thread)))
}

impl SqliteStore {
    /// Opens (or creates) the database file at `path`, in WAL mode, migrating
    /// an older taskcenter file in place. A file that is not SQLite, not
    /// taskcenter's, or from a newer build is refused and left untouched.
    pub async fn open(
        path: impl AsRef<Path>,
        config: StoreConfig,
    ) -> Result<SqliteStore, OpenError> {
        SqliteStore::start(Target::File(path.as_ref().to_owned()), config).await
    }

    /// Opens a fresh, private in-memory database (gone when the store is).
    ///
    /// The writer and the readers share it through SQLite's `memdb` VFS under
    /// a unique name (`file:/tc-<id>?vfs=memdb`). It has no WAL: a reader may
    /// wait for a commit, within the busy timeout.
    pub async fn open_in_memory(config: StoreConfig) -> Result<SqliteStore, OpenError> {
        SqliteStore::start(Target::new_memory(), config).await
    }

    async fn start(target: Target, config: StoreConfig) -> Result<SqliteStore, OpenError> {
        let path = target.path();
        let opened = {
            let (target, config) = (target.clone(), config.clone());
            tokio::task::spawn_blocking(move || open_writer(&target, &config)).await
        };
        let (conn, checkpointer) = opened.map_err(|e| OpenError::Sqlite {
            path: path.clone(),
            message: format!("open task failed: {e}"),
        })??;
        let (commands, queue) = mpsc::channel(config.max_batch.max(1).saturating_mul(4));
        let writer = writer::spawn(conn, checkpointer, queue, config.max_batch).map_err(|e| {
            OpenError::Sqlite {
                path,
                message: format!("start the writer thread: {e}"),
            }
        })?;
        let max_queued_bytes = config.max_queued_bytes.clamp(1, Semaphore::MAX_PERMITS);
        Ok(SqliteStore {
            commands: Some(commands),
            queued_bytes: Arc::new(Semaphore::new(max_queued_bytes)),
            max_queued_bytes,
            writer: Some(writer),
            readers: Arc::new(Readers::new(target, config.busy_timeout, config.readers)),
            callback_bytes: config.callback_result_bytes,
            sealer: tc_seal::Sealer::none(),
            cluster: Arc::default(),
        })
    }

    pub(super) fn cluster(
        &self,
    ) -> std::sync::MutexGuard<'_, tc_model::cluster::local::LocalCluster> {
        // Each call leaves the maps consistent before it could panic.
        self.cluster
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// From now on seals every secret written with `sealer`'s first key and
    /// opens what is read with any of its keys; first, in one write, seals
    /// again each stored secret that is plain or under an older key. A
    /// secret none of the keys opens is refused, naming its destination or
    /// tenant (the server must not start), and nothing changes.
    pub async fn seal_with(
        &mut self,
        sealer: tc_seal::Sealer,
    ) -> Result<crate::SealReport, StoreError> {
        let pass = sealer.clone();
        let report = self
            .write(move |conn| crate::secrets::seal_stored(conn, &pass))
            .await?;
        self.sealer = sealer;
        Ok(report)
    }

    /// Caps the database at `pages` pages (SQLite's `max_page_count`), or
    /// lifts the cap with `None`. A write that would grow the file past it
    /// fails as on a full disk (`SQLITE_FULL`, [`StoreError::Unavailable`])
    /// and changes nothing; writes that fit go on. A size ceiling for
    /// operators, and a full disk that tests can make without root.
    /// Returns the cap now in force.
    pub async fn set_max_pages(&self, pages: Option<u64>) -> Result<u64, StoreError> {
        // SQLite's own ceiling, which "no cap" restores.
        const NO_CAP: u64 = 0xFFFF_FFFE;
        let pages = pages.unwrap_or(NO_CAP).min(NO_CAP);
        // Alone: a rollback does not undo the pragma, so a batchmate's
        // failure must not answer for it.
        self.write_sized(0, Undo::Alone, move |conn| {
            conn.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |row| {
                row.get::<_, i64>(0)
            })
            .map(|n| u64::try_from(n).unwrap_or(0))
            .map_err(crate::rows::db)
        })
        .await
    }

    /// How many pages the database has now (its size in pages).
    pub async fn page_count(&self) -> Result<u64, StoreError> {
        self.write_sized(0, Undo::Alone, |conn| {
            conn.query_row("PRAGMA page_count", [], |row| row.get::<_, i64>(0))
                .map(|n| u64::try_from(n).unwrap_or(0))
                .map_err(crate::rows::db)
        })
        .await
    }

    /// Stops taking writes, waits until every queued write is committed and
    /// answered, and stops the writer thread.
    pub async fn close(mut self) {
        self.commands.take();
        if let Some(writer) = self.writer.take() {
            let joined = tokio::task::spawn_blocking(move || writer.join()).await;
            if !matches!(joined, Ok(Ok(()))) {
                tracing::error!("store_writer_panicked");
            }
        }
    }

    pub(super) async fn write<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.write_sized(0, Undo::Savepoint, op).await
    }

    /// A write carrying `bytes` of payload: it waits until the queue has
    /// room for them, and holds that room until the writer is done with it.
    pub(super) async fn write_sized<T, F>(
        &self,
        bytes: usize,
        undo: Undo,
        op: F,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let closed = || StoreError::Unavailable("store is closed".to_owned());
        let commands = self.commands.as_ref().ok_or_else(closed)?;
        // A payload larger than the whole budget takes all of it.
        let wanted = u32::try_from(bytes.min(self.max_queued_bytes)).unwrap_or(u32::MAX);
        let room = if wanted == 0 {
            None
        } else {
            Some(
                Arc::clone(&self.queued_bytes)
                    .acquire_many_owned(wanted)
                    .await
                    .map_err(|_| closed())?,
            )
        };
        let (reply, answer) = oneshot::channel();
        // The queue refuses only when the writer thread is gone (it owns the
        // receiver): say so, not "closed", which is what close() does.
        commands
            .send(writer::command(op, undo, reply, room))
            .await
            .map_err(|_| StoreError::Unavailable("store writer stopped".to_owned()))?;
        answer
            .await
            .map_err(|_| StoreError::Unavailable("store writer stopped".to_owned()))?
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        // Dropping the only sender ends the writer's loop once the queue is
        // drained; joining waits for those last commits.
        self.commands.take();
        if let Some(writer) = self.writer.take()
            && writer.join().is_err()
        {
            tracing::error!("store_writer_panicked");
        }
    }
}
