//! [`StoreConfig`]: how the SQLite store runs, and how durable a commit is
//! ([`Synchronous`]).

use std::time::Duration;

/// How durable a commit is, SQLite's `PRAGMA synchronous`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// Every commit is fsynced before it returns: a submit that returned
    /// survives a power loss. The default.
    #[default]
    Full,
    /// In WAL mode, commits survive a crash of the process but the last ones
    /// may be lost on power loss; the WAL is fsynced at checkpoints only.
    Normal,
}

/// How [`crate::SqliteStore`] runs. `Default` is what production uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// Commit durability.
    pub synchronous: Synchronous,
    /// How long a connection waits for a lock held by another connection
    /// (another process on the same file, a checkpoint) before the operation
    /// fails as unavailable.
    pub busy_timeout: Duration,
    /// The most commands the writer commits in one transaction.
    pub max_batch: usize,
    /// The most read connections open at once; more concurrent reads wait.
    pub readers: usize,
    /// The most payload bytes (request bodies, results) queued for the
    /// writer at once; a write that would pass it waits for room. With the
    /// count bound (`4 × max_batch` commands) this caps the queue's memory.
    pub max_queued_bytes: usize,
    /// The most bytes of a task's result its callback's body carries
    /// (tc-server's `--callback-result-bytes`): the store builds the
    /// callback in the transaction that ends the task.
    pub callback_result_bytes: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(5),
            max_batch: 256,
            readers: 4,
            max_queued_bytes: 64 << 20,
            callback_result_bytes: tc_model::callback::DEFAULT_RESULT_BYTES,
        }
    }
}
