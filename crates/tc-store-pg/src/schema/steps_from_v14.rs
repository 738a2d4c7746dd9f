//! Steps 13 → 14 onwards: tenants, credentials, the hot path, topics,
//! cluster flow, priorities, flow keys, statements that count their own
//! writes. A new step goes at the end of this
//! file and of [`super::MIGRATIONS`]; a step is never edited once it has
//! shipped.

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
pub(crate) const V14_TENANTS: &str = "
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
pub(crate) const V15_TENANT_SECRETS: &str = "
ALTER TABLE tenants ADD COLUMN signing_secrets text;
ALTER TABLE destinations ADD COLUMN share_with_tenants text;
";

/// Step 15 → 16: why a schedule's latest firing created no task
/// (`tc_model::schedule::FiringError`: a url the allow-list no longer
/// admits), all three columns set or none. Nullable columns without a
/// default: no row is rewritten, the lock is held for an instant.
pub(crate) const V16_SCHEDULE_ERRORS: &str = "
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
pub(crate) const V17_AUTH: &str = "
ALTER TABLE destinations ADD COLUMN auth text;
CREATE TABLE server_keys (
    name  text PRIMARY KEY,
    value text NOT NULL
);
";

/// Step 17 → 18: a destination's client certificate (its PEM
/// and facts, as `ClientCert::to_stored` writes them), its key (sealed at
/// rest when the node has a key) and its own CA certificates.
pub(crate) const V18_CLIENT_TLS: &str = "
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
/// `tasks` and waiting for `attempts` deadlocked with the step. A statement
/// whose cached plan locks `attempts` before `tasks` can still close a
/// cycle; the server then ends one side, and a step it ends is tried again
/// (`schema::apply_step`).
pub(crate) const V19_HOT_PATH: &str = "
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
pub(crate) const V20_TOPICS: &str = "
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
pub(crate) const V21_CLUSTER_FLOW: &str = "
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
pub(crate) const V22_PRIORITY: &str = "
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
pub(crate) const V23_FLOW_KEYS: &str = "
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

/// Step 23 → 24: a statement counts the tasks it moves itself (its own
/// CTEs append the count deltas and due marks, `moves::count_moves`), so
/// the hot path runs no trigger function: no PL/pgSQL call and no second
/// statement planned per write.
///
/// Nodes of earlier versions still serving rely on the triggers, so they
/// stay, each now skipping a statement of a session that says it counts
/// itself (`taskcenter.writes = counted`, an option every connection of
/// this version opens with, `moves::SESSION_OPTION`): every write is
/// counted once, by whichever does, and nodes of both versions serve side
/// by side without a fence. PostgreSQL still keeps the transition tables
/// of a skipped trigger's statement (it decides to capture them before
/// the `WHEN` is read): a later step drops the triggers, once no node of
/// an earlier version can be serving, and with them that cost. `DROP` and
/// `CREATE TRIGGER` touch the catalog only; `tasks` is locked first, for
/// an instant, before any statement here takes a lock on it.
pub(crate) const V24_COUNTED_WRITES: &str = "
LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE;
DROP TRIGGER tasks_count_insert ON tasks;
DROP TRIGGER tasks_count_update ON tasks;
DROP TRIGGER tasks_count_delete ON tasks;
DROP TRIGGER tasks_mark_due_insert ON tasks;
DROP TRIGGER tasks_mark_due_update ON tasks;
CREATE TRIGGER tasks_count_insert AFTER INSERT ON tasks
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    WHEN (current_setting('taskcenter.writes', true) IS DISTINCT FROM 'counted')
    EXECUTE FUNCTION tc_count_states();
CREATE TRIGGER tasks_count_update AFTER UPDATE ON tasks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
    WHEN (current_setting('taskcenter.writes', true) IS DISTINCT FROM 'counted')
    EXECUTE FUNCTION tc_count_states();
CREATE TRIGGER tasks_count_delete AFTER DELETE ON tasks
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    WHEN (current_setting('taskcenter.writes', true) IS DISTINCT FROM 'counted')
    EXECUTE FUNCTION tc_count_states();
