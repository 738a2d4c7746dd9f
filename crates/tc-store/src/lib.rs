//! taskcenter's durable store: the SQLite adapter behind
//! [`tc_model::store::TaskStore`].
//!
//! - One writer thread owns the write connection and commits whatever writes
//!   have queued in one `BEGIN IMMEDIATE` transaction (a savepoint for a
//!   write of several statements; the hot writes refuse before writing and
//!   need none), answering callers only after COMMIT returned (group
//!   commit: many submits share one fsync).
//! - A checkpointer thread copies the WAL back into the database file
//!   beside the writer, so that no COMMIT waits for that copy.
//! - Reads run on their own connections in tokio's blocking pool; with WAL
//!   they never wait behind a write batch.
//! - The layout is one list of migration steps (`PRAGMA user_version`); an
//!   older file is upgraded in place, a foreign or newer one is refused
//!   untouched.
//!
//! - [`backup`] copies a file consistently while a server writes to it
//!   (SQLite's online backup API, stepped and paced, in one read snapshot).
//!
//! With the `raw` feature (xtask's store benchmark only), the schema and the
//! submit operation are also reachable synchronously in `raw`, to measure the
//! store against plain rusqlite on the very same statements, and
//! [`writer_cost`] runs the writer's work for N tasks for an instruction
//! counter (the `writer_cost` example; docs/performance.md).

pub mod backup;
mod batch_submit;
mod checkpointer;
mod config;
mod destinations;
mod events;
mod filter;
mod flow_keys;
mod moves;
mod priority;
mod private_file;
mod read_ops;
mod read_pool;
pub mod recount;
mod rows;
mod schedules;
mod schema;
mod secrets;
mod store;
mod sub_health;
mod tenants;
mod topics;
mod write_ops;
mod writer;
#[cfg(feature = "raw")]
pub mod writer_cost;

pub use config::{StoreConfig, Synchronous};
pub use schema::OpenError;
pub use store::SqliteStore;
pub use tc_seal::SealReport;

/// The `PRAGMA user_version` this build writes: the number of migration
/// steps. A file with a higher one is refused.
pub const SCHEMA_VERSION: i64 = schema::CURRENT_VERSION;

/// The store's schema and submit operation on a caller's own connection,
/// without the writer thread: for benchmarks and tools that compare the
/// store with a plain rusqlite loop on the very same schema and statements.
#[cfg(feature = "raw")]
pub mod raw {
    use std::path::Path;

    use rusqlite::Connection;
    use tc_model::store::{StoreError, Submitted};
    use tc_model::{NewTask, Timestamp};

    use crate::config::StoreConfig;
    use crate::schema::{self, OpenError, Target};

    /// Opens the file as the store's writer connection does: refuses foreign
    /// files, sets WAL, `synchronous` and busy_timeout from `config`, and
    /// migrates to the current schema.
    pub fn open(path: &Path, config: &StoreConfig) -> Result<Connection, OpenError> {
        schema::open_writer(&Target::File(path.to_owned()), config)
    }

    /// The store's own submit, run on `conn` in whatever transaction the
    /// caller holds (without one, SQLite commits each statement).
    pub fn submit(
        conn: &Connection,
        task: &NewTask,
        now: Timestamp,
    ) -> Result<Submitted, StoreError> {
        let submitted = crate::write_ops::submit(conn, task, now)?;
        // The counts the writer would apply at its batch's end.
        crate::moves::apply(conn).map_err(crate::rows::db)?;
        Ok(submitted)
    }
}
