//! The one place the database layout is written down, and how a connection
//! is opened and brought to it.
//!
//! The layout is the list [`MIGRATIONS`]: step `k` takes a file from
//! `user_version = k` to `k + 1`. A new file runs every step, an older file
//! runs the steps it lacks, in one transaction, in place. A change to the
//! layout is a new step at the end, never an edit of an old one (files written
//! by earlier builds went through the old steps as they were).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior};

use crate::config::{StoreConfig, Synchronous};

/// WAL pages between automatic checkpoints (10,000 pages of 4 KiB).
const WAL_AUTOCHECKPOINT_PAGES: i64 = 10_000;

/// `PRAGMA application_id` of a taskcenter database ("TCst"), so that a file
/// that merely happens to be SQLite is told apart from ours.
pub(crate) const APPLICATION_ID: i32 = 0x5443_7374;

mod steps_from_v16;
mod steps_upto_v15;

use steps_from_v16::*;
use steps_upto_v15::*;

/// Every step, in order: `MIGRATIONS[k]` takes `user_version` k to k + 1.
pub(crate) const MIGRATIONS: &[&str] = &[
    V1_TABLES,
    V2_INDEXES,
    V3_STATE_COUNTS,
    V4_RETRY_BUDGET,
    V5_SCHEDULE,
    V6_SEQ_FLOOR,
    V7_FILTER_INDEXES,
    V8_DESTINATION,
    V9_DESTINATIONS,
    V10_OUTBOUND,
    V11_TRACE_CONTEXT,
    V12_DESTINATION_TASKS,
    V13_CALLBACKS,
    V14_SCHEDULES,
    V15_TRIGGERS_WITHOUT_UPSERT,
    V16_TENANTS,
    V17_TERMINAL_STATE_COUNTS,
    V18_DUE_BY_TENANT_FOR_ALL,
    V19_TENANT_SECRETS,
    V20_SCHEDULE_ERRORS,
    V21_AUTH,
    V22_CLIENT_TLS,
    V23_TRIES_WRITTEN_ONCE,
    V24_TOPICS,
    V25_PRIORITY,
    V26_FLOW_KEYS,
    V27_WRITER_COUNTS,
    V28_DUE_UNKEYED,
    V29_STATE_INDEXES,
];

/// The `user_version` this build writes and reads.
pub(crate) const CURRENT_VERSION: i64 = MIGRATIONS.len() as i64;

/// Prepared statements kept per connection: more than the store's distinct
/// statements (about 25 on the writer), so none is ever prepared twice.
/// rusqlite's default of 16 would evict on a mixed workload.
const STATEMENT_CACHE: usize = 64;

/// Why a database could not be opened. Nothing is written to a file that is
/// refused.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The file exists but is not an SQLite database.
    #[error("{path}: not an SQLite database ({message}); refusing to touch it")]
    NotSqlite {
        /// The file.
        path: PathBuf,
        /// SQLite's own words.
        message: String,
    },
    /// An SQLite database, but not one of taskcenter's.
    #[error(
        "{path}: an SQLite database that is not taskcenter's \
         (application_id {application_id:#x}, user_version {user_version}, tables: {tables}); \
         refusing to touch it"
    )]
    ForeignSchema {
        /// The file.
        path: PathBuf,
        /// Its `PRAGMA application_id`.
        application_id: i32,
        /// Its `PRAGMA user_version`.
        user_version: i64,
        /// Some of the tables it holds.
        tables: String,
    },
    /// A taskcenter database written by a newer build.
    #[error(
        "{path}: schema version {found} was written by a newer taskcenter; \
         this build knows up to version {known}; refusing to touch it"
    )]
    NewerSchema {
        /// The file.
        path: PathBuf,
        /// The version in the file.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },
    /// SQLite could not open, configure or migrate the database (I/O,
    /// permissions, locked by another process beyond the busy timeout…).
    #[error("{path}: {message}")]
    Sqlite {
        /// The file.
        path: PathBuf,
        /// SQLite's own words, with what was being done.
        message: String,
    },
}

/// Where the database lives.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// A file on disk, in WAL mode.
    File(PathBuf),
    /// A private in-memory database shared by the store's connections.
    ///
    /// SQLite's `memdb` VFS shares a database among every connection of the
    /// process that opens the same name starting with `/`, and frees it when
    /// the last one closes. Unlike `mode=memory&cache=shared`, it keeps
    /// ordinary file locking (busy_timeout applies, no SQLITE_LOCKED table
    /// locks). It has no WAL, so in memory a reader can briefly wait for a
    /// commit; the busy timeout covers that.
    Memory(String),
}

impl Target {
    /// A fresh, uniquely named in-memory database.
    pub(crate) fn new_memory() -> Target {
        Target::Memory(format!("file:/tc-{:032x}?vfs=memdb", fastrand::u128(..)))
    }