CREATE TRIGGER tasks_mark_due_insert AFTER INSERT ON tasks
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    WHEN (current_setting('taskcenter.writes', true) IS DISTINCT FROM 'counted')
    EXECUTE FUNCTION tc_mark_due();
CREATE TRIGGER tasks_mark_due_update AFTER UPDATE ON tasks
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    WHEN (current_setting('taskcenter.writes', true) IS DISTINCT FROM 'counted')
    EXECUTE FUNCTION tc_mark_due();
";

/// Step 24 → 25: the hot path off the wide row. `queue` holds one narrow
/// row per unfinished task (its position, state, place, due time and what
/// the claim sorts and caps by), written by the very statements that move
/// tasks (`moves::count_moves`); the claim walks it, the capped counts,
/// the flow keys' running counts, the tenants' open tasks and recovery
/// read it. `tasks` stays the record every read answers from; every index
/// of it that named `state` or `next_run_at` (its partial predicates
/// included) goes, so a claim's and an end's update of the wide row
/// change no indexed column and stay HOT; `tasks` leaves half of each new
/// page free for them (`fillfactor` 50, was 70 since step 19: at 70 about
/// one update in seven found no room on its page and was not HOT,
/// measured; new pages only, no rewrite). A listing of a finished state
/// walks positions (`filter.rs`).
///
/// Nodes of earlier versions would write `tasks` behind the queue (a claim
/// through both layouts): a statement trigger fences every write of theirs
/// to `tasks` (they fail with `55000`, as step 14 failed their submits;
/// no row is touched) until they are upgraded. This version's sessions say
/// `taskcenter.writes = queued` (`moves::SESSION_OPTION`), which the
/// trigger's `WHEN` passes without calling its function. The count
/// triggers of step 24 go with it: nothing they counted can run any more.
/// The fill reads the unfinished tasks through `tasks_by_state` before
/// it goes (its cost grows with unfinished tasks only), all under the
/// table's lock, taken first. The new table is left unanalyzed (an empty
/// one analyzed would be planned as empty for good): the upkeep leader
/// analyzes it with the other hot tables once it changed
/// (`analyze::HOT_TABLES`).
pub(crate) const V25_QUEUE: &str = "
LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE;
ALTER TABLE tasks SET (fillfactor = 50);
CREATE FUNCTION tc_fence_queued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'tasks are written by nodes of schema 25 or later: upgrade this node'
        USING ERRCODE = '55000';
END $$;
CREATE TRIGGER tasks_fence_before_queue BEFORE INSERT OR UPDATE OR DELETE ON tasks
    FOR EACH STATEMENT
    WHEN (current_setting('taskcenter.writes', true) IS DISTINCT FROM 'queued')
    EXECUTE FUNCTION tc_fence_queued();
DROP TRIGGER tasks_count_insert ON tasks;
DROP TRIGGER tasks_count_update ON tasks;
DROP TRIGGER tasks_count_delete ON tasks;
DROP TRIGGER tasks_mark_due_insert ON tasks;
DROP TRIGGER tasks_mark_due_update ON tasks;
CREATE TABLE queue (
    pos         bigint  PRIMARY KEY,
    state       text    NOT NULL CHECK (state IN ('pending', 'running')),
    destination text    NOT NULL,
    tenant      text    NOT NULL,
    flow_key    text    NOT NULL,
    priority    integer NOT NULL,
    next_run_at bigint
) WITH (fillfactor = 50);
INSERT INTO queue (pos, state, destination, tenant, flow_key, priority, next_run_at)
SELECT pos, state, destination, tenant, flow_key, priority, next_run_at FROM tasks
WHERE state IN ('pending', 'running');
CREATE INDEX queue_due ON queue (destination, next_run_at, pos) WHERE state = 'pending';
CREATE INDEX queue_running ON queue (destination, pos) WHERE state = 'running';
CREATE INDEX queue_due_by_tenant ON queue (destination, tenant, next_run_at, pos)
    WHERE state = 'pending' AND tenant <> '';
