//! The one place the PostgreSQL layout is written down, and how a schema is
//! judged and brought to it.
//!
//! The layout is the list [`MIGRATIONS`]: step `k` takes a schema from
//! version `k` to `k + 1`, recorded in the table `taskcenter_schema`. All
//! steps a schema lacks run in one transaction that first takes an advisory
//! lock, so two nodes starting together migrate once: the second waits for
//! the first, then finds the schema current. A change to the layout is a new
//! step at the end, never an edit of an old one.

use deadpool_postgres::Client;

use crate::error::OpenError;

/// The name the version table records, so that a table that merely happens
/// to be called `taskcenter_schema` is told apart from ours.
pub(crate) const APPLICATION: &str = "taskcenter";

/// The advisory lock's first key ("TCst", as SQLite's application_id); the
/// second is the schema's name hashed, so schemas migrate independently.
const LOCK_KEY: i32 = 0x5443_7374;

/// Step 0 → 1: the tables, the counters and the clock function.
///
/// - `pos` is a task's listing position: the id of the transaction that
///   inserted it (one task per transaction). A listing only shows positions
///   below the oldest transaction still running, so no row can later appear
///   behind a cursor already handed out (see `reads::list`).
/// - Times are milliseconds since the Unix epoch, like the model's
///   `Timestamp`; `tc_now_ms(caller)` is the caller's time if given, else the
///   database's `now()` (see `PgClock`).
/// - `task_counts` keeps per-state counts in the same transaction as each
///   change (statement triggers over the transition tables), sharded by
///   backend, so `count_by_state` reads at most 5 × 64 rows whatever the
///   number of tasks. Each statement adds in state order, so two
///   transactions never wait on each other's counters in a cycle.
const V1_TABLES: &str = r#"
CREATE TABLE taskcenter_schema (
    application text NOT NULL,
    version     integer NOT NULL
);

CREATE TABLE tasks (
    pos                 bigint  PRIMARY KEY DEFAULT (pg_current_xact_id()::text::bigint),
    id                  bytea   NOT NULL UNIQUE CHECK (length(id) = 16),
    idempotency_key     text    NOT NULL UNIQUE,
    state               text    NOT NULL
        CHECK (state IN ('pending', 'running', 'success', 'failed', 'canceled')),
    url                 text    NOT NULL,
    body                bytea   NOT NULL,
    max_attempts        integer NOT NULL CHECK (max_attempts >= 1),
    timeout_ns          bigint  NOT NULL CHECK (timeout_ns >= 1),
    attempt             integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    attempts_before_retry integer NOT NULL DEFAULT 0 CHECK (attempts_before_retry >= 0),
    http_status         integer,
    result              bytea,
    result_content_type text,
    error               text,
    created_at          bigint  NOT NULL,
    updated_at          bigint  NOT NULL,
    started_at          bigint,
    finished_at         bigint,
    next_run_at         bigint,
    lease_until         bigint
);

CREATE TABLE attempts (
    seq         bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id     bytea   NOT NULL REFERENCES tasks (id),
    n           integer NOT NULL CHECK (n >= 1),
    started_at  bigint  NOT NULL,
    finished_at bigint,
    http_status integer,
    error       text,
    duration_ms bigint
);

CREATE INDEX attempts_by_task ON attempts (task_id, seq);
CREATE INDEX tasks_due ON tasks (next_run_at, pos) WHERE state = 'pending';
CREATE INDEX tasks_leased ON tasks (lease_until) WHERE state = 'running';
CREATE INDEX tasks_by_state ON tasks (state, pos);

CREATE FUNCTION tc_now_ms(caller bigint) RETURNS bigint
    LANGUAGE sql STABLE
    AS $$ SELECT coalesce(caller, floor(extract(epoch FROM now()) * 1000)::bigint) $$;

CREATE TABLE task_counts (
    state text    NOT NULL,
    shard integer NOT NULL,
    n     bigint  NOT NULL,
    PRIMARY KEY (state, shard)
);

CREATE FUNCTION tc_count_states() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO task_counts AS c (state, shard, n)
            SELECT state, pg_backend_pid() % 64, count(*) FROM new_rows
            GROUP BY state ORDER BY state
            ON CONFLICT (state, shard) DO UPDATE SET n = c.n + excluded.n;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO task_counts AS c (state, shard, n)
            SELECT state, pg_backend_pid() % 64, sum(d) FROM (
                SELECT state, 1 AS d FROM new_rows
                UNION ALL
                SELECT state, -1 AS d FROM old_rows
            ) moved
            GROUP BY state HAVING sum(d) <> 0 ORDER BY state
            ON CONFLICT (state, shard) DO UPDATE SET n = c.n + excluded.n;
    ELSE
        INSERT INTO task_counts AS c (state, shard, n)
            SELECT state, pg_backend_pid() % 64, -count(*) FROM old_rows
            GROUP BY state ORDER BY state
            ON CONFLICT (state, shard) DO UPDATE SET n = c.n + excluded.n;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_count_insert AFTER INSERT ON tasks
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION tc_count_states();
CREATE TRIGGER tasks_count_update AFTER UPDATE ON tasks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION tc_count_states();
CREATE TRIGGER tasks_count_delete AFTER DELETE ON tasks
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION tc_count_states();
"#;