    /// The path errors name.
    pub(crate) fn path(&self) -> PathBuf {
        match self {
            Target::File(path) => path.clone(),
            Target::Memory(uri) => PathBuf::from(uri),
        }
    }

    fn open_raw(&self) -> rusqlite::Result<Connection> {
        let base = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        match self {
            // No URI flag for files, so a path is always a path.
            Target::File(path) => Connection::open_with_flags(path, base),
            Target::Memory(uri) => {
                Connection::open_with_flags(uri, base | OpenFlags::SQLITE_OPEN_URI)
            }
        }
    }
}

/// What an existing database is, judged without writing to it.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    /// Empty: a new file, or an empty one. Ours to set up.
    Empty,
    /// Ours, at this version (≤ [`CURRENT_VERSION`]).
    Ours(i64),
}

/// Opens the connection that writes: refuses a foreign or newer file, then
/// sets WAL (files), `synchronous`, foreign keys, and migrates to
/// [`CURRENT_VERSION`].
pub(crate) fn open_writer(target: &Target, config: &StoreConfig) -> Result<Connection, OpenError> {
    let path = target.path();
    let fail = |doing: &str| {
        let path = path.clone();
        let doing = doing.to_owned();
        move |e: rusqlite::Error| OpenError::Sqlite {
            path,
            message: format!("{doing}: {e}"),
        }
    };
    if let Target::File(file) = target {
        // Before SQLite creates it with its default 0644 (and the -wal and
        // -shm after it): the file holds secrets.
        crate::private_file::prepare_database(file);
    }
    let mut conn = target.open_raw().map_err(fail("open"))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    conn.busy_timeout(config.busy_timeout)
        .map_err(fail("set busy_timeout"))?;
    // Judge the file before anything can write to it: even switching the
    // journal mode rewrites its header.
    let found = inspect(&conn, &path)?;
    if matches!(found, Found::Empty) {
        // Only takes effect before the first table is created: a new file
        // gets it for free, an older one through a VACUUM below.
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")
            .map_err(fail("set auto_vacuum"))?;
    }
    if let Target::File(_) = target {
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .map_err(fail("set journal_mode"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(OpenError::Sqlite {
                path,
                message: format!("journal_mode WAL refused (got {mode})"),
            });
        }
    }
    writer_pragmas(&conn, config).map_err(|(doing, e)| fail(doing)(e))?;
    migrate(&mut conn, &path)?;
    make_vacuum_incremental(&conn, &path).map_err(fail("switch auto_vacuum to incremental"))?;
    // A command of several statements runs in a savepoint (the hot writes
    // run without one and without statement journals: writer::Undo, schema
    // step 15), and SQLite keeps the old image of
    // each page a savepoint or statement changes in a statement journal, a
    // temporary file by default: one pwrite per page per command. A profile of batch
    // submits had the writer thread at 95% of the process, most of it in
    // those writes. In memory they are a copy; the journal lives only until
    // the savepoint is released, so it holds at most one command's pages.
    // Set after the one-time VACUUM above, whose copy of the whole database
    // would otherwise be built in memory.
    conn.pragma_update(None, "temp_store", "MEMORY")
        .map_err(fail("set temp_store"))?;
    // The retention pruner's scratch list (per connection, in memory).
    conn.execute_batch(
        "CREATE TEMP TABLE IF NOT EXISTS doomed (seq INTEGER PRIMARY KEY, id BLOB NOT NULL)",
    )
    .map_err(fail("create the pruner's temp table"))?;
    Ok(conn)
}

/// The writer's settings that hold for its whole life: durability, foreign
/// keys, when it checkpoints, how large the -wal file stays, its page
/// cache. A refusal names what was being set.
fn writer_pragmas(
    conn: &Connection,
    config: &StoreConfig,
) -> Result<(), (&'static str, rusqlite::Error)> {
    conn.pragma_update(None, "synchronous", synchronous(config))
        .map_err(|e| ("set synchronous", e))?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(|e| ("enable foreign keys", e))?;
    // A writer without the checkpointer thread (`crate::checkpointer`, which
    // replaces this with its own WAL hook) runs the automatic checkpoints
    // inside its COMMITs, where they stall every caller of the batch;
    // checkpointing every 40 MiB of WAL instead of SQLite's 4 MiB gave 15-25%
    // more durable submits/s at 64 callers (cargo xtask bench-store), at the
    // price of a larger -wal file.
    conn.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES)
        .map_err(|e| ("set wal_autocheckpoint", e))?;
    // After a checkpoint the -wal file is cut back to this size, so a burst
    // does not leave a large file behind for good.
    conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT_BYTES)
        .map_err(|e| ("set journal_size_limit", e))?;
    // SQLite's default page cache (2 MiB) held less than the index pages a
    // stream of inserts touches, so the writer read them back from the
    // kernel again and again.
    conn.pragma_update(None, "cache_size", WRITER_CACHE_KIB)
        .map_err(|e| ("set cache_size", e))?;
    Ok(())
}