CREATE INDEX queue_unfinished_by_tenant ON queue (tenant, state) WHERE tenant <> '';
CREATE INDEX queue_prioritized ON queue (destination, next_run_at, pos)
    WHERE state = 'pending' AND priority > 0;
CREATE INDEX queue_due_by_key ON queue (destination, tenant, flow_key, next_run_at, pos)
    WHERE state = 'pending' AND flow_key <> '';
CREATE INDEX queue_running_by_key ON queue (tenant, flow_key)
    WHERE state = 'running' AND flow_key <> '';
DROP INDEX tasks_due;
DROP INDEX tasks_by_state;
DROP INDEX tasks_due_by_destination;
DROP INDEX tasks_running_by_destination;
DROP INDEX tasks_unfinished_by_tenant;
DROP INDEX tasks_due_by_tenant;
DROP INDEX tasks_prioritized;
DROP INDEX tasks_due_by_key;
DROP INDEX tasks_running_by_key;
";

/// Step 25 → 26 (fair share between flow keys): the due tasks without a flow key by
/// destination and tenant, a partial index of `queue` for those alone.
/// The claim's key level asks, before it shares a take between keys,
/// whether tasks without a key are due (`flow_keys::DUE_KEYS`); no index
/// had `flow_key` for them, so that probe read every pending task of the
/// destination (a sequential scan of `queue`, 2 ms at 20,000 keyed tasks)
/// on every claim of a keyed backlog. Each pending task without a key costs
/// one index entry more. Nodes of step 25 write `queue` as this step's do:
/// the index is kept for them by PostgreSQL, so nothing is fenced.
pub(crate) const V26_DUE_UNKEYED: &str = "
CREATE INDEX queue_due_unkeyed ON queue (destination, tenant, next_run_at, pos)
    WHERE state = 'pending' AND flow_key = '';
";

/// Step 26 → 27: a try's history row costs one index entry, not two.
/// `attempts` had its identity `seq` for primary key and `attempts_by_task
/// (task_id, seq)` beside it; every statement that reads or deletes
/// history names the task (`task_id = ANY`, `task_id IN`, a join on the
/// task), none the `seq` alone. The primary key is now `(task_id, seq)`,
/// the index all of them walk, and the two others go: one B-tree entry and
/// one WAL record less for each try. `seq` stays an identity column, so
/// the rows a node of the previous version inserts (without naming it)
/// keep their order, and nothing is fenced. The new key is built under the
/// table's lock, taken first: a node ending a try meanwhile waits, for a
/// time in proportion to the history kept; nothing here locks `tasks`,
/// which such a node holds while it waits.
pub(crate) const V27_ATTEMPTS_BY_TASK: &str = "
LOCK TABLE attempts IN ACCESS EXCLUSIVE MODE;
ALTER TABLE attempts DROP CONSTRAINT attempts_pkey;
DROP INDEX attempts_by_task;
ALTER TABLE attempts ADD CONSTRAINT attempts_pkey PRIMARY KEY (task_id, seq);
";

/// Step 27 → 28: `tasks` leaves three fifths of each new page free
/// (`fillfactor` 40, was 50 since step 25), so that a task's claim and its
/// end both stay HOT updates where pruning keeps up (a transaction held
/// open in the database holds it off). A claim updates every task of a
/// page (and more) in one statement: the page must hold a new version of
/// each before any old one can be pruned, and the claim's versions are
/// larger (its start and lease were NULL). At 50 a page had no room left
/// for some of them, and the end then found the page still full while
/// concurrent ends pinned it against pruning: 0.6 of a task's two updates
/// were not HOT, each an entry in all four indexes of `tasks` and a lock
/// record (docs/performance.md). New pages only: no rewrite, nothing
/// fenced (nodes of step 27 write the same rows).
pub(crate) const V28_TASKS_ROOM: &str = "
ALTER TABLE tasks SET (fillfactor = 40);
";
