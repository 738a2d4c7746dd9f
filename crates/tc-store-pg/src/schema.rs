//! The one place the PostgreSQL layout is written down, and how a schema is
//! judged and brought to it.
//!
//! The layout is the list [`MIGRATIONS`]: step `k` takes a schema from
//! version `k` to `k + 1`, recorded in the table `taskcenter_schema`. A
//! node migrates under a session advisory lock, so two nodes starting
//! together migrate once: the second waits for the first, then finds the
//! schema current. Each step is one transaction; a step that must fill a
//! column for every existing row does it in a [`Backfill`] after that
//! transaction, batch by batch, so nodes still on the previous version keep
//! serving. A change to the layout is a new step at the end, never an edit
//! of an old one's result.

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
/// plain ids are all below the new ones); a listing's horizon is the first
/// position of the oldest transaction that may still add rows (step 8).
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
/// `destination` filter's index. Urls are validated absolute http(s) urls;
/// userinfo is dropped, as `tc_model::destination_of` does.
///
/// The column is added with a constant default (no rewrite; the table lock
/// is held for an instant); rows written before are filled by the backfill
/// [`V5_FILL_DESTINATION`], in batches, each its own transaction, while
/// older nodes keep serving. Rows such older nodes insert meanwhile (without
/// the column, so `''`) are filled on insert by `tasks_fill_destination`,
/// so the batches walk a fixed set of rows.
const V5_DESTINATION: &str = r"
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
const V5_FILL_DESTINATION: Backfill = Backfill {
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
const V8_INSERT_MARKER: &str = r"
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
const V9_COUNT_DELTAS: &str = r"
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
const V10_TRACE_CONTEXT: &str = "
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
const V11_PENDING_DESTINATIONS: &str = r"
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
const V12_CALLBACKS: &str = "
ALTER TABLE tasks ADD COLUMN callback_url text;
ALTER TABLE tasks ADD COLUMN callback_on text;
ALTER TABLE tasks ADD COLUMN callback_of bytea;
ALTER TABLE tasks ADD COLUMN callback_task_id bytea;
ALTER TABLE tasks ADD COLUMN ends integer NOT NULL DEFAULT 0;
";

/// Step 12 → 13: schedules: one row per schedule, its task
/// template in tc-model's text form, its firing record (`last_run_at`
/// only moves forward). A new, small table: no backfill.
const V13_SCHEDULES: &str = "
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

/// Step 13 → 14: tenants.
///
/// - `tasks.tenant`: the tenant a task belongs to, `''` for none
///   (`tc_model::tenant::stored_tenant`), a constant default: no row is
///   rewritten. The idempotency key becomes unique per tenant: the unique
///   index on `(idempotency_key, tenant)` replaces the key's own (every
///   submit names it in `ON CONFLICT`). Nodes of the previous version name
///   the key alone there and fail their submits (503, retried by clients)
///   from this step until they are upgraded; their other writes go on.
/// - Partial indexes `WHERE tenant <> ''`, so tasks without a tenant cost
///   nothing more: a tenant's tasks in position order (the `tenant` filter's
///   driving index, and the check before a tenant is deleted), its
///   unfinished ones (the `max_pending` count, its counts), and its pending
///   ones by destination in due order (the claim's share between tenants;
///   tasks without a tenant are found through `tasks_due_by_destination`).
/// - `tenants` (settings as `tc_model::tenant::TenantSettings`) and
///   `api_keys` (only each key's SHA-256, unique; a tenant's keys go with
///   it). Small new tables.
const V14_TENANTS: &str = "
ALTER TABLE tasks ADD COLUMN tenant text NOT NULL DEFAULT '';
CREATE UNIQUE INDEX tasks_by_key_in_tenant ON tasks (idempotency_key, tenant);
ALTER TABLE tasks DROP CONSTRAINT tasks_idempotency_key_key;
CREATE INDEX tasks_by_tenant ON tasks (tenant, pos) WHERE tenant <> '';
CREATE INDEX tasks_unfinished_by_tenant ON tasks (tenant, state)
    WHERE tenant <> '' AND state IN ('pending', 'running');
CREATE INDEX tasks_due_by_tenant ON tasks (destination, tenant, next_run_at, pos)
    WHERE state = 'pending' AND tenant <> '';
CREATE TABLE tenants (
    name              text    PRIMARY KEY,
    weight            integer NOT NULL CHECK (weight BETWEEN 1 AND 1000),
    max_pending       bigint  CHECK (max_pending >= 1),
    submit_rate_per_s double precision CHECK (submit_rate_per_s > 0),
    submit_burst      integer CHECK (submit_burst >= 1),
    created_at        bigint  NOT NULL,
    updated_at        bigint  NOT NULL
);
CREATE TABLE api_keys (
    id           text   PRIMARY KEY,
    tenant       text   NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    hash         bytea  NOT NULL UNIQUE CHECK (length(hash) = 32),
    created_at   bigint NOT NULL,
    last_used_at bigint
);
CREATE INDEX api_keys_by_tenant ON api_keys (tenant, created_at, id);
";

/// Step 14 → 15 (a tenant's calls carry only its own
/// credentials): a tenant's own signing secrets
/// (`tc_model::signing::SigningSecrets::to_stored`), and the tenants a
/// destination lends its headers and secrets to
/// (`tc_model::outbound::SharedWith::to_stored`: names separated by a
/// space, or `*`); NULL for none. Nullable columns without a default: no
/// row is rewritten, and no destination is shared until an operator says
/// so.
const V15_TENANT_SECRETS: &str = "
ALTER TABLE tenants ADD COLUMN signing_secrets text;
ALTER TABLE destinations ADD COLUMN share_with_tenants text;
";

/// Step 15 → 16: why a schedule's latest firing created no task
/// (`tc_model::schedule::FiringError`: a url the allow-list no longer
/// admits), all three columns set or none. Nullable columns without a
/// default: no row is rewritten, the lock is held for an instant.
const V16_SCHEDULE_ERRORS: &str = "
ALTER TABLE schedules ADD COLUMN last_error_code text;
ALTER TABLE schedules ADD COLUMN last_error_message text;
ALTER TABLE schedules ADD COLUMN last_error_at bigint;
";

/// Step 16 → 17: a destination's `auth`
/// (`tc_model::auth::DestinationAuth::to_stored`, its secrets with it: the
/// one column sealing at rest wraps), NULL for none; and the server's own
/// keys by name (`jwt_key`: the PKCS#8 PEM JWTs are signed with when no
/// `--jwt-key-file` is given), inserted once by whichever node comes
/// first and shared by all.
const V17_AUTH: &str = "
ALTER TABLE destinations ADD COLUMN auth text;
CREATE TABLE server_keys (
    name  text PRIMARY KEY,
    value text NOT NULL
);
";

/// Step 17 → 18: a destination's client certificate (its PEM
/// and facts, as `ClientCert::to_stored` writes them), its key (sealed at
/// rest when the node has a key) and its own CA certificates.
const V18_CLIENT_TLS: &str = "
ALTER TABLE destinations ADD COLUMN client_cert text;
ALTER TABLE destinations ADD COLUMN client_key text;
ALTER TABLE destinations ADD COLUMN ca_certs text;
";

/// Step 18 → 19: a running task's hot writes
/// touch fewer index entries, on a live database.
///
/// - A try's history row is written once, when the try ends (the claim
///   no longer inserts an open row that its end then rewrites); a running
///   task's open try is read from the task itself (`read_ops::
///   fill_attempts`). Its foreign key goes: it locked the task's row on
///   every insert (a WAL record) and every writer checks the task first.
/// - `tasks_leased` goes: the lease alone changed for a heartbeat, so each
///   heartbeat wrote a new version of the row in every index. Recovery
///   finds running tasks through `tasks_running_by_destination` (bounded
///   by the tasks in flight) and checks their leases there.
/// - `fillfactor = 70` on `tasks` and `attempts`: room on the page for an
///   update whose indexed columns did not change (a heartbeat) to stay HOT.
///   New pages only: no rewrite.
///
/// Nodes of the previous version keep serving, mixed with this one, and
/// need no fence: their claims and completions are unchanged. A try they
/// opened (an open history row) is closed by whichever node ends it (every
/// end closes the open row when one exists, and writes the row when none
/// does), so no try is written twice. Every statement here takes its lock
/// for an instant (no rewrite, no index built), after both tables' locks
/// are taken in the order every writer takes them (`tasks`, then
/// `attempts`): taken as each statement comes, an old node's claim holding
/// `tasks` and waiting for `attempts` deadlocked with the step.
const V19_HOT_PATH: &str = "
LOCK TABLE tasks, attempts IN ACCESS EXCLUSIVE MODE;
ALTER TABLE attempts DROP CONSTRAINT IF EXISTS attempts_task_id_fkey;
DROP INDEX tasks_leased;
ALTER TABLE tasks SET (fillfactor = 70);
ALTER TABLE attempts SET (fillfactor = 70);
";

/// Step 19 → 20: topics, new and small tables: no backfill. A
/// topic is its tenant's (`''` for the admin's, as in `tasks`); a
/// subscription's `signing_secrets` are sealed at rest (tc-seal's
/// `SECRET_COLUMNS`); an event keeps its payload (a repeat is compared
/// with it, a replay sends it again); `event_tasks` is what each event
/// made, in `seq` order, `n` 0 for the publish and the replay's number
/// after. A topic's task names its topic, event and subscription
/// (`tasks.topic`, `event_id`, `subscription`: nullable columns added
/// without a rewrite; NULL for other tasks).
const V20_TOPICS: &str = "
ALTER TABLE tasks ADD COLUMN topic text;
ALTER TABLE tasks ADD COLUMN event_id text;
ALTER TABLE tasks ADD COLUMN subscription text;
CREATE TABLE topics (
    tenant          text    NOT NULL,
    name            text    NOT NULL,
    description     text    NOT NULL,
    callback_url    text,
    disable_after_s bigint  NOT NULL CHECK (disable_after_s > 0),
    created_at      bigint  NOT NULL,
    updated_at      bigint  NOT NULL,
    PRIMARY KEY (tenant, name)
);
CREATE TABLE subscriptions (
    id              text    PRIMARY KEY,
    tenant          text    NOT NULL,
    topic           text    NOT NULL,
    url             text    NOT NULL,
    event_types     text,
    headers         text,
    signing_secrets text,
    enabled         boolean NOT NULL,
    failing_since   bigint,
    disabled_reason text,
    created_at      bigint  NOT NULL,
    updated_at      bigint  NOT NULL,
    FOREIGN KEY (tenant, topic) REFERENCES topics (tenant, name)
);
CREATE INDEX subscriptions_of_topic ON subscriptions (tenant, topic, created_at);
CREATE TABLE events (
    pos               bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id                text    NOT NULL UNIQUE,
    tenant            text    NOT NULL,
    topic             text    NOT NULL,
    event_type        text    NOT NULL,
    body              bytea   NOT NULL,
    idempotency_key   text    NOT NULL,
    max_attempts      integer NOT NULL,
    timeout_ns        bigint  NOT NULL,
    schedule_at       bigint,
    schedule_delay_ms bigint,
    created_at        bigint  NOT NULL,
    UNIQUE (tenant, topic, idempotency_key)
);
CREATE INDEX events_of_topic ON events (tenant, topic, created_at);
CREATE TABLE event_tasks (
    seq          bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id     text    NOT NULL,
    subscription text    NOT NULL,
    n            integer NOT NULL CHECK (n >= 0),
    task_id      bytea   NOT NULL CHECK (length(task_id) = 16),
    UNIQUE (event_id, subscription, n)
);
";

/// Step 20 → 21: destination limits across the
/// cluster. One token bucket per rated destination (`tokens` at
/// `refilled_at`, ms), which every node's grants come from
/// (`cluster::take_tokens`), and the holds every node shares
/// (`cluster::share_holds`: until when, in ms, a breaker is open, a
/// Retry-After backoff and a rate-limit hold last). New tables only.
const V21_CLUSTER_FLOW: &str = "
CREATE TABLE destination_tokens (
    destination  text PRIMARY KEY,
    tokens       double precision NOT NULL,
    refilled_at  bigint NOT NULL
);
CREATE TABLE destination_holds (
    destination         text PRIMARY KEY,
    breaker_open_until  bigint,
    backoff_until       bigint,
    ratelimit_until     bigint
);
";

/// Step 21 → 22: a task's priority, 0 to 9 (every task
/// stored before has 0: a constant default, no rewrite; the rule a check
/// added without reading the rows, which all hold it), and the due tasks
/// of priority above 0 by destination, which a claim asks first
/// (`priority::has_prioritized`): empty unless priorities are used, so
/// tasks without one cost it nothing. Building the index reads `tasks`
/// once while writes wait.
const V22_PRIORITY: &str = "
ALTER TABLE tasks ADD COLUMN priority integer NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD CONSTRAINT tasks_priority CHECK (priority BETWEEN 0 AND 9) NOT VALID;
CREATE INDEX tasks_prioritized ON tasks (destination, next_run_at, pos)
    WHERE state = 'pending' AND priority > 0;
";

/// Step 22 → 23: a task's flow key (`''` for none, as a tenant: a
/// constant default, no rewrite) and each tenant's keys' settings with
/// their token bucket (`tokens` at `refilled_at`, the database's ms),
/// locked and charged by the claim (`flow_keys`). The due and running
/// tasks of a key are partial indexes of keyed tasks alone, empty unless
/// keys are used, so building them reads `tasks` once and tasks without a
/// key cost nothing more.
const V23_FLOW_KEYS: &str = "
ALTER TABLE tasks ADD COLUMN flow_key text NOT NULL DEFAULT '';
CREATE INDEX tasks_due_by_key ON tasks (destination, tenant, flow_key, next_run_at, pos)
    WHERE state = 'pending' AND flow_key <> '';
CREATE INDEX tasks_running_by_key ON tasks (tenant, flow_key)
    WHERE state = 'running' AND flow_key <> '';
CREATE TABLE flow_keys (
    tenant        text NOT NULL,
    key           text NOT NULL,
    max_in_flight integer,
    rate_per_s    double precision,
    burst         integer,
    tokens        double precision,
    refilled_at   bigint,
    updated_at    bigint NOT NULL,
    PRIMARY KEY (tenant, key)
);
";

/// One migration step.
pub(crate) struct Step {
    /// Run in one transaction with the version's change. Its time must not
    /// grow with the number of tasks while it holds a lock that readers or
    /// writers wait for: no rewrite of every row (see `backfill`).
    schema: &'static str,
    /// Rows the step fills in after `schema` committed, in batches.
    backfill: Option<Backfill>,
}

/// Rows a step fills in, in batches, each its own short transaction, so
/// nodes that still run the previous version keep serving; the progress is
/// recorded with each batch (`taskcenter_schema.backfill_after`), so a node
/// that stops in the middle is continued by the next one that opens.
pub(crate) struct Backfill {
    /// The last position the batches must reach, read when they start (or
    /// resume): every row the step's DDL found is at or below it, and rows
    /// inserted since are written whole (the step sees to that, e.g. with
    /// a trigger), so the batches end even while nodes keep inserting.
    until: &'static str,
    /// One batch: fills at most `$2` rows after position `$1` up to `$3`
    /// and answers the last position it covered, NULL when none was left.
    batch: &'static str,
    /// Once every batch is done, in one transaction (an index over the
    /// column just filled, built once rather than updated row by row).
    finish: &'static str,
}

const fn step(schema: &'static str) -> Step {
    Step {
        schema,
        backfill: None,
    }
}

/// Every step, in order: `MIGRATIONS[k]` takes version k to k + 1.
pub(crate) const MIGRATIONS: &[Step] = &[
    step(V1_TABLES),
    step(V2_SCHEDULE),
    step(V3_POSITIONS_IN_XACT),
    step(V4_FILTER_INDEXES),
    Step {
        schema: V5_DESTINATION,
        backfill: Some(V5_FILL_DESTINATION),
    },
    step(V6_DESTINATIONS),
    step(V7_OUTBOUND),
    step(V8_INSERT_MARKER),
    step(V9_COUNT_DELTAS),
    step(V10_TRACE_CONTEXT),
    step(V11_PENDING_DESTINATIONS),
    step(V12_CALLBACKS),
    step(V13_SCHEDULES),
    step(V14_TENANTS),
    step(V15_TENANT_SECRETS),
    step(V16_SCHEDULE_ERRORS),
    step(V17_AUTH),
    step(V18_CLIENT_TLS),
    step(V19_HOT_PATH),
    step(V20_TOPICS),
    step(V21_CLUSTER_FLOW),
    step(V22_PRIORITY),
    step(V23_FLOW_KEYS),
];

/// The version this build writes and reads.
pub(crate) const CURRENT_VERSION: i32 = MIGRATIONS.len() as i32;

/// How many rows one backfill batch fills.
const BACKFILL_BATCH: i64 = 5_000;

/// What a schema is, judged without writing to it.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    /// No tables: ours to set up.
    Empty,
    /// Ours, at this version; with the position a backfill of that
    /// version's step goes on after, when it is unfinished.
    Ours {
        version: i32,
        backfill_after: Option<i64>,
    },
}

