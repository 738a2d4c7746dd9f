//! Steps 0 → 1 to 12 → 13: the tables, counters and clock function, up to
//! callbacks and schedules. A step is never edited once it has shipped.

use super::Backfill;

/// Step 0 → 1: the tables, the counters and the clock function.
///
/// - `pos` is a task's listing position: the id of the transaction that
///   inserted it (one task per transaction; step 3 adds a number within it,
///   step 8 says which transactions a listing waits for).
/// - Times are milliseconds since the Unix epoch, like the model's
///   `Timestamp`; `tc_now_ms(caller)` is the caller's time if given, else the
///   database's `now()` (see `PgClock`).
/// - `task_counts` keeps per-state counts in the same transaction as each
///   change (statement triggers over the transition tables), sharded by
///   backend, so `count_by_state` reads at most 5 × 64 rows whatever the
///   number of tasks. Each statement adds in state order, so two
///   transactions never wait on each other's counters in a cycle.
pub(crate) const V1_TABLES: &str = r#"
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
pub(crate) const V2_SCHEDULE: &str = "
ALTER TABLE tasks ADD COLUMN schedule_at bigint;
ALTER TABLE tasks ADD COLUMN schedule_delay_ms bigint CHECK (schedule_delay_ms >= 0);
ALTER TABLE tasks ADD CHECK (schedule_at IS NULL OR schedule_delay_ms IS NULL);
";

/// Step 2 → 3: a batch submit inserts up to 1000 tasks in one transaction,
/// so a position is the inserting transaction's id times 65536 plus a
/// number within it. Positions stay ordered by transaction (older rows'
/// plain ids are all below the new ones); a listing's horizon is the first
/// position of the oldest transaction that may still add rows (step 8).
pub(crate) const V3_POSITIONS_IN_XACT: &str = "
CREATE SEQUENCE tasks_pos_in_xact;
ALTER TABLE tasks ALTER COLUMN pos SET DEFAULT
    (pg_current_xact_id()::text::bigint * 65536 + nextval('tasks_pos_in_xact') % 65536);
";

/// Step 3 → 4: the list and bulk filters' indexes (see `tc_model::store::
/// Driving`). Partial: a task that never failed has no error to index.
pub(crate) const V4_FILTER_INDEXES: &str = "
CREATE INDEX tasks_by_error ON tasks (error, pos) WHERE error IS NOT NULL;
";

/// Step 4 → 5: a task's destination (`host:port` of its url, lower-cased,
/// the scheme's port when none is written) as a column, for the
/// `destination` filter's index. Urls are validated absolute http(s) urls;
/// userinfo is dropped, as `tc_model::destination_of` does.
///
/// The column is added with a constant default (no rewrite; the table lock
/// is held for an instant); rows written before are filled by the backfill
/// [`V5_FILL_DESTINATION`], in batches, each its own transaction, while
/// older nodes keep serving. Rows such older nodes insert meanwhile (without
/// the column, so `''`) are filled on insert by `tasks_fill_destination`,
/// so the batches walk a fixed set of rows.
pub(crate) const V5_DESTINATION: &str = r"
ALTER TABLE tasks ADD COLUMN destination text NOT NULL DEFAULT '';
CREATE FUNCTION tc_destination_of(url text) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
SELECT CASE
        WHEN a ~ '(:[0-9]+)$' THEN a
        WHEN lower(url) LIKE 'https:%' THEN a || ':443'
        ELSE a || ':80'
    END
FROM (SELECT lower(substring(url from '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/?#]*@)?([^/?#]+)')) AS a) AS parts
$$;
CREATE FUNCTION tc_fill_destination() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    NEW.destination := tc_destination_of(NEW.url);
    RETURN NEW;
END
$$;
CREATE TRIGGER tasks_fill_destination BEFORE INSERT ON tasks
    FOR EACH ROW WHEN (NEW.destination = '') EXECUTE FUNCTION tc_fill_destination();
";