/// `config`'s durability as `PRAGMA synchronous` says it.
fn synchronous(config: &StoreConfig) -> &'static str {
    match config.synchronous {
        Synchronous::Full => "FULL",
        Synchronous::Normal => "NORMAL",
    }
}

/// SQLite's `auto_vacuum = INCREMENTAL`: pages freed by deletes can be
/// given back to the file system (see `write_ops::reclaim_free_pages`).
const AUTO_VACUUM_INCREMENTAL: i64 = 2;

/// Turns a file made before auto_vacuum was set (`NONE`) into an
/// incremental one: SQLite changes the mode only by rebuilding the file
/// with VACUUM, which cannot run inside the migration's transaction. VACUUM
/// is atomic (a crash leaves the old file), needs room for a copy of the
/// database, and takes time in proportion to its size; it runs once.
fn make_vacuum_incremental(conn: &Connection, path: &Path) -> rusqlite::Result<()> {
    let mode: i64 = conn.pragma_query_value(None, "auto_vacuum", |row| row.get(0))?;
    if mode == AUTO_VACUUM_INCREMENTAL {
        return Ok(());
    }
    let pages = |conn: &Connection| -> rusqlite::Result<i64> {
        conn.pragma_query_value(None, "page_count", |row| row.get(0))
    };
    let before = pages(conn)?;
    tracing::info!(path = %path.display(), pages = before, "store_vacuum_started");
    conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
    conn.execute_batch("VACUUM")?;
    tracing::info!(
        path = %path.display(),
        pages_before = before,
        pages_after = pages(conn)?,
        "store_vacuum_finished"
    );
    Ok(())
}

/// The writer's page cache, in KiB (a negative `cache_size` is in KiB): it
/// counts towards the process's memory (see the RSS figure of the bench).
const WRITER_CACHE_KIB: i64 = -16 * 1024;

/// The size the -wal file is truncated to after a checkpoint: a little over
/// one autocheckpoint's worth.
const WAL_SIZE_LIMIT_BYTES: i64 = 64 * 1024 * 1024;

/// A writer connection on a new in-memory database at the current version,
/// for the crate's unit tests.
#[cfg(test)]
pub(crate) fn memory_writer() -> Connection {
    open_writer(&Target::new_memory(), &StoreConfig::default()).unwrap()
}

/// Opens the checkpointer's connection (`crate::checkpointer`) to a file
/// [`open_writer`] has set up: it writes only the database file, when it
/// copies the WAL back, and fsyncs it as the writer's `synchronous` says.
pub(crate) fn open_checkpointer(
    target: &Target,
    config: &StoreConfig,
) -> rusqlite::Result<Connection> {
    let conn = target.open_raw()?;
    conn.pragma_update(None, "synchronous", synchronous(config))?;
    Ok(conn)
}

/// Opens a connection that only reads a database [`open_writer`] has set up.
pub(crate) fn open_reader(target: &Target, busy_timeout: Duration) -> rusqlite::Result<Connection> {
    let conn = target.open_raw()?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    conn.busy_timeout(busy_timeout)?;
    conn.pragma_update(None, "query_only", "ON")?;
    Ok(conn)
}

/// Brings the database to [`CURRENT_VERSION`] in one `BEGIN IMMEDIATE`
/// transaction, judging it again inside, so that two processes opening one
/// new file do not both run the steps.
fn migrate(conn: &mut Connection, path: &Path) -> Result<(), OpenError> {
    let fail = |e: rusqlite::Error| OpenError::Sqlite {
        path: path.to_owned(),
        message: format!("migrate: {e}"),
    };
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(fail)?;
    let from = match inspect(&tx, path)? {
        Found::Empty => {
            tx.pragma_update(None, "application_id", APPLICATION_ID)
                .map_err(fail)?;
            0
        }
        Found::Ours(version) => version,
    };
    if from == CURRENT_VERSION {
        return tx.commit().map_err(fail);
    }
    for (k, step) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(from).unwrap_or(0))
    {
        tx.execute_batch(step).map_err(|e| OpenError::Sqlite {
            path: path.to_owned(),
            message: format!("migration step {k} -> {}: {e}", k + 1),
        })?;
    }
    if from < DESTINATION_STEP {
        backfill_destinations(&tx).map_err(fail)?;
    }
    if from > 0 && from < DESTINATION_TASKS_STEP {
        fill_destination_tasks(&tx).map_err(fail)?;
    }
    if from < CHECKS_STEP {
        rewrite_task_checks(&tx).map_err(fail)?;
    }
    if from < TENANTS_STEP {
        drop_key_uniqueness(&tx).map_err(fail)?;
    }
    tx.pragma_update(None, "user_version", CURRENT_VERSION)
        .map_err(fail)?;
    tx.commit().map_err(fail)?;
    tracing::info!(
        path = %path.display(),
        from,
        to = CURRENT_VERSION,
        "store_schema_migrated"
    );
    Ok(())
}

