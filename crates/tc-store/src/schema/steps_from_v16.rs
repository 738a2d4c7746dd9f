//! Steps 15 → 16 onwards: tenants, credentials, topics, priorities, flow
//! keys. A new step goes at the end of this file and of [`super::MIGRATIONS`].

use rusqlite::Connection;

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
pub(crate) const V16_TENANTS: &str = "
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
pub(crate) const TENANTS_STEP: i64 = 16;

/// The idempotency key's column as step 1 wrote it, and without its UNIQUE.
pub(crate) const KEY_COLUMN: (&str, &str) = (
    "idempotency_key     TEXT    NOT NULL UNIQUE,",
    "idempotency_key     TEXT    NOT NULL,",
);

/// Drops the UNIQUE of `tasks.idempotency_key` (a constraint of the table,
/// whose index SQLite made and names `sqlite_autoindex_tasks_N`; no DROP
/// INDEX reaches it), in the migration's transaction, without copying the
/// table: through `writable_schema` (see [`rewrite_task_checks`](super::steps_upto_v15::rewrite_task_checks)), the
/// column's definition loses its UNIQUE and its automatic index becomes a
/// plain unique index of the same column, the same b-tree SQLite built (an
/// automatic index of one column and `CREATE UNIQUE INDEX` on it are stored
/// alike); then an ordinary DROP INDEX frees its pages. Refuses (and the
/// migration rolls back) if the definition or the index are not those step
/// 1 made.
pub(crate) fn drop_key_uniqueness(tx: &Connection) -> rusqlite::Result<()> {
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
/// [`REWRITTEN_CHECKS`](super::steps_upto_v15::REWRITTEN_CHECKS)), and call no function (a function call gives the
/// firing statement a statement journal; see
/// [`V15_TRIGGERS_WITHOUT_UPSERT`](super::steps_upto_v15::V15_TRIGGERS_WITHOUT_UPSERT)). A decrement's guard on `OLD.state`
/// names no column of `state_counts`, so SQLite tests it once before the
/// seek, and a change from pending or running seeks nothing. The pending
/// and running rows are deleted, so that no stale figure is left to read:
/// a row that no trigger keeps does not exist.
pub(crate) const V17_TERMINAL_STATE_COUNTS: &str = "
DELETE FROM state_counts WHERE state = 'pending' OR state = 'running';

DROP TRIGGER IF EXISTS state_counts_insert;
CREATE TRIGGER state_counts_insert AFTER INSERT ON tasks
WHEN NEW.state = 'success' OR NEW.state = 'failed' OR NEW.state = 'canceled' BEGIN
    UPDATE state_counts SET n = n + 1 WHERE state = NEW.state;
END;

DROP TRIGGER IF EXISTS state_counts_update;
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

DROP TRIGGER IF EXISTS state_counts_delete;
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
pub(crate) const V18_DUE_BY_TENANT_FOR_ALL: &str = "
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
pub(crate) const V19_TENANT_SECRETS: &str = "
ALTER TABLE tenants ADD COLUMN signing_secrets TEXT;
ALTER TABLE destinations ADD COLUMN share_with_tenants TEXT;
";

/// Step 19 → 20: why a schedule's latest firing created no task
/// (`tc_model::schedule::FiringError`: a url the allow-list no longer
/// admits), all three columns set or none. Nullable columns without a
/// default: no row is rewritten.
pub(crate) const V20_SCHEDULE_ERRORS: &str = "
ALTER TABLE schedules ADD COLUMN last_error_code TEXT;
ALTER TABLE schedules ADD COLUMN last_error_message TEXT;
ALTER TABLE schedules ADD COLUMN last_error_at INTEGER;
";

/// Step 20 → 21: a destination's `auth`
/// (`tc_model::auth::DestinationAuth::to_stored`, its secrets with it: the
/// one column sealing at rest wraps), NULL for none; and the server's own
/// keys by name (`jwt_key`: the PKCS#8 PEM JWTs are signed with when no
/// `--jwt-key-file` is given), written once, never replaced.
pub(crate) const V21_AUTH: &str = "
ALTER TABLE destinations ADD COLUMN auth TEXT;
CREATE TABLE server_keys (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;
";

/// Step 21 → 22: a destination's client certificate (its PEM
/// and facts, as `ClientCert::to_stored` writes them), its key (sealed at
/// rest when the server has a key) and its own CA certificates.
pub(crate) const V22_CLIENT_TLS: &str = "
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
pub(crate) const V23_TRIES_WRITTEN_ONCE: &str = "
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
pub(crate) const V24_TOPICS: &str = "
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
pub(crate) const V25_PRIORITY: &str = "
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
pub(crate) const V26_FLOW_KEYS: &str = "
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

/// Step 26 → 27 (the writer's instructions per task): the counts are
/// tallied by the writer, no longer by AFTER-row triggers. Every write
/// that inserts, deletes or moves a task reports the move, and the writer
/// applies a batch's moves once before its COMMIT (`moves::apply`: one
/// UPDATE per touched row of `destination_tasks` and `state_counts`). The
/// triggers' frames alone cost every submit, claim and completion more
/// than the counting (docs/performance.md). The counts the triggers kept
/// are exact, so nothing is recounted; `seq_floor_delete` stays (it fires
/// on deletes only, which no hot path makes). The SQLite writer is one
/// thread over one file guarded by a lock file: no older build writes the
/// file beside this one. `IF EXISTS`: a file rebuilt by hand to an older
/// version (the upgrade tests') may lack them.
pub(crate) const V27_WRITER_COUNTS: &str = "
DROP TRIGGER IF EXISTS state_counts_insert;
DROP TRIGGER IF EXISTS state_counts_update;
DROP TRIGGER IF EXISTS state_counts_delete;
DROP TRIGGER IF EXISTS destination_tasks_insert;
DROP TRIGGER IF EXISTS destination_tasks_update;
DROP TRIGGER IF EXISTS destination_tasks_delete;
";

/// Step 27 → 28 (fair share between flow keys): the due tasks by destination and
/// tenant in two indexes, those without a flow key (`tasks_due_unkeyed`,
/// new) and the keyed ones (`tasks_due_by_key`, step 26), in place of
/// `tasks_due_by_tenant`, which held both. The claim's key level asks,
/// before it shares a take between keys, whether tasks without a key are
/// due (`flow_keys::Keyed::due_keys`); through `tasks_due_by_tenant`, which
/// has no `flow_key`, that probe read every due keyed task of the tenant
/// before it could say no (0.76 ms a probe at 10,000 due,
/// docs/performance.md), on every claim of a keyed backlog. Split, it is
/// one seek, and no task has an index entry more: one without a key moves
/// from the old index to the new, a keyed one is in `tasks_due_by_key`
/// alone (a tenant's due tasks of both kinds are the two indexes'
/// together, `write_ops::due_tenants`).
pub(crate) const V28_DUE_UNKEYED: &str = "
CREATE INDEX tasks_due_unkeyed ON tasks (destination, tenant, next_run_at, seq)
    WHERE state = 'pending' AND flow_key = '';
DROP INDEX tasks_due_by_tenant;
";

/// Step 28 → 29 (the writer's work per task): `tasks_by_state` (every task
/// by state, then seq) split in two partial indexes, the pending tasks by
/// seq (`tasks_pending`) and the ended ones by state and seq
/// (`tasks_ended`); the running tasks are listed through `tasks_leased`,
/// which holds them all. A task's life moved five entries of
/// `tasks_by_state` (in at its submit, out and in at its claim and at its
/// end); now three (in at its submit, out at its claim, in at its end).
/// Measured with the writer's instruction counter: 6,200 fewer a task
/// (docs/performance.md, "the writer's layout measured").
pub(crate) const V29_STATE_INDEXES: &str = "
CREATE INDEX tasks_pending ON tasks (seq) WHERE state = 'pending';
CREATE INDEX tasks_ended ON tasks (state, seq) WHERE state <> 'pending' AND state <> 'running';
DROP INDEX tasks_by_state;
";
