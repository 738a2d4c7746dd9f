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

/// Step 0 → 1: the tables.
///
/// `seq` is the store-assigned position: one writer assigns it, so seq order
/// is commit order and keyset pagination over it never skips a row committed
/// later. STRICT keeps a bug from storing text where a number belongs.
const V1_TABLES: &str = "
CREATE TABLE tasks (
    seq                 INTEGER PRIMARY KEY,
    id                  BLOB    NOT NULL UNIQUE CHECK (length(id) = 16),
    idempotency_key     TEXT    NOT NULL UNIQUE,
    state               TEXT    NOT NULL
        CHECK (state IN ('pending', 'running', 'success', 'failed', 'canceled')),
    url                 TEXT    NOT NULL,
    body                BLOB    NOT NULL,
    max_attempts        INTEGER NOT NULL CHECK (max_attempts >= 1),
    timeout_ns          INTEGER NOT NULL CHECK (timeout_ns >= 1),
    attempt             INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    http_status         INTEGER,
    result              BLOB,
    result_content_type TEXT,
    error               TEXT,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    started_at          INTEGER,
    finished_at         INTEGER,
    next_run_at         INTEGER,
    lease_until         INTEGER
) STRICT;

CREATE TABLE attempts (
    seq         INTEGER PRIMARY KEY,
    task_id     BLOB    NOT NULL REFERENCES tasks (id),
    n           INTEGER NOT NULL CHECK (n >= 1),
    started_at  INTEGER NOT NULL,
    finished_at INTEGER,
    http_status INTEGER,
    error       TEXT,
    duration_ms INTEGER
) STRICT;

CREATE INDEX attempts_by_task ON attempts (task_id, seq);
";

/// Step 1 → 2: the indexes the worker's hot queries need, so that they stay
/// cheap with a million pending rows.
///
/// - `tasks_due` holds only pending rows in due order: `claim` and
///   `next_due` read its first entries and never sort.
/// - `tasks_leased` holds only running rows: `recover_expired` scans the
///   expired leases, not the table.
/// - `tasks_by_state` serves a state-filtered listing in seq order and lets
///   `count_by_state` count from an index instead of the wide rows.
///
/// Queries must spell `state = 'pending'` / `'running'` as literals: SQLite
/// only uses a partial index when the query's WHERE visibly implies it.
const V2_INDEXES: &str = "
CREATE INDEX tasks_due ON tasks (next_run_at, seq) WHERE state = 'pending';
CREATE INDEX tasks_leased ON tasks (lease_until) WHERE state = 'running';
CREATE INDEX tasks_by_state ON tasks (state, seq);
";