/// Step 5's backfill: one batch fills the rows after position `$1` up to
/// `$3`, at most `$2` of them, and answers the last position it covered;
/// then the index.
pub(crate) const V5_FILL_DESTINATION: Backfill = Backfill {
    until: "SELECT max(pos) FROM tasks",
    batch: "
WITH batch AS (
    SELECT pos FROM tasks WHERE pos > $1 AND pos <= $3 ORDER BY pos LIMIT $2
), filled AS (
    UPDATE tasks t SET destination = tc_destination_of(t.url)
    FROM batch WHERE t.pos = batch.pos AND t.destination = ''
)
SELECT max(pos) FROM batch
",
    finish: "CREATE INDEX tasks_by_destination ON tasks (destination, pos);",
};

/// Step 5 → 6: destination settings, and the pending tasks by destination
/// in due order, which a claim walks to rotate over the destinations with
/// due tasks (one index seek per destination, however deep its backlog). A
/// claim that must count a capped destination's running tasks locks its
/// settings row first, so claims on several nodes cannot together exceed
/// the cap.
pub(crate) const V6_DESTINATIONS: &str = "
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
pub(crate) const V7_OUTBOUND: &str = "
ALTER TABLE tasks ADD COLUMN method text NOT NULL DEFAULT 'POST'
    CHECK (method IN ('GET', 'POST', 'PUT', 'PATCH', 'DELETE'));
ALTER TABLE tasks ADD COLUMN headers text;
ALTER TABLE destinations ADD COLUMN headers text;
ALTER TABLE destinations ADD COLUMN signing_secrets text;
";

/// Step 7 → 8: which transactions a listing waits for.
///
/// A position is still the inserting transaction's id times 65536 plus a
/// number within it, and a transaction with a lower id can commit after one
/// with a higher id. A listing must not hand out a cursor past a position
/// that may still appear; before this step it stopped at the snapshot's
/// `xmin`, the oldest transaction running anywhere in the cluster, so one
/// idle transaction in another database held every listing back.
///
/// Now every transaction that inserts tasks says so: `tc_task_pos`, which
/// computes each new row's position (`within` the transaction: given by a
/// batch, else drawn from the sequence), first takes a shared advisory lock
/// (the *insert marker*, keyed by the schema) and only then the
/// transaction's id, and it refuses a transaction that already had an id,
/// so a transaction's id is never older than its marker. `tc_list_horizon`
/// then needs only the transactions of its snapshot that may hold inserted
/// tasks it cannot see: those still running with the marker, and those that
/// ended after the snapshot (pg_locks no longer tells what they were). A
/// running transaction without the marker got its id before it could take
/// one, so it will never insert a task; it is passed over, in any database.
/// The horizon is the lowest position such a transaction may hold, or the
/// snapshot's `xmax` when there is none.
pub(crate) const V8_INSERT_MARKER: &str = r"
CREATE FUNCTION tc_task_pos(within bigint) RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    AS $$
BEGIN
    IF current_setting('taskcenter.inserts_tasks', true) IS DISTINCT FROM 'on' THEN
        IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
            RAISE EXCEPTION 'tasks must be inserted by the first write of a transaction'
                USING HINT = 'a listing passes over transactions that wrote before they took the insert marker';
        END IF;
        PERFORM pg_advisory_xact_lock_shared(1413704046, hashtext(current_schema()));
        PERFORM set_config('taskcenter.inserts_tasks', 'on', true);
    END IF;
    -- nextval only now: it may take the transaction's id (to log the
    -- sequence), which must come after the marker.
    RETURN pg_current_xact_id()::text::bigint * 65536
        + coalesce(within, nextval('tasks_pos_in_xact') % 65536);
END
$$;
ALTER TABLE tasks ALTER COLUMN pos SET DEFAULT tc_task_pos(NULL);

CREATE FUNCTION tc_list_horizon() RETURNS bigint
    LANGUAGE sql STABLE
    AS $$