/// Step 1 → 2: when a task was asked to run first (`run_at` or `delay_ms`
/// at submit), kept as asked because it is part of the idempotency payload.
/// At most one of the two is set.
const V2_SCHEDULE: &str = "
ALTER TABLE tasks ADD COLUMN schedule_at bigint;
ALTER TABLE tasks ADD COLUMN schedule_delay_ms bigint CHECK (schedule_delay_ms >= 0);
ALTER TABLE tasks ADD CHECK (schedule_at IS NULL OR schedule_delay_ms IS NULL);
";

/// Step 2 → 3: a batch submit inserts up to 1000 tasks in one transaction,
/// so a position is the inserting transaction's id times 65536 plus a
/// number within it. Positions stay ordered by transaction (older rows'
/// plain ids are all below the new ones), and a listing's horizon is the
/// oldest running transaction's first position (see `ops::list`).
const V3_POSITIONS_IN_XACT: &str = "
CREATE SEQUENCE tasks_pos_in_xact;
ALTER TABLE tasks ALTER COLUMN pos SET DEFAULT
    (pg_current_xact_id()::text::bigint * 65536 + nextval('tasks_pos_in_xact') % 65536);
";

/// Step 3 → 4: the list and bulk filters' indexes (see `tc_model::store::
/// Driving`). Partial: a task that never failed has no error to index.
const V4_FILTER_INDEXES: &str = "
CREATE INDEX tasks_by_error ON tasks (error, pos) WHERE error IS NOT NULL;
";

/// Step 4 → 5: a task's destination (`host:port` of its url, lower-cased,
/// the scheme's port when none is written) as a column, for the
/// `destination` filter's index; rows written before are filled from their
/// url here (urls are validated absolute http(s) urls; userinfo is dropped,
/// as `tc_model::destination_of` does).
const V5_DESTINATION: &str = r"
ALTER TABLE tasks ADD COLUMN destination text NOT NULL DEFAULT '';
UPDATE tasks SET destination = (
    SELECT CASE
        WHEN a ~ '(:[0-9]+)$' THEN a
        WHEN lower(url) LIKE 'https:%' THEN a || ':443'
        ELSE a || ':80'
    END
    FROM (SELECT lower(substring(url from '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/?#]*@)?([^/?#]+)')) AS a) AS parts
);
CREATE INDEX tasks_by_destination ON tasks (destination, pos);
";

/// Step 5 → 6: destination settings, and the pending tasks by destination
/// in due order, which a claim walks to rotate over the destinations with
/// due tasks (one index seek per destination, however deep its backlog). A
/// claim that must count a capped destination's running tasks locks its
/// settings row first, so claims on several nodes cannot together exceed
/// the cap.
const V6_DESTINATIONS: &str = "
CREATE TABLE destinations (
    destination   text    PRIMARY KEY,
    max_in_flight integer CHECK (max_in_flight BETWEEN 1 AND 10000),
    rate_per_s    double precision CHECK (rate_per_s > 0),
    burst         integer CHECK (burst >= 1),
    paused        boolean NOT NULL DEFAULT false,
    updated_at    bigint  NOT NULL
);
CREATE INDEX tasks_due_by_destination ON tasks (destination, next_run_at, pos)
    WHERE state = 'pending';
CREATE INDEX tasks_running_by_destination ON tasks (destination) WHERE state = 'running';
";

/// Step 6 → 7: what a call sends beyond its url and body (issue: outbound
/// calls): a task's method (`POST` for every task written before; a
/// constant default, so no row is rewritten) and its own headers; a
/// destination's default headers and signing secrets. The header columns
/// hold `tc_model::Headers::to_stored` (a JSON object, kept as text so both
/// stores read one form), the secrets
/// `tc_model::signing::SigningSecrets::to_stored`; NULL for none.
const V7_OUTBOUND: &str = "
ALTER TABLE tasks ADD COLUMN method text NOT NULL DEFAULT 'POST'
    CHECK (method IN ('GET', 'POST', 'PUT', 'PATCH', 'DELETE'));