/// Reads the header fields and the table list; writes nothing.
fn inspect(conn: &Connection, path: &Path) -> Result<Found, OpenError> {
    let fail = |e: rusqlite::Error| match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => OpenError::NotSqlite {
            path: path.to_owned(),
            message: e.to_string(),
        },
        _ => OpenError::Sqlite {
            path: path.to_owned(),
            message: format!("read the schema: {e}"),
        },
    };
    let application_id: i32 = conn
        .pragma_query_value(None, "application_id", |row| row.get(0))
        .map_err(fail)?;
    let user_version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(fail)?;
    let tables: Vec<String> = conn
        .prepare(
            "SELECT name FROM sqlite_schema \
             WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
        )
        .and_then(|mut stmt| {
            stmt.query_map([], |row| row.get(0))?
                .collect::<rusqlite::Result<Vec<String>>>()
        })
        .map_err(fail)?;
    let ours = application_id == APPLICATION_ID;
    if ours && user_version > CURRENT_VERSION {
        return Err(OpenError::NewerSchema {
            path: path.to_owned(),
            found: user_version,
            known: CURRENT_VERSION,
        });
    }
    if ours && user_version >= 1 {
        return Ok(Found::Ours(user_version));
    }
    if application_id == 0 && user_version == 0 && tables.is_empty() {
        return Ok(Found::Empty);
    }
    let mut listed: Vec<&str> = tables.iter().map(String::as_str).take(5).collect();
    if tables.len() > listed.len() {
        listed.push("…");
    }
    Err(OpenError::ForeignSchema {
        path: path.to_owned(),
        application_id,
        user_version,
        tables: if listed.is_empty() {
            "none".to_owned()
        } else {
            listed.join(", ")
        },
    })
}

#[cfg(test)]
mod tests {
    use tc_model::State;
    use tc_model::store::TaskFilter;

    use super::*;