/// Brings the connection's schema (its `current_schema()`) to
/// [`CURRENT_VERSION`], or refuses a foreign or newer one untouched.
///
/// Runs on a connection of its own, which holds a session advisory lock
/// for the whole migration: a second node starting now waits, then finds
/// the schema current. Each step is one transaction that also records its
/// version; a step's backfill follows it in batches. Nodes still on the
/// previous version keep serving meanwhile (nothing holds a table lock
/// for longer than a step's DDL or one batch).
pub(crate) async fn migrate(
    pg: &tokio_postgres::Config,
    tls: &crate::tls::Tls,
    target: &str,
    steps: &[Step],
) -> Result<(), OpenError> {
    let (mut client, connection) =
        pg.connect(tls.clone())
            .await
            .map_err(|e| OpenError::Postgres {
                target: target.to_owned(),
                message: format!("connect: {}", crate::error::describe(&e)),
            })?;
    let driver = tokio::spawn(connection);
    let migrated = migrate_on(&mut client, target, steps).await;
    // Closing the session releases the lock, on every path.
    drop(client);
    let _ = driver.await;
    migrated
}

async fn migrate_on(
    client: &mut tokio_postgres::Client,
    target: &str,
    steps: &[Step],
) -> Result<(), OpenError> {
    let fail = |doing: &'static str| {
        let target = target.to_owned();
        move |e: tokio_postgres::Error| OpenError::Postgres {
            target,
            message: format!("{doing}: {}", crate::error::describe(&e)),
        }
    };
    client
        .execute(
            "SELECT pg_advisory_lock($1, hashtext(current_schema()))",
            &[&LOCK_KEY],
        )
        .await
        .map_err(fail("take the migration lock"))?;
    let schema: String = client
        .query_one("SELECT current_schema()", &[])
        .await
        .map_err(fail("read current_schema"))?
        .get(0);
    let (from, mut backfill_after) = match inspect(client, target, &schema).await? {
        Found::Empty => (0, None),
        Found::Ours {
            version,
            backfill_after,
        } => (version, backfill_after),
    };
    let known = i32::try_from(steps.len()).unwrap_or(i32::MAX);
    let mut version = from;
    loop {
        if let Some(after) = backfill_after.take() {
            let at = usize::try_from(version - 1).unwrap_or(0);
            if let Some(backfill) = steps.get(at).and_then(|s| s.backfill.as_ref()) {
                run_backfill(client, target, version, backfill, after).await?;
            }
        }
        if version >= known {
            break;
        }
        let k = usize::try_from(version).unwrap_or(0);
        let step = &steps[k];
        version += 1;
        backfill_after = step.backfill.as_ref().map(|_| -1);
        apply_step(client, target, version, step, backfill_after).await?;
    }
    client
        .execute(
            "SELECT pg_advisory_unlock($1, hashtext(current_schema()))",
            &[&LOCK_KEY],
        )
        .await
        .map_err(fail("release the migration lock"))?;
    if version != from {
        tracing::info!(
            database = %target,
            schema = %schema,
            from,
            to = version,
            "store_schema_migrated"
        );
    }
    Ok(())
}