/// Step 2 → 3: how many tasks are in each state, kept by triggers in the
/// same transaction as every insert, state change and delete, so that
/// `/metrics` reads five rows instead of counting the table (O(1) in the
/// number of tasks). The step counts the existing rows once.
const V3_STATE_COUNTS: &str = "
CREATE TABLE state_counts (
    state TEXT PRIMARY KEY
          CHECK (state IN ('pending', 'running', 'success', 'failed', 'canceled')),
    n     INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

INSERT INTO state_counts (state, n)
SELECT column1, (SELECT count(*) FROM tasks WHERE tasks.state = column1)
FROM (VALUES ('pending'), ('running'), ('success'), ('failed'), ('canceled'));

CREATE TRIGGER state_counts_insert AFTER INSERT ON tasks BEGIN
    UPDATE state_counts SET n = n + 1 WHERE state = NEW.state;
END;

CREATE TRIGGER state_counts_update AFTER UPDATE OF state ON tasks
WHEN OLD.state <> NEW.state BEGIN
    UPDATE state_counts SET n = n - 1 WHERE state = OLD.state;
    UPDATE state_counts SET n = n + 1 WHERE state = NEW.state;
END;

CREATE TRIGGER state_counts_delete AFTER DELETE ON tasks BEGIN
    UPDATE state_counts SET n = n - 1 WHERE state = OLD.state;
END;
";

/// Step 3 → 4: an operator's retry gives a task a fresh budget of tries;
/// this counts the tries made before it, so the budget is
/// `max_attempts + attempts_before_retry` while attempt numbers go on.
const V4_RETRY_BUDGET: &str = "
ALTER TABLE tasks ADD COLUMN attempts_before_retry INTEGER NOT NULL DEFAULT 0
    CHECK (attempts_before_retry >= 0);
";

/// Step 4 → 5: when a task was asked to run first (`run_at` or `delay_ms`
/// at submit), kept as asked because it is part of the idempotency
/// payload. At most one of the two is set.
const V5_SCHEDULE: &str = "
ALTER TABLE tasks ADD COLUMN schedule_at INTEGER;
ALTER TABLE tasks ADD COLUMN schedule_delay_ms INTEGER CHECK (schedule_delay_ms >= 0);
";

/// Step 5 → 6: `seq` is a listing cursor, and SQLite hands a deleted
/// last row's rowid to the next insert. Deletes (by hand, by retention)
/// raise this floor to the highest seq they removed; submits take a seq
/// above both the table's and the floor, so no position is ever reused.
const V6_SEQ_FLOOR: &str = "
CREATE TABLE seq_floor (n INTEGER NOT NULL) STRICT;
INSERT INTO seq_floor (n) SELECT coalesce(max(seq), 0) FROM tasks;
CREATE TRIGGER seq_floor_delete AFTER DELETE ON tasks BEGIN
    UPDATE seq_floor SET n = max(n, OLD.seq);
END;
";

/// Step 6 → 7: the list and bulk filters' indexes (see `tc_model::store::
/// Driving`). Partial: a task that never failed has no error to index.
const V7_FILTER_INDEXES: &str = "
CREATE INDEX tasks_by_error ON tasks (error, seq) WHERE error IS NOT NULL;
";

/// Step 7 → 8: a task's destination (`host:port` of its url) as a column,
/// for the `destination` filter's index. Rows written before are filled in
/// by [`backfill_destinations`] in the same transaction (the host and port
/// of a url are not something to parse in SQL).
const V8_DESTINATION: &str = "
ALTER TABLE tasks ADD COLUMN destination TEXT NOT NULL DEFAULT '';
CREATE INDEX tasks_by_destination ON tasks (destination, seq);
";

/// The step after which rows have a destination column to fill.
const DESTINATION_STEP: i64 = 8;

/// Fills the destination of every row that has none (rows from before
/// [`V8_DESTINATION`]), from its url.
fn backfill_destinations(tx: &Connection) -> rusqlite::Result<usize> {
    let rows: Vec<(i64, String)> = tx
        .prepare("SELECT seq, url FROM tasks WHERE destination = ''")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut update = tx.prepare("UPDATE tasks SET destination = ?2 WHERE seq = ?1")?;
    for (seq, url) in &rows {
        update.execute(rusqlite::params![seq, tc_model::destination_of(url)])?;
    }
    Ok(rows.len())
}

/// Step 8 → 9: destination settings (issue: per-destination flow control),
/// and the pending tasks by destination in due order, which a claim walks
/// to rotate over the destinations with due tasks (one seek per
/// destination, however deep its backlog).
const V9_DESTINATIONS: &str = "
CREATE TABLE destinations (
    destination   TEXT PRIMARY KEY,
    max_in_flight INTEGER,
    rate_per_s    REAL,
    burst         INTEGER,
    paused        INTEGER NOT NULL DEFAULT 0,
    updated_at    INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX tasks_due_by_destination ON tasks (destination, next_run_at, seq)
    WHERE state = 'pending';
";

/// Step 9 → 10: what a call sends beyond its url and body (issue: outbound
/// calls): a task's method (`POST` for every task written before) and its
/// own headers; a destination's default headers and signing secrets. The
/// header columns hold `tc_model::Headers::to_stored` (a JSON object), the
/// secrets `tc_model::signing::SigningSecrets::to_stored`; NULL for none.
const V10_OUTBOUND: &str = "
ALTER TABLE tasks ADD COLUMN method TEXT NOT NULL DEFAULT 'POST'
    CHECK (method IN ('GET', 'POST', 'PUT', 'PATCH', 'DELETE'));
ALTER TABLE tasks ADD COLUMN headers TEXT;
ALTER TABLE destinations ADD COLUMN headers TEXT;
ALTER TABLE destinations ADD COLUMN signing_secrets TEXT;
";

/// Step 10 → 11: the W3C trace context a task's calls belong to (issue
/// 27): `tc_model::TraceContext::to_stored` (the `traceparent`, then a line
/// with the `tracestate`); NULL for tasks written before, which are called
/// without one. A nullable column without a default: no row is rewritten.
const V11_TRACE_CONTEXT: &str = "
ALTER TABLE tasks ADD COLUMN trace_context TEXT;
";

/// Step 11 → 12: each destination's pending and running tasks and the
/// earliest due time of its pending ones, kept
/// by triggers in the same transaction as every insert, state change and
/// delete (a destination's row exists while it has pending or running
/// tasks). A claim walks only destinations that have due tasks:
/// `destination_tasks_waiting` orders those not yet met by due time, and
/// a claim marks the ones whose time came `ready` (a seek per destination
/// that became due); `destination_tasks_ready` holds the ready ones in name
/// order, the rotation. A destination leaves `ready` when its earliest due
/// time moves later (its due tasks were claimed, canceled or deleted), to
/// come back when that time comes. The API's counts by destination read
/// the rows: they cost what changed, not what is stored. Rows for tasks
/// older than the step are filled by [`fill_destination_tasks`].
const V12_DESTINATION_TASKS: &str = "
CREATE TABLE destination_tasks (
    destination TEXT PRIMARY KEY,
    pending     INTEGER NOT NULL DEFAULT 0,
    running     INTEGER NOT NULL DEFAULT 0,
    next_due    INTEGER,
    ready       INTEGER NOT NULL DEFAULT 0
) STRICT, WITHOUT ROWID;
CREATE INDEX destination_tasks_waiting ON destination_tasks (next_due)
    WHERE ready = 0 AND next_due IS NOT NULL;
CREATE INDEX destination_tasks_ready ON destination_tasks (destination) WHERE ready = 1;

CREATE TRIGGER destination_tasks_insert AFTER INSERT ON tasks
WHEN NEW.state IN ('pending', 'running') BEGIN
    INSERT INTO destination_tasks (destination, pending, running, next_due)
    VALUES (NEW.destination, NEW.state = 'pending', NEW.state = 'running',
            iif(NEW.state = 'pending', NEW.next_run_at, NULL))
    ON CONFLICT (destination) DO UPDATE SET
        pending = pending + excluded.pending,
        running = running + excluded.running,
        next_due = coalesce(min(next_due, excluded.next_due), next_due, excluded.next_due);
END;

CREATE TRIGGER destination_tasks_update AFTER UPDATE OF state, next_run_at ON tasks
WHEN OLD.state IN ('pending', 'running') OR NEW.state IN ('pending', 'running') BEGIN
    UPDATE destination_tasks
    SET pending = pending - (OLD.state = 'pending'), running = running - (OLD.state = 'running'),
        ready = ready AND NOT (OLD.state = 'pending' AND OLD.next_run_at <= next_due)
    WHERE destination = OLD.destination AND OLD.state IN ('pending', 'running');
    INSERT INTO destination_tasks (destination, pending, running)
    SELECT NEW.destination, NEW.state = 'pending', NEW.state = 'running'
    WHERE NEW.state IN ('pending', 'running')
    ON CONFLICT (destination) DO UPDATE SET
        pending = pending + excluded.pending,
        running = running + excluded.running;
    UPDATE destination_tasks
    SET next_due = (SELECT next_run_at FROM tasks
                    WHERE state = 'pending' AND destination = OLD.destination
                    ORDER BY next_run_at LIMIT 1)
    WHERE destination = OLD.destination AND OLD.state = 'pending' AND OLD.next_run_at <= next_due;
    UPDATE destination_tasks
    SET next_due = iif(next_due IS NULL OR NEW.next_run_at < next_due, NEW.next_run_at, next_due)
    WHERE destination = NEW.destination AND NEW.state = 'pending'
      AND NOT (OLD.state = 'pending' AND OLD.next_run_at <= next_due);
    DELETE FROM destination_tasks
    WHERE destination = OLD.destination AND pending = 0 AND running = 0;
END;

CREATE TRIGGER destination_tasks_delete AFTER DELETE ON tasks
WHEN OLD.state IN ('pending', 'running') BEGIN
    UPDATE destination_tasks
    SET pending = pending - (OLD.state = 'pending'), running = running - (OLD.state = 'running'),
        ready = ready AND NOT (OLD.state = 'pending' AND OLD.next_run_at <= next_due)
    WHERE destination = OLD.destination;
    UPDATE destination_tasks
    SET next_due = (SELECT next_run_at FROM tasks
                    WHERE state = 'pending' AND destination = OLD.destination
                    ORDER BY next_run_at LIMIT 1)
    WHERE destination = OLD.destination AND OLD.state = 'pending' AND OLD.next_run_at <= next_due;
    DELETE FROM destination_tasks
    WHERE destination = OLD.destination AND pending = 0 AND running = 0;
END;
";

/// A state change reads a destination's earliest due time again (one seek
/// in `tasks_due_by_destination`, `ORDER BY next_run_at LIMIT 1`) only when
/// the task that left pending may have been its earliest; that task also
/// takes the destination out of the ready set (it comes back at the next
/// claim if its time has come). Measured with sqlite3 3.40 in memory,
/// 100,000 tasks over 50 destinations, three runs: the triggers add about
/// 1 µs to an insert, 3.5 µs to a claim and 1.7 µs to a completion (an
/// earlier `UPDATE … FROM` with `min()` for the recount added 38 µs to a
/// claim).
///
/// The step that made `destination_tasks`.
const DESTINATION_TASKS_STEP: i64 = 12;

/// Counts the pending and running tasks of every destination once, for a
/// file older than [`V12_DESTINATION_TASKS`] (after the destinations of
/// older rows were filled in).
fn fill_destination_tasks(tx: &Connection) -> rusqlite::Result<usize> {
    tx.execute("DELETE FROM destination_tasks", [])?;
    tx.execute(
        "INSERT INTO destination_tasks (destination, pending, running, next_due)
         SELECT destination, sum(state = 'pending'), sum(state = 'running'),
                min(iif(state = 'pending', next_run_at, NULL))
         FROM tasks WHERE state IN ('pending', 'running') GROUP BY destination",
        [],
    )
}

/// Step 12 → 13: callbacks. A task's `callback_url` and
/// `callback_on` (`tc_model::callback::CallbackOn::to_stored`, both NULL
/// for none); a callback task's `callback_of` (its parent's id); the
/// callback made at a task's latest end (`callback_task_id`) and how many
/// times it ended (`ends`, the n of the n-th callback's key). Nullable
/// columns and a constant default: no row is rewritten.
const V13_CALLBACKS: &str = "
ALTER TABLE tasks ADD COLUMN callback_url TEXT;
ALTER TABLE tasks ADD COLUMN callback_on TEXT;
ALTER TABLE tasks ADD COLUMN callback_of BLOB CHECK (length(callback_of) = 16);
ALTER TABLE tasks ADD COLUMN callback_task_id BLOB CHECK (length(callback_task_id) = 16);
ALTER TABLE tasks ADD COLUMN ends INTEGER NOT NULL DEFAULT 0 CHECK (ends >= 0);
";

/// Step 13 → 14: schedules: one row per schedule, its task
/// template in tc-model's text form, its firing record (`last_run_at`
/// only moves forward). A small table read whole by every firing loop.
const V14_SCHEDULES: &str = "
CREATE TABLE schedules (
    name         TEXT    PRIMARY KEY,
    cron         TEXT    NOT NULL,
    timezone     TEXT    NOT NULL,
    task         TEXT    NOT NULL,
    paused       INTEGER NOT NULL CHECK (paused IN (0, 1)),
    overlap      TEXT    NOT NULL CHECK (overlap IN ('allow', 'skip')),
    catch_up     TEXT    NOT NULL CHECK (catch_up IN ('none', 'latest')),
    last_run_at  INTEGER,
    last_task_id BLOB    CHECK (last_task_id IS NULL OR length(last_task_id) = 16),
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
";

/// Step 14 → 15 (the writer's CPU per task): the two hot
/// triggers of step 12 again, with the same effect, written so that the
/// statements that fire them need no statement journal. SQLite gives a
/// statement a journal (a copy of every page it touches, undone if it
/// aborts halfway) when it may abort after writing; an upsert's DO UPDATE
/// always may (SQLite codes it with ABORT whatever the outer statement
/// says), and so does any call of a function such as `min()`. Here a
/// missing row is inserted with defaults (`ON CONFLICT DO NOTHING`, which
/// never aborts), then counted by a plain UPDATE; the earliest due time is
/// a CASE. The hot writes (submit, claim, complete) run `OR FAIL`, which
/// the trigger bodies inherit, so they abort nowhere and journal nothing
/// (see `write_ops`). Measured with the writer_cost harness under
/// callgrind: docs/performance.md.
const V15_TRIGGERS_WITHOUT_UPSERT: &str = "
DROP TRIGGER destination_tasks_insert;
CREATE TRIGGER destination_tasks_insert AFTER INSERT ON tasks
WHEN NEW.state IN ('pending', 'running') BEGIN
    INSERT INTO destination_tasks (destination) VALUES (NEW.destination)
    ON CONFLICT DO NOTHING;
    UPDATE destination_tasks
    SET pending = pending + (NEW.state = 'pending'),
        running = running + (NEW.state = 'running'),
        next_due = CASE WHEN NEW.state <> 'pending' OR NEW.next_run_at IS NULL THEN next_due
                        WHEN next_due IS NULL OR NEW.next_run_at < next_due THEN NEW.next_run_at
                        ELSE next_due END
    WHERE destination = NEW.destination;
END;

DROP TRIGGER destination_tasks_update;
CREATE TRIGGER destination_tasks_update AFTER UPDATE OF state, next_run_at ON tasks
WHEN OLD.state IN ('pending', 'running') OR NEW.state IN ('pending', 'running') BEGIN
    UPDATE destination_tasks
    SET pending = pending - (OLD.state = 'pending'), running = running - (OLD.state = 'running'),
        ready = ready AND NOT (OLD.state = 'pending' AND OLD.next_run_at <= next_due)
    WHERE destination = OLD.destination AND OLD.state IN ('pending', 'running');
    INSERT INTO destination_tasks (destination)
    SELECT NEW.destination WHERE NEW.state IN ('pending', 'running')
    ON CONFLICT DO NOTHING;
    UPDATE destination_tasks
    SET pending = pending + (NEW.state = 'pending'), running = running + (NEW.state = 'running')
    WHERE destination = NEW.destination AND NEW.state IN ('pending', 'running');
    UPDATE destination_tasks
    SET next_due = (SELECT next_run_at FROM tasks
                    WHERE state = 'pending' AND destination = OLD.destination
                    ORDER BY next_run_at LIMIT 1)
    WHERE destination = OLD.destination AND OLD.state = 'pending' AND OLD.next_run_at <= next_due;
    UPDATE destination_tasks
    SET next_due = iif(next_due IS NULL OR NEW.next_run_at < next_due, NEW.next_run_at, next_due)
    WHERE destination = NEW.destination AND NEW.state = 'pending'
      AND NOT (OLD.state = 'pending' AND OLD.next_run_at <= next_due);
    DELETE FROM destination_tasks
    WHERE destination = OLD.destination AND pending = 0 AND running = 0;
END;
";

/// The step whose SQL is [`V15_TRIGGERS_WITHOUT_UPSERT`]; after it,
/// [`rewrite_task_checks`] rewrites the CHECK constraints of `tasks`.
const CHECKS_STEP: i64 = 15;

/// CHECK constraints of `tasks` as the earlier steps wrote them, and what
/// step 15 makes of them.
///
/// - `state` and `method` name a list of more than two values. SQLite
///   evaluates `x IN (a, b, c, …)` by building an ephemeral index of the
///   list, once for every statement run that checks the column: on every
///   submit (both columns), claim and completion (the state). An OR of
///   equalities is the same rule, evaluated in registers.
/// - The three `length(…) = 16` checks go: a function call makes SQLite
///   give every insert a statement journal (a copy of each page it
///   touches), 39k of a task's 307k instructions on the writer.
///   The columns are written only from `TaskId`s, 16 bytes by type, and
///   read back through `TaskId` parsing, which refuses another length.
const REWRITTEN_CHECKS: [(&str, &str); 5] = [
    (
        "state IN ('pending', 'running', 'success', 'failed', 'canceled')",
        "state = 'pending' OR state = 'running' OR state = 'success' \
         OR state = 'failed' OR state = 'canceled'",
    ),
    (
        "method IN ('GET', 'POST', 'PUT', 'PATCH', 'DELETE')",
        "method = 'GET' OR method = 'POST' OR method = 'PUT' OR method = 'PATCH' \
         OR method = 'DELETE'",
    ),
    (" CHECK (length(id) = 16)", ""),
    (" CHECK (length(callback_of) = 16)", ""),
    (" CHECK (length(callback_task_id) = 16)", ""),
];

/// Rewrites [`REWRITTEN_CHECKS`] in the stored definition of `tasks`, in the
/// migration's transaction: SQLite's own procedure for a change of
/// constraints that leaves the stored rows as they are (`writable_schema`,
/// then a new `schema_version`; "Making Other Kinds Of Table Schema
/// Changes" in its ALTER TABLE documentation, which names removing CHECK
/// constraints among them). Every stored row satisfied the old rules and so
/// satisfies the new ones, the same rules or fewer. Rebuilding
/// the table instead would copy every row of a large file. Refuses (and the
/// migration rolls back) if a definition is not the one the earlier steps
/// wrote.
fn rewrite_task_checks(tx: &Connection) -> rusqlite::Result<()> {
    let version: i64 = tx.pragma_query_value(None, "schema_version", |row| row.get(0))?;
    let sql: String = tx.query_row(
        "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'tasks'",
        [],
        |row| row.get(0),
    )?;
    let mut rewritten = sql.clone();
    for (old, new) in REWRITTEN_CHECKS {
        if rewritten.matches(old).count() != 1 {
            return Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
                Some(format!("the tasks table has not exactly one {old:?}")),
            ));
        }
        rewritten = rewritten.replace(old, new);
    }
    tx.pragma_update(None, "writable_schema", "ON")?;
    tx.execute(
        "UPDATE sqlite_schema SET sql = ?1 WHERE type = 'table' AND name = 'tasks'",
        [&rewritten],
    )?;
    tx.pragma_update(None, "schema_version", version + 1)?;
    // RESET: off again, and the connection reads the schema anew.
    tx.pragma_update(None, "writable_schema", "RESET")?;
    Ok(())
}

/// Step 15 → 16: tenants.
///
/// - `tasks.tenant`: the task's tenant, `''` for none (`tc_model::tenant::
///   stored_tenant`). A constant default: no row is rewritten, and every
///   task written before reads back with no tenant.
/// - The idempotency key is unique per tenant: `tasks_by_key` on (key,
///   tenant) replaces the key's own UNIQUE (dropped by
///   [`drop_key_uniqueness`] after the steps); a lookup by the key alone
///   (the listing's key filter) reads its prefix.
/// - The other task indexes are partial, `WHERE tenant <> ''`, so that a
///   task without a tenant (every task of a server without tenants) costs
///   no index write more than before: `tasks_by_tenant` (a tenant's
///   listing in seq order, and whether it has any task), `tasks_open_by_
///   tenant` (its pending and running tasks, counted for `max_pending` and
///   its detail with a seek per state), `tasks_due_by_tenant` (a tenant's
///   due tasks in one destination, in due order, for the claim's share
///   between tenants).
/// - `tenants` and `api_keys`: small tables; a key is found by the
///   SHA-256 of its text (`hash`, unique), never by the secret.
const V16_TENANTS: &str = "
ALTER TABLE tasks ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX tasks_by_key ON tasks (idempotency_key, tenant);
CREATE INDEX tasks_by_tenant ON tasks (tenant, seq) WHERE tenant <> '';
CREATE INDEX tasks_open_by_tenant ON tasks (tenant, state) WHERE tenant <> '';
CREATE INDEX tasks_due_by_tenant ON tasks (destination, tenant, next_run_at, seq)
    WHERE state = 'pending' AND tenant <> '';

CREATE TABLE tenants (
    name              TEXT    PRIMARY KEY,
    weight            INTEGER NOT NULL CHECK (weight >= 1),
    max_pending       INTEGER CHECK (max_pending >= 1),
    submit_rate_per_s REAL,
    submit_burst      INTEGER CHECK (submit_burst >= 1),
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

CREATE TABLE api_keys (
    seq          INTEGER PRIMARY KEY,
    id           TEXT    NOT NULL UNIQUE,
    tenant       TEXT    NOT NULL REFERENCES tenants (name),
    hash         BLOB    NOT NULL UNIQUE,
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER
) STRICT;
CREATE INDEX api_keys_by_tenant ON api_keys (tenant, seq);
";

/// The step whose SQL is [`V16_TENANTS`]; after it, [`drop_key_uniqueness`]
/// drops the key's old UNIQUE.
const TENANTS_STEP: i64 = 16;

/// The idempotency key's column as step 1 wrote it, and without its UNIQUE.
const KEY_COLUMN: (&str, &str) = (
    "idempotency_key     TEXT    NOT NULL UNIQUE,",
    "idempotency_key     TEXT    NOT NULL,",
);

/// Drops the UNIQUE of `tasks.idempotency_key` (a constraint of the table,
/// whose index SQLite made and names `sqlite_autoindex_tasks_N`; no DROP
/// INDEX reaches it), in the migration's transaction, without copying the
/// table: through `writable_schema` (see [`rewrite_task_checks`]), the
/// column's definition loses its UNIQUE and its automatic index becomes a
/// plain unique index of the same column, the same b-tree SQLite built (an
/// automatic index of one column and `CREATE UNIQUE INDEX` on it are stored
/// alike); then an ordinary DROP INDEX frees its pages. Refuses (and the
/// migration rolls back) if the definition or the index are not those step
/// 1 made.
fn drop_key_uniqueness(tx: &Connection) -> rusqlite::Result<()> {
    let refuse = |what: String| {
        rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
            Some(what),
        )
    };
    let automatic: Vec<String> = tx
        .prepare(
            "SELECT il.name FROM pragma_index_list('tasks') AS il \
             WHERE il.origin = 'u' \
               AND (SELECT group_concat(ii.name) FROM pragma_index_info(il.name) AS ii) \
                   = 'idempotency_key'",
        )?
        .query_map([], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let [automatic] = automatic.as_slice() else {
        return Err(refuse(format!(
            "the key's UNIQUE has not exactly one index: {automatic:?}"
        )));
    };
    let version: i64 = tx.pragma_query_value(None, "schema_version", |row| row.get(0))?;
    let sql: String = tx.query_row(
        "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'tasks'",
        [],
        |row| row.get(0),
    )?;
    let (old, new) = KEY_COLUMN;
    if sql.matches(old).count() != 1 {
        return Err(refuse(format!(
            "the tasks table has not exactly one {old:?}"
        )));
    }
    tx.pragma_update(None, "writable_schema", "ON")?;
    tx.execute(
        "UPDATE sqlite_schema SET sql = ?1 WHERE type = 'table' AND name = 'tasks'",
        [sql.replace(old, new)],
    )?;
    tx.execute(
        "UPDATE sqlite_schema SET name = 'tasks_key_before_tenants', \
             sql = 'CREATE UNIQUE INDEX tasks_key_before_tenants ON tasks (idempotency_key)' \
         WHERE type = 'index' AND name = ?1",
        [automatic],
    )?;
    tx.pragma_update(None, "schema_version", version + 1)?;
    tx.pragma_update(None, "writable_schema", "RESET")?;
    tx.execute_batch("DROP INDEX tasks_key_before_tenants")
}

/// Step 16 → 17 (the writer's CPU per task): `state_counts`
/// keeps only the finished states (success, failed, canceled); the pending
/// and running totals are the sums of `destination_tasks` (step 12), which
/// already counts them exactly per destination, in the same transaction as
/// every insert, state change and delete (the claim depends on them), so
/// `read_ops::COUNT_BY_STATE` reads both in one statement.
///
/// A task's life (submitted pending, claimed, completed) ran the three
/// `state_counts` triggers of step 3, five statements in three trigger
/// frames: the writer_cost harness ran at 278,115 instructions per task
/// with them and 259,583 with none. Now a submit and a claim run none of
/// their statements (the WHEN is false; SQLite still enters the trigger's
/// frame to evaluate it), a completion runs one increment: 270,030
/// (docs/performance.md; folding these statements into the
/// `destination_tasks` triggers instead, to save the frames, measured
/// worse). The guards
/// are ORs of equalities, not `IN (…)` lists of three constants, which
/// SQLite evaluates by building an ephemeral index on every run (see
/// [`REWRITTEN_CHECKS`]), and call no function (a function call gives the
/// firing statement a statement journal; see
/// [`V15_TRIGGERS_WITHOUT_UPSERT`]). A decrement's guard on `OLD.state`
/// names no column of `state_counts`, so SQLite tests it once before the
/// seek, and a change from pending or running seeks nothing. The pending
/// and running rows are deleted, so that no stale figure is left to read:
/// a row that no trigger keeps does not exist.
const V17_TERMINAL_STATE_COUNTS: &str = "
DELETE FROM state_counts WHERE state = 'pending' OR state = 'running';

DROP TRIGGER state_counts_insert;
CREATE TRIGGER state_counts_insert AFTER INSERT ON tasks
WHEN NEW.state = 'success' OR NEW.state = 'failed' OR NEW.state = 'canceled' BEGIN
    UPDATE state_counts SET n = n + 1 WHERE state = NEW.state;
END;

DROP TRIGGER state_counts_update;
CREATE TRIGGER state_counts_update AFTER UPDATE OF state ON tasks
WHEN OLD.state <> NEW.state
 AND (OLD.state = 'success' OR OLD.state = 'failed' OR OLD.state = 'canceled'
      OR NEW.state = 'success' OR NEW.state = 'failed' OR NEW.state = 'canceled') BEGIN
    UPDATE state_counts SET n = n - 1
    WHERE state = OLD.state
      AND (OLD.state = 'success' OR OLD.state = 'failed' OR OLD.state = 'canceled');
    UPDATE state_counts SET n = n + 1
    WHERE state = NEW.state
      AND (NEW.state = 'success' OR NEW.state = 'failed' OR NEW.state = 'canceled');
END;

DROP TRIGGER state_counts_delete;
CREATE TRIGGER state_counts_delete AFTER DELETE ON tasks
WHEN OLD.state = 'success' OR OLD.state = 'failed' OR OLD.state = 'canceled' BEGIN
    UPDATE state_counts SET n = n - 1 WHERE state = OLD.state;
END;
";

/// Step 17 → 18: `tasks_due_by_tenant` holds every pending task, those
/// without a tenant (`tenant = ''`) too, so that the claim finds a
/// destination's due tasks without a tenant with one seek, whatever the
/// tenants' backlogs ahead of them in due order. api.md promises they
/// count as one more tenant of weight 1; the bounded walk past the
/// tenants' tasks that found them before (through
/// `tasks_due_by_destination`) left them unseen behind more than 512 of a
/// tenant's due tasks. Each pending task without a tenant costs one index
/// entry more (measured in docs/performance.md).
const V18_DUE_BY_TENANT_FOR_ALL: &str = "
DROP INDEX tasks_due_by_tenant;
CREATE INDEX tasks_due_by_tenant ON tasks (destination, tenant, next_run_at, seq)
    WHERE state = 'pending';
";

/// Step 18 → 19 (a tenant's calls carry only its own
/// credentials): a tenant's own signing secrets
/// (`tc_model::signing::SigningSecrets::to_stored`), and the tenants a
/// destination lends its headers and secrets to
/// (`tc_model::outbound::SharedWith::to_stored`: names separated by a
/// space, or `*`); NULL for none, which every row written before gets, so
/// no row is rewritten and no destination is shared until an operator says
/// so.
const V19_TENANT_SECRETS: &str = "
ALTER TABLE tenants ADD COLUMN signing_secrets TEXT;
ALTER TABLE destinations ADD COLUMN share_with_tenants TEXT;
";

/// Step 19 → 20: why a schedule's latest firing created no task
/// (`tc_model::schedule::FiringError`: a url the allow-list no longer
/// admits), all three columns set or none. Nullable columns without a
/// default: no row is rewritten.
const V20_SCHEDULE_ERRORS: &str = "
ALTER TABLE schedules ADD COLUMN last_error_code TEXT;
ALTER TABLE schedules ADD COLUMN last_error_message TEXT;
ALTER TABLE schedules ADD COLUMN last_error_at INTEGER;
";

/// Step 20 → 21: a destination's `auth`
/// (`tc_model::auth::DestinationAuth::to_stored`, its secrets with it: the
/// one column sealing at rest wraps), NULL for none; and the server's own
/// keys by name (`jwt_key`: the PKCS#8 PEM JWTs are signed with when no
/// `--jwt-key-file` is given), written once, never replaced.
const V21_AUTH: &str = "
ALTER TABLE destinations ADD COLUMN auth TEXT;
CREATE TABLE server_keys (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;
";

/// Step 21 → 22: a destination's client certificate (its PEM
/// and facts, as `ClientCert::to_stored` writes them), its key (sealed at
/// rest when the server has a key) and its own CA certificates.
const V22_CLIENT_TLS: &str = "
ALTER TABLE destinations ADD COLUMN client_cert TEXT;
ALTER TABLE destinations ADD COLUMN client_key TEXT;
ALTER TABLE destinations ADD COLUMN ca_certs TEXT;
";

/// Step 22 → 23 (the writer's work per task):
///
/// - A try's history row is written once, whole, when the try ends (a
///   completion, a cancel, a release, an expired lease); a claim writes
///   none, so a try costs one insert instead of an insert and an update.
///   While it runs, reads show it from the task's own `attempt` and
///   `started_at` (`rows::attempts_of`). The open rows that earlier
///   versions wrote for the tasks running now are deleted: the task row
///   holds the same number and start, and their end writes them again.
/// - `tasks_due` goes: the earliest due time is the least of
///   `destination_tasks.next_due`, which step 12's triggers keep exactly,
///   and every submit and claim paid one entry of it.
const V23_TRIES_WRITTEN_ONCE: &str = "
DELETE FROM attempts
WHERE finished_at IS NULL
  AND task_id IN (SELECT id FROM tasks WHERE state = 'running');
DROP INDEX tasks_due;
";

/// Step 23 → 24: topics. A topic is its tenant's (`''` for
/// the admin's, as in `tasks`); a subscription's `signing_secrets` are
/// sealed at rest like a destination's (tc-seal's `SECRET_COLUMNS`), its
/// `event_types` the entries separated by a space (NULL: every event). An
/// event keeps its payload (a repeat is compared with it, a replay sends
/// it again); `event_tasks` is what each event made, in rowid order, `n` 0 for
/// the publish and the replay's number after. A topic's task names its
/// topic, event and subscription (`tasks.topic`, `event_id`, `subscription`,
/// all NULL for other tasks; listings filter on them row by row).
const V24_TOPICS: &str = "
ALTER TABLE tasks ADD COLUMN topic TEXT;
ALTER TABLE tasks ADD COLUMN event_id TEXT;
ALTER TABLE tasks ADD COLUMN subscription TEXT;
CREATE TABLE topics (
    tenant          TEXT    NOT NULL,
    name            TEXT    NOT NULL,
    description     TEXT    NOT NULL,
    callback_url    TEXT,
    disable_after_s INTEGER NOT NULL CHECK (disable_after_s > 0),
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
) STRICT, WITHOUT ROWID;
CREATE TABLE subscriptions (
    id              TEXT    PRIMARY KEY,
    tenant          TEXT    NOT NULL,
    topic           TEXT    NOT NULL,
    url             TEXT    NOT NULL,
    event_types     TEXT,
    headers         TEXT,
    signing_secrets TEXT,
    enabled         INTEGER NOT NULL CHECK (enabled IN (0, 1)),
    failing_since   INTEGER,
    disabled_reason TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    FOREIGN KEY (tenant, topic) REFERENCES topics (tenant, name)
) STRICT;
CREATE INDEX subscriptions_of_topic ON subscriptions (tenant, topic, created_at);
CREATE TABLE events (
    id                TEXT    PRIMARY KEY,
    tenant            TEXT    NOT NULL,
    topic             TEXT    NOT NULL,
    event_type        TEXT    NOT NULL,
    body              BLOB    NOT NULL,
    idempotency_key   TEXT    NOT NULL,
    max_attempts      INTEGER NOT NULL,
    timeout_ns        INTEGER NOT NULL,
    schedule_at       INTEGER,
    schedule_delay_ms INTEGER,
    created_at        INTEGER NOT NULL,
    UNIQUE (tenant, topic, idempotency_key)
) STRICT;
CREATE INDEX events_of_topic ON events (tenant, topic, created_at);
CREATE TABLE event_tasks (
    event_id     TEXT    NOT NULL,
    subscription TEXT    NOT NULL,
    n            INTEGER NOT NULL CHECK (n >= 0),
    task_id      BLOB    NOT NULL CHECK (length(task_id) = 16),
    PRIMARY KEY (event_id, subscription, n)
) STRICT;
";

/// Step 24 → 25: a task's priority, 0 to 9 (every task
/// stored before has 0), and the due tasks of priority above 0 by
/// destination: a claim looks there (`priority::due_of`) and finds none in
/// one seek when no task has a priority, which costs the tasks without
/// one nothing.
const V25_PRIORITY: &str = "
ALTER TABLE tasks ADD COLUMN priority INTEGER NOT NULL DEFAULT 0
    CHECK (priority BETWEEN 0 AND 9);
CREATE INDEX tasks_prioritized ON tasks (destination, next_run_at, seq)
    WHERE state = 'pending' AND priority > 0;
";

/// Step 25 → 26: a task's flow key (`''` for none, as a tenant) and each
/// tenant's keys' settings with their token bucket (`tokens` at
/// `refilled_at`, charged by the claim, `flow_keys::charge`). The due
/// tasks of a key by destination and tenant and the running tasks of a
/// key are partial indexes of keyed tasks alone, so tasks without a key
/// cost nothing more.
const V26_FLOW_KEYS: &str = "
ALTER TABLE tasks ADD COLUMN flow_key TEXT NOT NULL DEFAULT '';
CREATE INDEX tasks_due_by_key ON tasks (destination, tenant, flow_key, next_run_at, seq)
    WHERE state = 'pending' AND flow_key <> '';
CREATE INDEX tasks_running_by_key ON tasks (tenant, flow_key)
    WHERE state = 'running' AND flow_key <> '';
CREATE TABLE flow_keys (
    tenant        TEXT NOT NULL,
    key           TEXT NOT NULL,
    max_in_flight INTEGER,
    rate_per_s    REAL,
    burst         INTEGER,
    tokens        REAL,
    refilled_at   INTEGER,
    updated_at    INTEGER NOT NULL,
    PRIMARY KEY (tenant, key)
) WITHOUT ROWID;
";

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
    let sync = match config.synchronous {
        Synchronous::Full => "FULL",
        Synchronous::Normal => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", sync)
        .map_err(|e| ("set synchronous", e))?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(|e| ("enable foreign keys", e))?;
    // The writer runs the automatic checkpoints inside its COMMITs, where they
    // stall every caller of the batch; checkpointing every 40 MiB of WAL
    // instead of SQLite's 4 MiB gave 15-25% more durable submits/s at 64
    // callers (cargo xtask bench-store), at the price of a larger -wal file.
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

    fn fresh() -> Connection {
        open_writer(&Target::new_memory(), &StoreConfig::default()).unwrap()
    }

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
            "DROP TRIGGER state_counts_insert;
             CREATE TRIGGER state_counts_insert AFTER INSERT ON tasks BEGIN
                 UPDATE state_counts SET n = n + 1 WHERE state = NEW.state;
             END;",
        )
        .unwrap();
        let other = Connection::open(&path).unwrap();
        assert_eq!(tasks_sql(&other), rewritten);
        other
            .execute_batch("DROP TRIGGER seq_floor_delete; DROP TRIGGER state_counts_delete;")
            .unwrap();
        let triggers = |c: &Connection| -> i64 {
            c.query_row(
                "SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' \
                 AND name IN ('seq_floor_delete', 'state_counts_delete', 'state_counts_insert')",
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
        let conn = fresh();
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
            (crate::write_ops::EXPIRED, "tasks_leased"),
            (crate::read_ops::COUNT_BY_STATE, "state_counts"),
            (crate::write_ops::OPEN_TASKS_OF, "tasks_open_by_tenant"),
            (crate::write_ops::NEXT_TENANT, "tasks_due_by_tenant"),
            (crate::write_ops::DUE_OF_TENANT, "tasks_due_by_tenant"),
        ];
        let filtered = |edit: fn(&mut TaskFilter)| {
            let mut filter = TaskFilter::default();
            edit(&mut filter);
            crate::read_ops::list_scan_sql(&crate::filter::FilterSql::new(&filter))
        };
        let lists = [
            (filtered(|_| {}), "INTEGER PRIMARY KEY"),
            (
                filtered(|f| f.state = Some(State::Failed)),
                "tasks_by_state",
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
        let conn = fresh();
        let plan = plan(&conn, crate::destinations::COUNTS_OF);
        let reads_tasks = plan.contains("SEARCH tasks") || plan.contains("SCAN tasks");
        assert!(!reads_tasks, "counting reads tasks: {plan}");
        assert!(plan.contains("destination_tasks"), "{plan}");
    }

    /// `destination_tasks` against a recount from the tasks, after every
    /// kind of write: inserts (due and later), claims, a retry's return to
    /// pending, completions, cancels and deletes.
    #[test]
    fn destination_rows_follow_every_insert_state_change_and_delete() {
        let conn = fresh();
        let kept = || -> Vec<(String, i64, i64, Option<i64>)> {
            conn.prepare(
                "SELECT destination, pending, running, next_due FROM destination_tasks \
                 ORDER BY destination",
            )
            .unwrap()
            .query_map([], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect()
        };
        let recount = || -> Vec<(String, i64, i64, Option<i64>)> {
            conn.prepare(
                "SELECT destination, sum(state = 'pending'), sum(state = 'running'), \
                        min(iif(state = 'pending', next_run_at, NULL)) \
                 FROM tasks WHERE state IN ('pending', 'running') \
                 GROUP BY destination ORDER BY destination",
            )
            .unwrap()
            .query_map([], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect()
        };
        let run = |sql: &str| {
            conn.execute_batch(sql).unwrap();
            assert_eq!(kept(), recount(), "after {sql}");
        };
        let insert = |key: &str, dest: &str, due: i64| {
            run(&format!(
                "INSERT INTO tasks (id, idempotency_key, state, url, body, max_attempts, \
                                    timeout_ns, created_at, updated_at, next_run_at, destination) \
                 VALUES (randomblob(16), '{key}', 'pending', 'u', x'', 1, 1000000, 0, 0, \
                         {due}, '{dest}')"
            ));
        };
        insert("a1", "a:80", 10);
        insert("a2", "a:80", 5);
        insert("b1", "b:80", 100);
        run("UPDATE destination_tasks SET ready = 1 WHERE next_due <= 50");
        let set = |key: &str, to: &str| {
            run(&format!(
                "UPDATE tasks SET {to} WHERE idempotency_key = '{key}'"
            ));
        };
        set("a2", "state = 'running', next_run_at = NULL");
        set("a2", "state = 'pending', next_run_at = 200");
        set("a1", "state = 'running', next_run_at = NULL");
        set("a1", "state = 'success'");
        set("b1", "state = 'canceled', next_run_at = NULL");
        set("b1", "state = 'pending', next_run_at = 1");
        run("DELETE FROM tasks WHERE idempotency_key = 'a1'");
        set("a2", "state = 'canceled', next_run_at = NULL");
        run("DELETE FROM tasks WHERE idempotency_key = 'a2'");
        assert_eq!(kept(), [("b:80".to_owned(), 1, 0, Some(1))]);
        // A destination whose earliest due time moved later left the ready
        // set; one whose time only came earlier kept its place.
        let ready: Vec<String> = conn
            .prepare("SELECT destination FROM destination_tasks WHERE ready = 1")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(ready.is_empty(), "{ready:?}");
    }

    #[test]
    fn counting_states_reads_the_counts_tables_not_the_tasks() {
        let conn = fresh();
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

    /// The counts (finished states in `state_counts` since step 17, pending
    /// and running from `destination_tasks`) equal a recount after inserts
    /// in every state, every change from one state to another (and to the
    /// same state), writes that leave the state alone, and deletes of one
    /// task in every state and of many at once (retention, bulk).
    #[test]
    fn the_counts_follow_every_insert_state_change_and_delete() {
        let conn = fresh();
        let mut steps: Vec<(String, String)> = Vec::new();
        for state in State::ALL {
            for destination in ["a:80", "b:80"] {
                let key = format!("{}@{destination}", state.as_str());
                steps.push((format!("insert {key}"), insert_in(&key, state, destination)));
            }
        }
        for (i, from) in State::ALL.into_iter().enumerate() {
            for to in State::ALL {
                let key = format!("{}>{}", from.as_str(), to.as_str());
                let destination = ["a:80", "b:80", ""][i % 3];
                steps.push((format!("insert {key}"), insert_in(&key, from, destination)));
                steps.push((format!("move {key}"), move_to(&key, to)));
            }
        }
        steps.push((
            "a write that leaves the state alone".into(),
            "UPDATE tasks SET attempt = attempt + 1, updated_at = 1".into(),
        ));
        steps.push((
            "a state set to itself by every row".into(),
            "UPDATE tasks SET state = state".into(),
        ));
        for state in State::ALL {
            let key = format!("{}@a:80", state.as_str());
            steps.push((
                format!("delete {key}"),
                format!("DELETE FROM tasks WHERE idempotency_key = '{key}'"),
            ));
        }
        for state in ["success", "failed", "canceled"] {
            steps.push((
                format!("a prune of {state}"),
                format!("DELETE FROM tasks WHERE state = '{state}'"),
            ));
        }
        steps.push(("a delete of the rest".into(), "DELETE FROM tasks".into()));
        for (what, sql) in &steps {
            conn.execute_batch(sql).unwrap();
            check_counts(&conn, what);
        }
        // Nothing left, and no row stands for pending or running.
        let rows: Vec<(String, i64)> = conn
            .prepare("SELECT state, n FROM state_counts ORDER BY state")
            .unwrap()
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let zero = |s: &str| (s.to_owned(), 0);
        assert_eq!(rows, [zero("canceled"), zero("failed"), zero("success")]);
    }

    /// A file a build at step 16 wrote, with tasks in every state (their
    /// counts kept by step 3's triggers, pending and running rows
    /// included), upgraded to step 17: the counts read exact, the pending
    /// and running rows of `state_counts` are gone, and they stay exact
    /// through the new triggers.
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
        let steps = [
            ("a claim", move_to("old-pending-1", State::Running)),
            ("a completion", move_to("old-running-0", State::Success)),
            ("a retry", move_to("old-failed-0", State::Pending)),
            ("a cancel", move_to("old-pending-0", State::Canceled)),
            (
                "a delete",
                "DELETE FROM tasks WHERE idempotency_key = 'old-canceled-3'".to_owned(),
            ),
            (
                "a new task",
                insert_in("new-pending", State::Pending, "c:80"),
            ),
        ];
        for (what, sql) in &steps {
            conn.execute_batch(sql).unwrap();
            check_counts(&conn, what);
        }
    }

    #[test]
    fn the_state_column_takes_exactly_the_model_s_state_names() {
        let conn = fresh();
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
        let conn = fresh();
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