WITH snap AS (
    SELECT pg_current_snapshot() AS s
), held AS MATERIALIZED (
    SELECT locktype, virtualtransaction, transactionid::text::bigint AS xid, mode, granted,
           database, classid, objid, objsubid
    FROM pg_locks WHERE locktype IN ('transactionid', 'advisory')
), inserting AS (
    SELECT virtualtransaction FROM held
    WHERE locktype = 'advisory' AND objsubid = 2
      AND classid = 1413704046::oid AND objid = hashtext(current_schema())::oid
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
), bystanders AS (
    SELECT xid FROM held
    WHERE locktype = 'transactionid' AND mode = 'ExclusiveLock' AND granted
      AND virtualtransaction NOT IN (SELECT virtualtransaction FROM inserting)
)
SELECT least(
    pg_snapshot_xmax(s)::text::bigint,
    (SELECT min(x::text::bigint) FROM pg_snapshot_xip(s) AS x
     WHERE x::text::bigint % 4294967296 NOT IN (SELECT xid FROM bystanders))
) * 65536
FROM snap
$$;
";

/// Step 8 → 9: state counts without a row two transactions fight over.
///
/// Before, statement triggers added into counter rows sharded by backend:
/// a bulk chunk held its shard's rows until it committed, so every state
/// change on that shard waited for the whole chunk, or deadlocked with it.
/// Now the triggers only append rows to `task_count_deltas` (no index, no
/// key: an insert never waits), and one node at a time folds them into
/// `task_count_totals` (`counts::fold_counts`, under a try-lock), which only
/// that folding writes. A count reads the totals plus the deltas not yet
/// folded, in one snapshot.
///
/// Totals are kept per state (`destination = ''`) and, for pending and
/// running tasks, per state and destination (a destination's row goes
/// when it reaches 0), so a destination's pending and running counts cost
/// what changed, not what is stored. Carried over from `task_counts` (the
/// terminal states) and counted once from the tasks (pending and running,
/// by destination), with writers held off (`SHARE` lock) for that count.
pub(crate) const V9_COUNT_DELTAS: &str = r"
LOCK TABLE tasks IN SHARE MODE;
CREATE TABLE task_count_deltas (
    state       text   NOT NULL,
    destination text,
    n           bigint NOT NULL
);
CREATE TABLE task_count_totals (
    state       text   NOT NULL,
    destination text   NOT NULL,
    n           bigint NOT NULL,
    PRIMARY KEY (state, destination)
);
INSERT INTO task_count_totals (state, destination, n)
    SELECT state, '', sum(n) FROM task_counts
    WHERE state NOT IN ('pending', 'running') GROUP BY state HAVING sum(n) <> 0;
INSERT INTO task_count_totals (state, destination, n)
    SELECT state, '', count(*) FROM tasks
    WHERE state IN ('pending', 'running') GROUP BY state;
INSERT INTO task_count_totals (state, destination, n)
    SELECT state, destination, count(*) FROM tasks
    WHERE state IN ('pending', 'running') AND destination <> '' GROUP BY state, destination;
DROP TABLE task_counts;

CREATE OR REPLACE FUNCTION tc_count_states() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO task_count_deltas (state, destination, n)
            SELECT state, CASE WHEN state IN ('pending', 'running') THEN destination END, count(*)
            FROM new_rows GROUP BY 1, 2;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO task_count_deltas (state, destination, n)
            SELECT state, place, sum(d) FROM (
                SELECT state, CASE WHEN state IN ('pending', 'running') THEN destination END AS place,
                       1 AS d
                FROM new_rows
                UNION ALL
                SELECT state, CASE WHEN state IN ('pending', 'running') THEN destination END, -1
                FROM old_rows
            ) moved
            GROUP BY 1, 2 HAVING sum(d) <> 0;
    ELSE
        INSERT INTO task_count_deltas (state, destination, n)
            SELECT state, CASE WHEN state IN ('pending', 'running') THEN destination END, -count(*)
            FROM old_rows GROUP BY 1, 2;
    END IF;
    RETURN NULL;
END
$$;
";

/// Step 9 → 10: the W3C trace context a task's calls belong to:
/// `tc_model::TraceContext::to_stored` (the `traceparent`, then a line with
/// the `tracestate`); NULL for tasks written before, which are called
/// without one. Nullable with no default: no row is rewritten, no backfill.
pub(crate) const V10_TRACE_CONTEXT: &str = "
ALTER TABLE tasks ADD COLUMN trace_context text;
";