ALTER TABLE tasks ADD COLUMN headers text;
ALTER TABLE destinations ADD COLUMN headers text;
ALTER TABLE destinations ADD COLUMN signing_secrets text;
";

/// Every step, in order: `MIGRATIONS[k]` takes version k to k + 1.
pub(crate) const MIGRATIONS: &[&str] = &[
    V1_TABLES,
    V2_SCHEDULE,
    V3_POSITIONS_IN_XACT,
    V4_FILTER_INDEXES,
    V5_DESTINATION,
    V6_DESTINATIONS,
    V7_OUTBOUND,
];

/// The version this build writes and reads.
pub(crate) const CURRENT_VERSION: i32 = MIGRATIONS.len() as i32;

/// What a schema is, judged without writing to it.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    /// No tables: ours to set up.
    Empty,
    /// Ours, at this version.
    Ours(i32),
}

/// Brings the connection's schema (its `current_schema()`) to
/// [`CURRENT_VERSION`], or refuses a foreign or newer one untouched.
pub(crate) async fn migrate(client: &mut Client, target: &str) -> Result<(), OpenError> {
    let fail = |doing: &'static str| {
        let target = target.to_owned();
        move |e: tokio_postgres::Error| OpenError::Postgres {
            target,
            message: format!("{doing}: {}", crate::error::describe(&e)),
        }
    };
    let tx = client.transaction().await.map_err(fail("begin"))?;
    // Held until COMMIT or ROLLBACK: a second node starting now waits here,
    // then judges the schema the first one left.
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, hashtext(current_schema()))",
        &[&LOCK_KEY],
    )
    .await
    .map_err(fail("take the migration lock"))?;
    let schema: String = tx
        .query_one("SELECT current_schema()", &[])
        .await
        .map_err(fail("read current_schema"))?
        .get(0);
    let from = match inspect(&tx, target, &schema).await? {
        Found::Empty => 0,
        Found::Ours(version) => version,
    };
    if from == CURRENT_VERSION {
        return tx.commit().await.map_err(fail("commit"));
    }
    for (k, step) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(from).unwrap_or(0))
    {
        tx.batch_execute(step)
            .await
            .map_err(|e| OpenError::Postgres {
                target: target.to_owned(),
                message: format!(
                    "migration step {k} -> {}: {}",
                    k + 1,
                    crate::error::describe(&e)
                ),
            })?;
    }
    tx.execute("DELETE FROM taskcenter_schema", &[])
        .await
        .map_err(fail("clear the version"))?;
    tx.execute(
        "INSERT INTO taskcenter_schema (application, version) VALUES ($1, $2)",
        &[&APPLICATION, &CURRENT_VERSION],
    )
    .await
    .map_err(fail("record the version"))?;
    tx.commit().await.map_err(fail("commit"))?;
    tracing::info!(
        database = %target,
        schema = %schema,
        from,
        to = CURRENT_VERSION,
        "store_schema_migrated"
    );
    Ok(())
}

/// Reads the version table and the table list of `schema`; writes nothing.
async fn inspect(
    tx: &deadpool_postgres::Transaction<'_>,
    target: &str,
    schema: &str,
) -> Result<Found, OpenError> {
    let fail = |e: tokio_postgres::Error| OpenError::Postgres {
        target: target.to_owned(),
        message: format!("read the schema: {}", crate::error::describe(&e)),
    };
    let tables: Vec<String> = tx
        .query(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = $1 ORDER BY table_name",
            &[&schema],
        )
        .await
        .map_err(fail)?
        .iter()
        .map(|row| row.get(0))
        .collect();
    if tables.is_empty() {
        return Ok(Found::Empty);
    }
    let foreign = |version: Option<i32>| OpenError::ForeignSchema {
        target: target.to_owned(),
        schema: schema.to_owned(),
        version,
        tables: tables
            .iter()
            .take(8)
            .cloned()
            .collect::<Vec<_>>()
            .join(", "),
    };
    if !tables.iter().any(|t| t == "taskcenter_schema") {
        return Err(foreign(None));
    }
    let rows = tx
        .query("SELECT application, version FROM taskcenter_schema", &[])
        .await
        .map_err(|_| foreign(None))?;
    let [row] = rows.as_slice() else {
        return Err(foreign(None));
    };
    let application: String = row.try_get(0).map_err(|_| foreign(None))?;
    let version: i32 = row.try_get(1).map_err(|_| foreign(None))?;
    if application != APPLICATION {
        return Err(foreign(Some(version)));
    }
    if version > CURRENT_VERSION {
        return Err(OpenError::NewerSchema {
            target: target.to_owned(),
            schema: schema.to_owned(),
            found: version,
            known: CURRENT_VERSION,
        });
    }
    Ok(Found::Ours(version))
}
