//! Steps 0 → 1 to 14 → 15: the tables, their indexes and triggers up to
//! the destinations' counts, callbacks and schedules.

use rusqlite::Connection;

/// Step 0 → 1: the tables.
///
/// `seq` is the store-assigned position: one writer assigns it, so seq order
/// is commit order and keyset pagination over it never skips a row committed
/// later. STRICT keeps a bug from storing text where a number belongs.
pub(crate) const V1_TABLES: &str = "
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
pub(crate) const V2_INDEXES: &str = "
CREATE INDEX tasks_due ON tasks (next_run_at, seq) WHERE state = 'pending';
CREATE INDEX tasks_leased ON tasks (lease_until) WHERE state = 'running';
CREATE INDEX tasks_by_state ON tasks (state, seq);
";

/// Step 2 → 3: how many tasks are in each state, kept by triggers in the
/// same transaction as every insert, state change and delete, so that
/// `/metrics` reads five rows instead of counting the table (O(1) in the
/// number of tasks). The step counts the existing rows once.
pub(crate) const V3_STATE_COUNTS: &str = "
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
pub(crate) const V4_RETRY_BUDGET: &str = "
ALTER TABLE tasks ADD COLUMN attempts_before_retry INTEGER NOT NULL DEFAULT 0
    CHECK (attempts_before_retry >= 0);
";

/// Step 4 → 5: when a task was asked to run first (`run_at` or `delay_ms`
/// at submit), kept as asked because it is part of the idempotency
/// payload. At most one of the two is set.
pub(crate) const V5_SCHEDULE: &str = "
ALTER TABLE tasks ADD COLUMN schedule_at INTEGER;
ALTER TABLE tasks ADD COLUMN schedule_delay_ms INTEGER CHECK (schedule_delay_ms >= 0);
";

/// Step 5 → 6: `seq` is a listing cursor, and SQLite hands a deleted
/// last row's rowid to the next insert. Deletes (by hand, by retention)
/// raise this floor to the highest seq they removed; submits take a seq
/// above both the table's and the floor, so no position is ever reused.
pub(crate) const V6_SEQ_FLOOR: &str = "
CREATE TABLE seq_floor (n INTEGER NOT NULL) STRICT;
INSERT INTO seq_floor (n) SELECT coalesce(max(seq), 0) FROM tasks;
CREATE TRIGGER seq_floor_delete AFTER DELETE ON tasks BEGIN
    UPDATE seq_floor SET n = max(n, OLD.seq);
END;
";

/// Step 6 → 7: the list and bulk filters' indexes (see `tc_model::store::
/// Driving`). Partial: a task that never failed has no error to index.
pub(crate) const V7_FILTER_INDEXES: &str = "
CREATE INDEX tasks_by_error ON tasks (error, seq) WHERE error IS NOT NULL;
";

/// Step 7 → 8: a task's destination (`host:port` of its url) as a column,
/// for the `destination` filter's index. Rows written before are filled in
/// by [`backfill_destinations`] in the same transaction (the host and port
/// of a url are not something to parse in SQL).
pub(crate) const V8_DESTINATION: &str = "
ALTER TABLE tasks ADD COLUMN destination TEXT NOT NULL DEFAULT '';
CREATE INDEX tasks_by_destination ON tasks (destination, seq);
";

/// The step after which rows have a destination column to fill.
pub(crate) const DESTINATION_STEP: i64 = 8;

/// Fills the destination of every row that has none (rows from before
/// [`V8_DESTINATION`]), from its url.
pub(crate) fn backfill_destinations(tx: &Connection) -> rusqlite::Result<usize> {
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
pub(crate) const V9_DESTINATIONS: &str = "
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
pub(crate) const V10_OUTBOUND: &str = "
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
pub(crate) const V11_TRACE_CONTEXT: &str = "
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
pub(crate) const V12_DESTINATION_TASKS: &str = "
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
pub(crate) const DESTINATION_TASKS_STEP: i64 = 12;

/// Counts the pending and running tasks of every destination once, for a
/// file older than [`V12_DESTINATION_TASKS`] (after the destinations of
/// older rows were filled in).
pub(crate) fn fill_destination_tasks(tx: &Connection) -> rusqlite::Result<usize> {
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
pub(crate) const V13_CALLBACKS: &str = "
ALTER TABLE tasks ADD COLUMN callback_url TEXT;
ALTER TABLE tasks ADD COLUMN callback_on TEXT;
ALTER TABLE tasks ADD COLUMN callback_of BLOB CHECK (length(callback_of) = 16);
ALTER TABLE tasks ADD COLUMN callback_task_id BLOB CHECK (length(callback_task_id) = 16);
ALTER TABLE tasks ADD COLUMN ends INTEGER NOT NULL DEFAULT 0 CHECK (ends >= 0);
";

/// Step 13 → 14: schedules: one row per schedule, its task
/// template in tc-model's text form, its firing record (`last_run_at`
/// only moves forward). A small table read whole by every firing loop.
pub(crate) const V14_SCHEDULES: &str = "
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
pub(crate) const V15_TRIGGERS_WITHOUT_UPSERT: &str = "
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
pub(crate) const CHECKS_STEP: i64 = 15;

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
pub(crate) const REWRITTEN_CHECKS: [(&str, &str); 5] = [
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
pub(crate) fn rewrite_task_checks(tx: &Connection) -> rusqlite::Result<()> {
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