    /// SQLite's plan for `sql`, one detail line per step.
    fn plan(conn: &Connection, sql: &str) -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        // Unbound parameters are NULL, which does not change the plan.
        let mut rows = stmt.raw_query();
        let mut details = Vec::new();
        while let Some(row) = rows.next().unwrap() {
            details.push(row.get::<_, String>(3).unwrap());
        }
        details.join("; ")
    }

    /// The CHECK rewrite of step 15 (`writable_schema`) leaves a file every
    /// connection reads as SQLite wrote it: DDL right after the opening
    /// migration runs once, on the migrating connection and on a new one
    /// (a report from the measuring harness said a `DROP TRIGGER` there
    /// answered "no such trigger" while dropping it), the rewritten rules
    /// hold, and the file passes `integrity_check`.
    #[test]
    fn the_check_rewrite_leaves_a_file_every_connection_reads_and_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rewritten.db");
        let conn = open_writer(&Target::File(path.clone()), &StoreConfig::default()).unwrap();
        let tasks_sql = |c: &Connection| -> String {
            c.query_row(
                "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'tasks'",
                [],
                |row| row.get(0),
            )
            .unwrap()
        };
        let rewritten = tasks_sql(&conn);
        assert!(!rewritten.contains(" IN (") && !rewritten.contains("length("));
        conn.execute_batch(
            "DROP TRIGGER seq_floor_delete;
             CREATE TRIGGER seq_floor_delete AFTER DELETE ON tasks BEGIN
                 UPDATE seq_floor SET n = max(n, OLD.seq);
             END;
             CREATE TRIGGER probe AFTER DELETE ON tasks BEGIN SELECT 1; END;",
        )
        .unwrap();
        let other = Connection::open(&path).unwrap();
        assert_eq!(tasks_sql(&other), rewritten);
        other.execute_batch("DROP TRIGGER probe;").unwrap();
        let triggers = |c: &Connection| -> i64 {
            c.query_row(
                "SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' \
                 AND name IN ('seq_floor_delete', 'probe')",
                [],
                |row| row.get(0),
            )
            .unwrap()
        };
        assert_eq!((triggers(&conn), triggers(&other)), (1, 1));
        for c in [&conn, &other] {
            let check: String = c
                .query_row("PRAGMA integrity_check", [], |row| row.get(0))
                .unwrap();
            assert_eq!(check, "ok");
            let refused = c.execute(
                "INSERT INTO tasks (id, state, url, body, idempotency_key, max_attempts, \
                                    timeout_ns, created_at, updated_at, destination, method) \
                 VALUES (randomblob(16), 'done', 'http://h/', x'', 'k', 1, 1, 0, 0, 'h', 'POST')",
                [],
            );
            assert!(refused.is_err(), "a state outside the rule was stored");
        }
    }

    /// A file a build at step 15 wrote, with tasks, upgraded to step 16:
    /// its tasks read back with no tenant, the key's old UNIQUE is gone (its
    /// index dropped, the file intact) and a key is unique per tenant.
    #[test]
    fn step_16_gives_old_tasks_no_tenant_and_makes_keys_unique_per_tenant() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("step15.db");
        {
            // What a step-15 build left: its steps, its CHECK rewrite.
            let conn = Connection::open(&path).unwrap();
            for step in &MIGRATIONS[..15] {
                conn.execute_batch(step).unwrap();
            }
            rewrite_task_checks(&conn).unwrap();
            conn.pragma_update(None, "application_id", APPLICATION_ID)
                .unwrap();
            conn.pragma_update(None, "user_version", 15).unwrap();
            for (i, key) in ["old-a", "old-b"].into_iter().enumerate() {
                conn.execute(
                    "INSERT INTO tasks (id, idempotency_key, state, url, body, max_attempts, \
                                        timeout_ns, created_at, updated_at, next_run_at, \
                                        destination) \
                     VALUES (?1, ?2, 'pending', 'http://h:80/', x'7B7D', 1, 1000, 5, 5, 5, 'h:80')",
                    rusqlite::params![[i as u8 + 1; 16], key],
                )
                .unwrap();
            }
        }
        let conn = open_writer(&Target::File(path.clone()), &StoreConfig::default()).unwrap();
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .unwrap();
        assert_eq!(version, CURRENT_VERSION);
        let old = crate::rows::load_by_key(&conn, "old-a", "")
            .unwrap()
            .unwrap();
        assert_eq!(old.task.tenant, None);
        assert_eq!(old.task.state, State::Pending);
        let key_indexes: Vec<(String, bool)> = conn
            .prepare(
                "SELECT il.name, il.\"unique\" FROM pragma_index_list('tasks') AS il \
                 WHERE (SELECT group_concat(ii.name) FROM pragma_index_info(il.name) AS ii) \
                       LIKE 'idempotency_key%' ORDER BY il.name",
            )
            .unwrap()
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(key_indexes, [("tasks_by_key".to_owned(), true)]);
        // (tenant, key, whether the insert is taken)
        let cases = [
            ("", "old-a", false),
            ("t", "old-a", true),
            ("u", "old-a", true),
            ("t", "old-a", false),
            ("t", "new", true),
        ];
        for (i, (tenant, key, taken)) in cases.into_iter().enumerate() {
            let inserted = conn.execute(
                "INSERT INTO tasks (id, idempotency_key, state, url, body, max_attempts, \
                                    timeout_ns, created_at, updated_at, destination, tenant) \
                 VALUES (?1, ?2, 'canceled', 'http://h:80/', x'', 1, 1, 5, 5, 'h:80', ?3)",
                rusqlite::params![[i as u8 + 10; 16], key, tenant],
            );
            assert_eq!(inserted.is_ok(), taken, "{tenant:?} {key:?}: {inserted:?}");
        }
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |row| row.get(0))
            .unwrap();
        assert_eq!(check, "ok");
        // A connection opened after the rewrite reads the same schema.
        let other = Connection::open(&path).unwrap();
        let stored: i64 = other
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name LIKE 'sqlite_autoindex_tasks_%'",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(stored, 1, "only the id's automatic index is left");
    }

    #[test]
    fn hot_queries_read_their_index_without_sorting() {
        let conn = memory_writer();
        let cases = [
            (crate::destinations::DUE_OF, "tasks_due_by_destination"),
            (
                crate::destinations::PROMOTE_DUE,
                "destination_tasks_waiting",
            ),
            (crate::destinations::READY_AFTER, "destination_tasks_ready"),
            (crate::destinations::READY_FIRST, "destination_tasks_ready"),
            (
                crate::destinations::NEXT_WAITING,
                "destination_tasks_waiting",
            ),
            (crate::read_ops::NEXT_DUE, "destination_tasks"),
            (crate::moves::ADD_COUNTS, "tasks_due_by_destination"),
            (crate::write_ops::EXPIRED, "tasks_leased"),
            (crate::read_ops::COUNT_BY_STATE, "state_counts"),
            (crate::write_ops::OPEN_TASKS_OF, "tasks_open_by_tenant"),
            (crate::write_ops::NEXT_TENANT, "tasks_due_unkeyed"),
            (crate::write_ops::NEXT_KEYED_TENANT, "tasks_due_by_key"),
            (crate::write_ops::DUE_OF_TENANT, "tasks_due_unkeyed"),
            (crate::flow_keys::DUE_OF_KEY, "tasks_due_by_key"),
            (crate::flow_keys::DUE_UNKEYED, "tasks_due_unkeyed"),
        ];
        let filtered = |edit: fn(&mut TaskFilter)| {
            let mut filter = TaskFilter::default();
            edit(&mut filter);
            crate::read_ops::list_scan_sql(&crate::filter::FilterSql::new(&filter))
        };
        let lists = [
            (filtered(|_| {}), "INTEGER PRIMARY KEY"),
            (filtered(|f| f.state = Some(State::Failed)), "tasks_ended"),
            (filtered(|f| f.state = Some(State::Canceled)), "tasks_ended"),
            (
                filtered(|f| f.state = Some(State::Pending)),
                "tasks_pending",
            ),
            (
                filtered(|f| {
                    f.state = Some(State::Failed);
                    f.error = Some("http_503".into());
                }),
                "tasks_by_error",
            ),
            (
                filtered(|f| {
                    f.destination = Some("h:80".into());
                    f.state = Some(State::Pending);
                }),
                "tasks_by_destination",
            ),
            (
                filtered(|f| {
                    f.tenant = Some("t".into());
                    f.state = Some(State::Pending);
                }),
                "tasks_by_tenant",
            ),
            (
                filtered(|f| f.created_after = Some(tc_model::Timestamp::from_millis(1))),
                "INTEGER PRIMARY KEY",
            ),
        ];
        let lists: Vec<(&str, &str)> = lists.iter().map(|(sql, i)| (sql.as_str(), *i)).collect();
        for (sql, index) in cases.into_iter().chain(lists) {
            let plan = plan(&conn, sql);
            assert!(plan.contains(index), "{sql}\n  plan: {plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{sql} sorts\n  plan: {plan}");
        }
        // The running tasks are walked by lease, and sorted: as many as the
        // workers run at once.
        let running = filtered(|f| f.state = Some(State::Running));
        let walk = plan(&conn, &running);
        assert!(walk.contains("tasks_leased"), "{running}\n  plan: {walk}");
        // A prune walks a finished state in seq order.
        let walk = plan(&conn, crate::read_ops::PRUNABLE);
        assert!(walk.contains("tasks_ended"), "the prune: {walk}");
        assert!(!walk.contains("TEMP B-TREE"), "the prune sorts: {walk}");
        // A key names one task per tenant at most: its few rows are sorted.
        let by_key = filtered(|f| f.idempotency_key = Some("k".into()));
        let plan = plan(&conn, &by_key);
        assert!(
            plan.contains("tasks_by_key (idempotency_key=?)"),
            "{by_key}\n  plan: {plan}"
        );
    }

    #[test]
    fn counting_a_destination_s_tasks_reads_its_row_not_the_tasks() {
        let conn = memory_writer();
        let plan = plan(&conn, crate::destinations::COUNTS_OF);
        let reads_tasks = plan.contains("SEARCH tasks") || plan.contains("SCAN tasks");
        assert!(!reads_tasks, "counting reads tasks: {plan}");
        assert!(plan.contains("destination_tasks"), "{plan}");
    }

    #[test]
    fn counting_states_reads_the_counts_tables_not_the_tasks() {
        let conn = memory_writer();
        let plan = plan(&conn, crate::read_ops::COUNT_BY_STATE);
        let reads_tasks = plan.contains("SEARCH tasks") || plan.contains("SCAN tasks");
        assert!(!reads_tasks, "counting reads tasks: {plan}");
        assert!(
            plan.contains("state_counts") && plan.contains("destination_tasks"),
            "{plan}"
        );
    }

    /// `read_ops::count_by_state` against `SELECT state, count(*) FROM
    /// tasks GROUP BY state`, after `what`.
    fn check_counts(conn: &Connection, what: &str) {
        let kept = crate::read_ops::count_by_state(conn).unwrap();
        let mut recount = tc_model::store::StateCounts::default();
        let mut stmt = conn
            .prepare("SELECT state, count(*) FROM tasks GROUP BY state")
            .unwrap();
        let mut rows = stmt.query([]).unwrap();
        while let Some(row) = rows.next().unwrap() {
            let state = crate::rows::parse_state(&row.get::<_, String>(0).unwrap()).unwrap();
            recount.set(state, u64::try_from(row.get::<_, i64>(1).unwrap()).unwrap());
        }
        assert_eq!(kept, recount, "after {what}");
    }

    /// A task in `state` at `destination`, as the store writes one (a
    /// pending task has a due time, a running one a lease).
    fn insert_in(key: &str, state: State, destination: &str) -> String {
        let (due, lease) = match state {
            State::Pending => ("5", "NULL"),
            State::Running => ("NULL", "9"),
            _ => ("NULL", "NULL"),
        };
        format!(
            "INSERT INTO tasks (id, idempotency_key, state, url, body, max_attempts, timeout_ns, \
                                created_at, updated_at, next_run_at, lease_until, destination) \
             VALUES (randomblob(16), '{key}', '{state}', 'u', x'', 1, 1000000, 0, 0, \
                     {due}, {lease}, '{destination}')",
            state = state.as_str(),
        )
    }

    /// The task `key` moved to `state`, with the due time and lease the
    /// store gives a task in it.
    fn move_to(key: &str, state: State) -> String {
        let (due, lease) = match state {
            State::Pending => ("7", "NULL"),
            State::Running => ("NULL", "9"),
            _ => ("NULL", "NULL"),
        };
        format!(
            "UPDATE tasks SET state = '{state}', next_run_at = {due}, lease_until = {lease} \
             WHERE idempotency_key = '{key}'",
            state = state.as_str(),
        )
    }

    /// A file a build at step 16 wrote, with tasks in every state (their
    /// counts kept by step 3's triggers, pending and running rows
    /// included), upgraded: the counts read exact and the pending and
    /// running rows of `state_counts` are gone (step 17). That they stay
    /// exact through every write path since step 27 is
    /// `tests/store/counts.rs`'s.
    #[test]
    fn step_17_keeps_the_counts_of_an_old_file_exact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("step16.db");
        {
            // What a step-16 build left: its steps, its two rewrites.
            let conn = Connection::open(&path).unwrap();
            for step in &MIGRATIONS[..16] {
                conn.execute_batch(step).unwrap();
            }
            rewrite_task_checks(&conn).unwrap();
            drop_key_uniqueness(&conn).unwrap();
            conn.pragma_update(None, "application_id", APPLICATION_ID)
                .unwrap();
            conn.pragma_update(None, "user_version", 16).unwrap();
            fill_every_state(&conn);
            conn.execute_batch("DELETE FROM tasks WHERE idempotency_key = 'old-failed-1'")
                .unwrap();
            let running: i64 = conn
                .query_row(
                    "SELECT n FROM state_counts WHERE state = 'running'",
                    [],
                    |row| row.get(0),
                )
                .unwrap();
            assert_eq!(running, 3, "step 3's triggers counted running");
        }
        let conn = open_writer(&Target::File(path), &StoreConfig::default()).unwrap();
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .unwrap();
        assert_eq!(version, CURRENT_VERSION);
        check_counts(&conn, "the upgrade");
        let kept: Vec<String> = conn
            .prepare("SELECT state FROM state_counts ORDER BY state")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(kept, ["canceled", "failed", "success"]);
    }

    /// Tasks in every state as an older build wrote them (one more of each
    /// state than of the last, over two destinations), and one of them moved
    /// from pending to running, so its triggers counted a move.
    fn fill_every_state(conn: &Connection) {
        for (i, state) in State::ALL.into_iter().enumerate() {
            for n in 0..=i {
                let key = format!("old-{}-{n}", state.as_str());
                let destination = ["a:80", "b:80"][n % 2];
                conn.execute_batch(&insert_in(&key, state, destination))
                    .unwrap();
            }
        }
        conn.execute_batch(&move_to("old-pending-0", State::Running))
            .unwrap();
    }

    /// `destination_tasks` (pending, running, the earliest due time)
    /// against a recount from the tasks.
    fn check_destinations(conn: &Connection, what: &str) {
        let (kept, recount) = crate::recount::destination_counts(conn).unwrap();
        assert_eq!(kept, recount, "by destination, after {what}");
    }

    /// A file a build at step 26 wrote, with tasks in every state on two
    /// destinations (their counts kept by the triggers), upgraded: the
    /// count triggers are gone (only `seq_floor_delete` is left), the
    /// counts read exact, and the writer's own tally keeps them exact
    /// through a submit, a claim, a completion, a cancel and a delete.
    #[test]
    fn step_27_drops_the_count_triggers_and_keeps_the_counts_exact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("step26.db");
        {
            let conn = Connection::open(&path).unwrap();
            for (k, step) in MIGRATIONS[..26].iter().enumerate() {
                conn.execute_batch(step).unwrap();
                match k as i64 + 1 {
                    n if n == CHECKS_STEP => rewrite_task_checks(&conn).unwrap(),
                    n if n == TENANTS_STEP => drop_key_uniqueness(&conn).unwrap(),
                    _ => {}
                }
            }
            conn.pragma_update(None, "application_id", APPLICATION_ID)
                .unwrap();
            conn.pragma_update(None, "user_version", 26).unwrap();
            fill_every_state(&conn);
            check_counts(&conn, "the triggers of step 26");
            check_destinations(&conn, "the triggers of step 26");
        }
        let conn = open_writer(&Target::File(path), &StoreConfig::default()).unwrap();
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .unwrap();
        assert_eq!(version, CURRENT_VERSION);
        let triggers: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_schema WHERE type = 'trigger' ORDER BY name")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(triggers, ["seq_floor_delete"]);
        check_counts(&conn, "the upgrade");
        check_destinations(&conn, "the upgrade");
        let at = tc_model::Timestamp::from_millis;
        for (key, url) in [("new-c", "http://c:80/"), ("new-a", "http://a:80/")] {
            let new = tc_model::NewTask::new(
                url.into(),
                b"{}".to_vec(),
                key.into(),
                2,
                Duration::from_secs(1),
                &tc_model::Limits::default(),
            )
            .unwrap();
            crate::write_ops::submit(&conn, &new, at(6)).unwrap();
        }
        crate::moves::apply(&conn).unwrap();
        check_counts(&conn, "a submit");
        check_destinations(&conn, "a submit");
        let gate = tc_model::destination::ClaimGate::default();
        let claimed = crate::write_ops::claim(&conn, 2, at(10), Duration::from_secs(60), &gate)
            .unwrap()
            .tasks;
        crate::moves::apply(&conn).unwrap();
        check_counts(&conn, "a claim");
        check_destinations(&conn, "a claim");
        let effect = tc_model::completion::CompletionEffect::of(
            tc_model::store::Completion::Success {
                http_status: 200,
                result: Vec::new(),
                content_type: None,
            },
            at(11),
        );
        crate::write_ops::complete(&conn, &claimed[0].id, claimed[0].attempt, &effect, 0).unwrap();
        let scope = tc_model::tenant::Scope::Admin;
        crate::write_ops::cancel(&conn, &claimed[1].id, &scope, at(12), 0).unwrap();
        crate::write_ops::delete(&conn, &claimed[0].id, &scope).unwrap();
        crate::moves::apply(&conn).unwrap();
        check_counts(&conn, "a completion, a cancel and a delete");
        check_destinations(&conn, "a completion, a cancel and a delete");
    }

    /// The claim's probe for due tasks without a flow key reads what it
    /// finds and no more, however many keyed tasks are due beside them
    /// (through `tasks_due_by_tenant`, before schema step 28, it stepped over each
    /// of them, 10,000 rows a claim behind a keyed backlog).
    #[test]
    fn the_probe_for_tasks_without_a_key_steps_past_no_keyed_backlog() {
        let conn = memory_writer();
        conn.execute_batch(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000) \
             INSERT INTO tasks (id, idempotency_key, state, url, body, max_attempts, timeout_ns, \
                                created_at, updated_at, destination, flow_key, next_run_at) \
             SELECT randomblob(16), 'k' || i, 'pending', 'http://h:80/', x'', 1, 1000000, \
                    0, 0, 'h:80', 'A', i FROM n;",
        )
        .unwrap();
        let probe = |unkeyed_due: bool| {
            let mut stmt = conn.prepare(crate::flow_keys::DUE_UNKEYED).unwrap();
            let found = stmt
                .query_map(rusqlite::params!["h:80", "", "", 5_000, 1], |row| {
                    row.get::<_, i64>(0)
                })
                .unwrap()
                .count();
            assert_eq!(found, usize::from(unkeyed_due));
            stmt.get_status(rusqlite::StatementStatus::VmStep)
        };
        let none = probe(false);
        assert!(none < 100, "{none} VM steps to find no task without a key");
        conn.execute_batch(
            "INSERT INTO tasks (id, idempotency_key, state, url, body, max_attempts, timeout_ns, \
                                created_at, updated_at, destination, flow_key, next_run_at) \
             VALUES (randomblob(16), 'free', 'pending', 'http://h:80/', x'', 1, 1000000, \
                     0, 0, 'h:80', '', 4000);",
        )
        .unwrap();
        let one = probe(true);
        assert!(
            one < 100,
            "{one} VM steps to find the one task without a key"
        );
    }

    #[test]
    fn the_state_column_takes_exactly_the_model_s_state_names() {
        let conn = memory_writer();
        let insert = |state: &str| {
            conn.execute(
                "INSERT INTO tasks (id, idempotency_key, state, url, body, max_attempts, \
                                    timeout_ns, created_at, updated_at) \
                 VALUES (randomblob(16), hex(randomblob(8)), ?1, 'u', x'', 1, 1000000, 0, 0)",
                [state],
            )
        };
        for state in State::ALL {
            insert(state.as_str()).unwrap();
        }
        for bad in ["Pending", "done", ""] {
            assert!(insert(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_fresh_database_is_marked_and_at_the_current_version() {
        let conn = memory_writer();
        let read = |pragma: &str| -> i64 {
            conn.pragma_query_value(None, pragma, |row| row.get(0))
                .unwrap()
        };
        assert_eq!(read("user_version"), CURRENT_VERSION);
        assert_eq!(read("application_id"), i64::from(APPLICATION_ID));
        assert_eq!(read("foreign_keys"), 1);
        assert_eq!(read("synchronous"), 2, "FULL by default");
    }
}