/// Runs one step in a transaction of its own, recording `version` (the
/// step's, after it) and where its backfill starts.
async fn apply_step(
    client: &mut tokio_postgres::Client,
    target: &str,
    version: i32,
    step: &Step,
    backfill_after: Option<i64>,
) -> Result<(), OpenError> {
    let fail = |doing: String| {
        move |e: tokio_postgres::Error| OpenError::Postgres {
            target: target.to_owned(),
            message: format!("{doing}: {}", crate::error::describe(&e)),
        }
    };
    let tx = client.transaction().await.map_err(fail("begin".into()))?;
    tx.batch_execute(step.schema)
        .await
        .map_err(fail(format!("migration step {} -> {version}", version - 1)))?;
    record(&tx, version, backfill_after)
        .await
        .map_err(fail("record the version".into()))?;
    tx.commit().await.map_err(fail("commit".into()))
}

/// Writes the version row (and the column for a backfill's progress, which
/// the first step's table lacks).
async fn record(
    tx: &tokio_postgres::Transaction<'_>,
    version: i32,
    backfill_after: Option<i64>,
) -> Result<(), tokio_postgres::Error> {
    tx.batch_execute(
        "ALTER TABLE taskcenter_schema ADD COLUMN IF NOT EXISTS backfill_after bigint; \
         DELETE FROM taskcenter_schema",
    )
    .await?;
    tx.execute(
        "INSERT INTO taskcenter_schema (application, version, backfill_after) \
         VALUES ($1, $2, $3)",
        &[&APPLICATION, &version, &backfill_after],
    )
    .await?;
    Ok(())
}