/// Step 10 → 11: the destinations with pending tasks by their earliest due
/// time, so that a claim meets only destinations that
/// have due tasks, however many others wait.
///
/// State changes never wait for it: a statement trigger appends, for each
/// destination a statement made tasks pending for, its earliest due time
/// to `due_marks` (no key, no index: an insert never waits). A claim folds
/// the marks into `pending_destinations` (one destination a row) under a
/// try-lock (one claim at a time; the others skip it), marks `ready` the
/// rows whose time came (through `pending_destinations_waiting`, rows
/// another claim holds skipped), walks the ready ones in name order
/// (`pending_destinations_ready`, the rotation), and afterwards sets the
/// earliest due time again of each destination it took tasks from (a row
/// goes when its destination has no pending task left; rows another claim
/// holds skipped: that claim sets them). A row can only be too early
/// (its tasks went elsewhere), never too late: every change that makes a
/// task pending leaves a mark. Counted once from the tasks, with writers
/// held off (`SHARE` lock) for that count.
pub(crate) const V11_PENDING_DESTINATIONS: &str = r"
LOCK TABLE tasks IN SHARE MODE;
CREATE TABLE due_marks (
    destination text   NOT NULL,
    due_at      bigint NOT NULL
);
CREATE TABLE pending_destinations (
    destination text    PRIMARY KEY,
    next_due    bigint  NOT NULL,
    ready       boolean NOT NULL DEFAULT false
);
CREATE INDEX pending_destinations_waiting ON pending_destinations (next_due) WHERE NOT ready;
CREATE INDEX pending_destinations_ready ON pending_destinations (destination) WHERE ready;
INSERT INTO pending_destinations (destination, next_due)
    SELECT destination, min(next_run_at) FROM tasks
    WHERE state = 'pending' AND next_run_at IS NOT NULL GROUP BY destination;

CREATE OR REPLACE FUNCTION tc_mark_due() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO due_marks (destination, due_at)
        SELECT destination, min(next_run_at) FROM new_rows
        WHERE state = 'pending' AND next_run_at IS NOT NULL GROUP BY destination;
    RETURN NULL;
END
$$;
CREATE TRIGGER tasks_mark_due_insert AFTER INSERT ON tasks
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tc_mark_due();
CREATE TRIGGER tasks_mark_due_update AFTER UPDATE ON tasks
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tc_mark_due();
";

/// Step 11 → 12: callbacks. A task's `callback_url` and
/// `callback_on` (`tc_model::callback::CallbackOn::to_stored`, both NULL
/// for none); a callback task's `callback_of` (its parent's id); the
/// callback made at a task's latest end (`callback_task_id`) and how many
/// times it ended (`ends`, the n of the n-th callback's key). Nullable
/// columns and a constant default: no row is rewritten, no backfill.
pub(crate) const V12_CALLBACKS: &str = "
ALTER TABLE tasks ADD COLUMN callback_url text;
ALTER TABLE tasks ADD COLUMN callback_on text;
ALTER TABLE tasks ADD COLUMN callback_of bytea;
ALTER TABLE tasks ADD COLUMN callback_task_id bytea;
ALTER TABLE tasks ADD COLUMN ends integer NOT NULL DEFAULT 0;
";

/// Step 12 → 13: schedules: one row per schedule, its task
/// template in tc-model's text form, its firing record (`last_run_at`
/// only moves forward). A new, small table: no backfill.
pub(crate) const V13_SCHEDULES: &str = "
CREATE TABLE schedules (
    name         text    PRIMARY KEY,
    cron         text    NOT NULL,
    timezone     text    NOT NULL,
    task         text    NOT NULL,
    paused       boolean NOT NULL,
    overlap      text    NOT NULL CHECK (overlap IN ('allow', 'skip')),
    catch_up     text    NOT NULL CHECK (catch_up IN ('none', 'latest')),
    last_run_at  bigint,
    last_task_id bytea   CHECK (last_task_id IS NULL OR length(last_task_id) = 16),
    created_at   bigint  NOT NULL,
    updated_at   bigint  NOT NULL
);
";