/// Runs the backfill of the step that took the schema to `version`, from
/// after position `after` to the end, one batch per transaction.
async fn run_backfill(
    client: &mut tokio_postgres::Client,
    target: &str,
    version: i32,
    backfill: &Backfill,
    mut after: i64,
) -> Result<(), OpenError> {
    let fail = |e: tokio_postgres::Error| OpenError::Postgres {
        target: target.to_owned(),
        message: format!(
            "backfill of migration step {} -> {version}: {}",
            version - 1,
            crate::error::describe(&e)
        ),
    };
    let until: Option<i64> = client
        .query_one(backfill.until, &[])
        .await
        .map_err(fail)?
        .try_get(0)
        .map_err(fail)?;
    let until = until.unwrap_or(after);
    let mut batches = 0u64;
    loop {
        let tx = client.transaction().await.map_err(fail)?;
        let last: Option<i64> = tx
            .query_one(backfill.batch, &[&after, &BACKFILL_BATCH, &until])
            .await
            .map_err(fail)?
            .try_get(0)
            .map_err(fail)?;
        match last {
            Some(last) => {
                tx.execute("UPDATE taskcenter_schema SET backfill_after = $1", &[&last])
                    .await
                    .map_err(fail)?;
                tx.commit().await.map_err(fail)?;
                after = last;
                batches += 1;
            }
            None => {
                tx.batch_execute(backfill.finish).await.map_err(fail)?;
                tx.execute("UPDATE taskcenter_schema SET backfill_after = NULL", &[])
                    .await
                    .map_err(fail)?;
                tx.commit().await.map_err(fail)?;
                tracing::info!(database = %target, version, batches, "store_schema_backfilled");
                return Ok(());
            }
        }
    }
}

/// Reads the version table and the table list of `schema`; writes nothing.
async fn inspect(
    client: &tokio_postgres::Client,
    target: &str,
    schema: &str,
) -> Result<Found, OpenError> {
    let fail = |e: tokio_postgres::Error| OpenError::Postgres {
        target: target.to_owned(),
        message: format!("read the schema: {}", crate::error::describe(&e)),
    };
    let tables: Vec<String> = client
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
    // The progress column is read through the row's JSON: versions written
    // before it existed have none.
    let rows = client
        .query(
            "SELECT application, version, (to_jsonb(s) ->> 'backfill_after')::bigint \
             FROM taskcenter_schema s",
            &[],
        )
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
    Ok(Found::Ours {
        version,
        backfill_after: row.try_get(2).map_err(|_| foreign(Some(version)))?,
    })
}
