//! What only a file can show: reopening, upgrading an older file in place,
//! and refusing files that are not ours.

use std::future::Future;
use std::path::Path;
use std::pin::pin;
use std::task::{Context, Waker};
use std::time::Duration;

use rusqlite::{Connection, params};
use tc_model::store::{BulkRequest, Completion, ListQuery, TaskFilter};
use tc_model::store::{Destinations, Schedules, Tasks, Work};
use tc_model::tenant::Scope;
use tc_model::{Limits, NewTask, State, Task, TaskId, Timestamp};
use tc_store::{OpenError, SqliteStore, StoreConfig, Synchronous};
use tc_testkit::ClaimDue;

pub(crate) const LEASE: Duration = Duration::from_secs(30);

pub(crate) fn task(key: &str) -> NewTask {
    NewTask::new(
        format!("http://127.0.0.1:9/{key}"),
        format!("{{\"key\":\"{key}\"}}").into_bytes(),
        key.to_owned(),
        3,
        Duration::from_secs(2),
        &Limits::default(),
    )
    .unwrap()
}

pub(crate) fn t(ms: i64) -> Timestamp {
    Timestamp::from_millis(1_700_000_000_000 + ms)
}

fn everything() -> ListQuery {
    ListQuery {
        filter: TaskFilter::state(None),
        limit: 1_000,
        after: None,
        max_result_bytes: None,
        ..ListQuery::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopening_keeps_every_task_and_its_history() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    // NORMAL on purpose: a clean close must keep everything in either mode.
    let config = StoreConfig {
        synchronous: Synchronous::Normal,
        ..StoreConfig::default()
    };
    let store = SqliteStore::open(&path, config.clone()).await.unwrap();
    for key in ["a", "b", "c", "d"] {
        store.submit(task(key), t(0)).await.unwrap();
    }
    let claimed = store
        .claim_due(2, t(10), LEASE, tc_model::destination::ClaimGate::default())
        .await
        .unwrap();
    let ok = Completion::Success {
        http_status: 200,
        result: b"done".to_vec(),
        content_type: Some("text/plain".into()),
    };
    store.complete(claimed[0].id, 1, ok, t(20)).await.unwrap();
    let retry = Completion::Retry {
        next_run_at: t(5_000),
        reason: "http_503".into(),
        http_status: Some(503),
    };
    store
        .complete(claimed[1].id, 1, retry, t(20))
        .await
        .unwrap();
    let last = store.list(everything(), Scope::Admin).await.unwrap().tasks[3].id;
    store.cancel(last, Scope::Admin, t(30)).await.unwrap();

    let listed = store.list(everything(), Scope::Admin).await.unwrap();
    let counts = store.count_by_state().await.unwrap();
    let due = store.next_due().await.unwrap();
    store.close().await;

    let store = SqliteStore::open(&path, config).await.unwrap();
    assert_eq!(
        store.list(everything(), Scope::Admin).await.unwrap(),
        listed
    );
    assert_eq!(store.count_by_state().await.unwrap(), counts);
    assert_eq!(store.next_due().await.unwrap(), due);
    assert_eq!(listed.tasks[1].attempts.len(), 1, "history survived");
    let again = store.submit(task("a"), t(40)).await.unwrap();
    assert!(!again.created);
    // A listing carries no bodies; the resubmit answers the whole task.
    assert_eq!(
        Task {
            body: Vec::new(),
            ..again.task
        },
        listed.tasks[0]
    );
    // New tasks continue after the old ones.
    let new = store.submit(task("e"), t(50)).await.unwrap().task;
    let after = store.list(everything(), Scope::Admin).await.unwrap().tasks;
    assert_eq!(after.len(), 5);
    assert_eq!(after[4].id, new.id);
}

/// Taskcenter's schema version 1 as that build wrote it, written out by hand
/// rather than taken from the crate, so that "an old file" keeps meaning what
/// old builds really left on disk.
const V1_LAYOUT: &str = "
PRAGMA application_id = 1413706612;
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
PRAGMA user_version = 1;
";

fn pragma(conn: &Connection, name: &str) -> i64 {
    conn.pragma_query_value(None, name, |row| row.get(0))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_file_is_upgraded_in_place_with_its_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.db");
    let (done, waiting) = (
        TaskId::new(Timestamp::from_millis(1), [1; 10]),
        TaskId::new(Timestamp::from_millis(2), [2; 10]),
    );
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(V1_LAYOUT).unwrap();
        conn.execute(
            "INSERT INTO tasks (id, idempotency_key, state, url, body, max_attempts, timeout_ns,
                                attempt, http_status, result, result_content_type, created_at,
                                updated_at, started_at, finished_at)
             VALUES (?1, 'old-done', 'success', 'http://127.0.0.1:9/old', x'7B7D', 3, 2000000000,
                     1, 200, x'6F6B', 'text/plain', ?2, ?3, ?2, ?3)",
            params![done.as_bytes(), t(0).as_millis(), t(100).as_millis()],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO attempts (task_id, n, started_at, finished_at, http_status, duration_ms)
             VALUES (?1, 1, ?2, ?3, 200, 100)",
            params![done.as_bytes(), t(0).as_millis(), t(100).as_millis()],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO tasks (id, idempotency_key, state, url, body, max_attempts, timeout_ns,
                                created_at, updated_at, next_run_at)
             VALUES (?1, 'old-waiting', 'pending', 'http://127.0.0.1:9/w', x'5B5D', 2, 1000000,
                     ?2, ?2, ?2)",
            params![waiting.as_bytes(), t(50).as_millis()],
        )
        .unwrap();
        assert_eq!(pragma(&conn, "user_version"), 1);
    }

    let store = SqliteStore::open(&path, StoreConfig::default())
        .await
        .unwrap();
    let old = store.get(done, Scope::Admin).await.unwrap();
    assert_eq!(old.state, State::Success);
    assert_eq!(old.idempotency_key, "old-done");
    assert_eq!(old.body, b"{}");
    assert_eq!(old.result.as_deref(), Some(&b"ok"[..]));
    assert_eq!(old.timeout, Duration::from_secs(2));
    assert_eq!(old.attempts.len(), 1);
    assert_eq!(old.attempts[0].duration_ms, Some(100));
    // Tasks from before methods and headers are POSTs with none.
    assert_eq!((old.method, old.headers.len()), (tc_model::Method::Post, 0));
    // Tasks from before callbacks (step 13) ask for none and never ended
    // as far as callbacks count.
    assert_eq!(
        (
            old.callback,
            old.callback_of,
            old.callback_task_id,
            old.ends
        ),
        (None, None, None, 0)
    );
    // Tasks from before tenants (step 16) are nobody's: the admin's.
    assert_eq!(old.tenant, None);
    // Step 11 counted the old file's pending task for its destination, and
    // the claim's walk finds it through its due time.
    let before = store.destination("127.0.0.1:9".into()).await.unwrap();
    assert_eq!((before.pending, before.running), (1, 0));
    let claimed = store
        .claim_due(
            10,
            t(60),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, waiting);
    assert_eq!(claimed[0].body, b"[]");
    let after = store.destination("127.0.0.1:9".into()).await.unwrap();
    assert_eq!((after.pending, after.running), (0, 1));
    assert_eq!(
        (claimed[0].method, claimed[0].headers.len()),
        (tc_model::Method::Post, 0)
    );
    // An old file takes a destination's headers and secrets.
    let headers =
        tc_model::Headers::parse([("authorization".to_owned(), "Bearer t".to_owned())]).unwrap();
    let updated = store
        .update_destination(
            "127.0.0.1:9".into(),
            tc_model::destination::DestinationUpdate {
                headers: Some(headers.clone()),
                ..Default::default()
            },
            t(70),
        )
        .await
        .unwrap();
    assert_eq!(updated.settings.headers, headers);
    // The old rows' destinations were filled in: the filter finds them.
    let by_destination = store
        .list(
            ListQuery {
                filter: TaskFilter {
                    destination: Some("127.0.0.1:9".into()),
                    ..TaskFilter::default()
                },
                ..everything()
            },
            Scope::Admin,
        )
        .await
        .unwrap();
    let found: Vec<TaskId> = by_destination.tasks.iter().map(|t| t.id).collect();
    assert_eq!(found, [done, waiting]);
    store.close().await;

    let conn = Connection::open(&path).unwrap();
    assert_eq!(pragma(&conn, "user_version"), tc_store::SCHEMA_VERSION);
    // Rebuilt once with incremental auto_vacuum (2), every row kept.
    assert_eq!(pragma(&conn, "auto_vacuum"), 2);
    // The counts tables started from the rows the old file had, and followed
    // the claim since: the finished states in `state_counts` (only those
    // since step 17), pending and running per destination.
    let counts: Vec<(String, i64)> = conn
        .prepare("SELECT state, n FROM state_counts WHERE n <> 0 ORDER BY state")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(counts, [("success".to_owned(), 1)]);
    let open: (i64, i64) = conn
        .query_row(
            "SELECT sum(pending), sum(running) FROM destination_tasks",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    assert_eq!(open, (0, 1));
    let indexes: Vec<String> = conn
        .prepare(
            "SELECT name FROM sqlite_schema WHERE type = 'index' AND sql IS NOT NULL ORDER BY name",
        )
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        indexes,
        [
            "api_keys_by_tenant",
            "attempts_by_task",
            "destination_tasks_ready",
            "destination_tasks_waiting",
            "events_of_topic",
            "subscriptions_of_topic",
            "tasks_by_destination",
            "tasks_by_error",
            "tasks_by_key",
            "tasks_by_tenant",
            "tasks_due_by_destination",
            "tasks_due_by_key",
            "tasks_due_unkeyed",
            "tasks_ended",
            "tasks_leased",
            "tasks_open_by_tenant",
            "tasks_pending",
            "tasks_prioritized",
            "tasks_running_by_key"
        ]
    );
    // Tasks from before trace contexts have none; new ones keep theirs.
    assert_eq!((&old.trace, &claimed[0].trace), (&None, &None));
    // Tasks from before priorities (step 24) have 0.
    assert_eq!(old.priority, 0);
    // Tasks from before flow keys (step 26) have none.
    assert_eq!(old.flow_key, None);
    // Step 14 rewrote the tasks CHECKs without IN lists: the same rules,
    // still enforced on the upgraded file.
    let tasks_sql: String = conn
        .query_row(
            "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'tasks'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert!(
        !tasks_sql.contains(" IN (") && !tasks_sql.contains("length("),
        "{tasks_sql}"
    );
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    for (column, bad) in [("state", "done"), ("method", "TRACE")] {
        let refused = conn.execute(
            &format!("UPDATE tasks SET {column} = ?1 WHERE idempotency_key = 'old-done'"),
            [bad],
        );
        assert!(refused.is_err(), "{column} = {bad} accepted");
    }
    let triggers: Vec<String> = conn
        .prepare("SELECT sql FROM sqlite_schema WHERE type = 'trigger' AND name LIKE 'destination_tasks_%'")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    // Step 27: the writer tallies the counts; no trigger keeps them.
    assert_eq!(triggers, Vec::<String>::new());
    drop(conn);
    let store = SqliteStore::open(&path, StoreConfig::default())
        .await
        .unwrap();
    let context = tc_model::TraceContext::from_headers(
        Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        Some("congo=t61rcWkgMzE"),
    )
    .unwrap();
    let traced = store
        .submit(task("traced").with_trace(context.clone()), t(65))
        .await
        .unwrap()
        .task;
    assert_eq!(
        store.get(traced.id, Scope::Admin).await.unwrap().trace,
        Some(context)
    );
    // An old file takes schedules (step 14), and keeps them across a reopen
    // with their firing record.
    let spec = tc_model::schedule::ScheduleSpec {
        name: "nightly".into(),
        when: tc_model::schedule::Recurrence {
            cron: tc_model::schedule::CronPattern::parse("30 2 * * *").unwrap(),
            zone: tc_model::schedule::Zone::parse("Europe/Berlin").unwrap(),
        },
        task: tc_model::schedule::TaskTemplate::of(task("template")),
        paused: false,
        overlap: tc_model::schedule::Overlap::Skip,
        catch_up: tc_model::schedule::CatchUp::Latest,
    };
    let created = store.create_schedule(spec, t(80)).await.unwrap();
    assert!(
        store
            .record_firing("nightly".into(), t(90), traced.id)
            .await
            .unwrap()
    );
    store.close().await;
    let store = SqliteStore::open(&path, StoreConfig::default())
        .await
        .unwrap();
    let kept = store.schedule("nightly".into()).await.unwrap();
    assert_eq!(kept.spec, created.spec);
    assert_eq!(
        (kept.last_run_at, kept.last_task_id),
        (Some(t(90)), Some(traced.id))
    );
    store.close().await;
}

/// Submits a task per key at `t(0)` (at least five), claims the first five
/// at `t(10)`, and at `t(20)` ends the first as a success, the second as a
/// failure, cancels the third and retries the fifth at `t(50)`: the
/// fourth runs, the rest wait. Answers the ids in key order.
pub(crate) async fn a_task_in_every_state(store: &SqliteStore, keys: &[&str]) -> Vec<TaskId> {
    let mut ids = Vec::new();
    for key in keys {
        ids.push(store.submit(task(key), t(0)).await.unwrap().task.id);
    }
    let claimed = store
        .claim_due(5, t(10), LEASE, tc_model::destination::ClaimGate::default())
        .await
        .unwrap();
    assert_eq!(claimed.len(), 5);
    let ok = Completion::Success {
        http_status: 200,
        result: b"ok".to_vec(),
        content_type: None,
    };
    store.complete(ids[0], 1, ok, t(20)).await.unwrap();
    let fail = Completion::Failed {
        reason: "http_400".into(),
        http_status: Some(400),
    };
    store.complete(ids[1], 1, fail, t(20)).await.unwrap();
    store.cancel(ids[2], Scope::Admin, t(20)).await.unwrap();
    let retry = Completion::Retry {
        next_run_at: t(50),
        reason: "http_503".into(),
        http_status: Some(503),
    };
    store.complete(ids[4], 1, retry, t(20)).await.unwrap();
    ids
}

/// A file as a step-22 build left it, with a task in every state: the
/// store of this build writes them, then the file is given back what step
/// 23 changed (the open history row a claim wrote, `tasks_due`, version
/// 22; steps 21 and 22 only add the destinations' auth and TLS columns).
/// Upgraded, every task reads as before, the running one with its try
/// open once, and its end writes that try's row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_23_upgrades_a_file_with_a_task_in_every_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("step22.db");
    let store = SqliteStore::open(&path, StoreConfig::default())
        .await
        .unwrap();
    let ids = a_task_in_every_state(
        &store,
        &[
            "done", "failed", "canceled", "running", "retrying", "waiting",
        ],
    )
    .await;
    let before = store.list(everything(), Scope::Admin).await.unwrap();
    let states: Vec<State> = before.tasks.iter().map(|task| task.state).collect();
    assert_eq!(
        states,
        [
            State::Success,
            State::Failed,
            State::Canceled,
            State::Running,
            State::Pending,
            State::Pending
        ]
    );
    let counts = store.count_by_state().await.unwrap();
    let due = store.next_due().await.unwrap();
    store.close().await;
    {
        // What a step-22 build left: the running task's open history row,
        // written by its claim, and `tasks_due`.
        let conn = Connection::open(&path).unwrap();
        conn.execute(
            "INSERT INTO attempts (task_id, n, started_at) VALUES (?1, 1, ?2)",
            params![ids[3].as_bytes(), t(10).as_millis()],
        )
        .unwrap();
        // Nor any of the later steps' (step 24: topics; step 25: priority;
        // step 26: flow keys; step 28: the due tasks without one; step 29:
        // the state's indexes).
        conn.execute_batch(
            "CREATE INDEX tasks_due ON tasks (next_run_at, seq) WHERE state = 'pending';
             DROP TABLE event_tasks; DROP TABLE events; DROP TABLE subscriptions;
             DROP TABLE topics; ALTER TABLE tasks DROP COLUMN topic;
             ALTER TABLE tasks DROP COLUMN event_id; ALTER TABLE tasks DROP COLUMN subscription;
             DROP INDEX tasks_prioritized;
             ALTER TABLE tasks DROP COLUMN priority;
             DROP INDEX tasks_due_by_key; DROP INDEX tasks_running_by_key;
             DROP INDEX tasks_due_unkeyed;
             CREATE INDEX tasks_due_by_tenant ON tasks (destination, tenant, next_run_at, seq)
                 WHERE state = 'pending';
             DROP TABLE flow_keys; ALTER TABLE tasks DROP COLUMN flow_key;
             DROP INDEX tasks_pending; DROP INDEX tasks_ended;
             CREATE INDEX tasks_by_state ON tasks (state, seq);
             PRAGMA user_version = 22;",
        )
        .unwrap();
    }

    let store = SqliteStore::open(&path, StoreConfig::default())
        .await
        .unwrap();
    assert_eq!(
        store.list(everything(), Scope::Admin).await.unwrap(),
        before
    );
    assert_eq!(store.count_by_state().await.unwrap(), counts);
    assert_eq!(store.next_due().await.unwrap(), due);
    let running = store.get(ids[3], Scope::Admin).await.unwrap();
    assert_eq!(running.attempts.len(), 1, "the try shows once");
    assert_eq!(
        (running.attempts[0].n, running.attempts[0].started_at),
        (1, t(10))
    );
    assert_eq!(running.attempts[0].finished_at, None);
    let ok = Completion::Success {
        http_status: 200,
        result: b"ok".to_vec(),
        content_type: None,
    };
    store.complete(ids[3], 1, ok, t(40)).await.unwrap();
    let ended = store.get(ids[3], Scope::Admin).await.unwrap();
    assert_eq!(ended.attempts.len(), 1, "its end wrote it once");
    assert_eq!(
        (ended.attempts[0].finished_at, ended.attempts[0].duration_ms),
        (Some(t(40)), Some(30))
    );
    store.close().await;

    let conn = Connection::open(&path).unwrap();
    assert_eq!(pragma(&conn, "user_version"), tc_store::SCHEMA_VERSION);
    let (open, rows): (i64, i64) = conn
        .query_row(
            "SELECT count(*) FILTER (WHERE finished_at IS NULL), count(*) FROM attempts",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    // done, failed, canceled, the retried try, and the running one's end.
    assert_eq!((open, rows), (0, 5));
    let due_index: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name = 'tasks_due'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(due_index, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_file_becomes_a_new_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.db");
    std::fs::write(&path, b"").unwrap();
    let store = SqliteStore::open(&path, StoreConfig::default())
        .await
        .unwrap();
    assert!(store.submit(task("a"), t(0)).await.unwrap().created);
    store.close().await;
}

/// What a refused file is made of, and which refusal it must get.
struct Refusal {
    name: &'static str,
    make: fn(&Path),
    expect: fn(&OpenError) -> bool,
}

fn noise(len: usize) -> Vec<u8> {
    // A fixed xorshift sequence: random-looking bytes, the same every run.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn sqlite_file(path: &Path, sql: &str) {
    Connection::open(path).unwrap().execute_batch(sql).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_that_are_not_ours_are_refused_and_left_untouched() {
    let cases = [
        Refusal {
            name: "text",
            make: |p| std::fs::write(p, "name,amount\nalice,10\n".repeat(200)).unwrap(),
            expect: |e| matches!(e, OpenError::NotSqlite { .. }),
        },
        Refusal {
            name: "random bytes",
            make: |p| std::fs::write(p, noise(64 * 1024)).unwrap(),
            expect: |e| matches!(e, OpenError::NotSqlite { .. }),
        },
        Refusal {
            name: "a few bytes",
            make: |p| std::fs::write(p, b"{}\n").unwrap(),
            expect: |e| matches!(e, OpenError::NotSqlite { .. }),
        },
        Refusal {
            name: "another application's SQLite",
            make: |p| {
                sqlite_file(
                    p,
                    "CREATE TABLE users (name TEXT); INSERT INTO users VALUES ('alice');",
                )
            },
            expect: |e| matches!(e, OpenError::ForeignSchema { tables, .. } if tables == "users"),
        },
        Refusal {
            name: "SQLite with a foreign application_id and no tables",
            make: |p| sqlite_file(p, "PRAGMA application_id = 42; PRAGMA user_version = 1;"),
            expect: |e| {
                matches!(
                    e,
                    OpenError::ForeignSchema {
                        application_id: 42,
                        ..
                    }
                )
            },
        },
        Refusal {
            name: "taskcenter from a newer build",
            make: |p| {
                sqlite_file(
                    p,
                    "PRAGMA application_id = 1413706612; PRAGMA user_version = 99;
                     CREATE TABLE tasks (x); CREATE TABLE future (y);",
                )
            },
            expect: |e| {
                matches!(
                    e,
                    OpenError::NewerSchema {
                        found: 99,
                        known: tc_store::SCHEMA_VERSION,
                        ..
                    }
                )
            },
        },
    ];
    for case in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data.db");
        (case.make)(&path);
        let before = std::fs::read(&path).unwrap();
        let listing = |dir: &Path| {
            let mut names: Vec<_> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            names.sort();
            names
        };
        let files_before = listing(dir.path());

        let err = match SqliteStore::open(&path, StoreConfig::default()).await {
            Ok(_) => panic!("{}: opened", case.name),
            Err(e) => e,
        };
        assert!((case.expect)(&err), "{}: wrong refusal: {err:?}", case.name);
        let message = err.to_string();
        assert!(
            message.contains("data.db") && message.contains("refusing to touch it"),
            "{}: unclear message: {message}",
            case.name
        );
        assert!(
            std::fs::read(&path).unwrap() == before,
            "{}: file changed",
            case.name
        );
        assert_eq!(
            listing(dir.path()),
            files_before,
            "{}: files appeared",
            case.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_commits_writes_whose_callers_went_away() {
    // More than one batch (256), so the writer still has work when the
    // store is closed.
    const QUEUED: usize = 600;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flush.db");
    let mut expected = 0;
    for close in [true, false] {
        let store = SqliteStore::open(&path, StoreConfig::default())
            .await
            .unwrap();
        let mut unanswered = 0;
        for i in 0..QUEUED {
            // Polled once: the command is queued, then the caller goes away
            // without waiting for the answer. Unconstrained, or tokio's
            // per-task budget would stop the send itself after 128 polls.
            let submit = store.submit(task(&format!("{close}-{i}")), t(0));
            let submit = pin!(tokio::task::unconstrained(submit));
            if submit
                .poll(&mut Context::from_waker(Waker::noop()))
                .is_pending()
            {
                unanswered += 1;
            }
        }
        assert!(
            unanswered > 0,
            "every submit was answered at once; nothing to flush"
        );
        if close {
            store.close().await;
        } else {
            drop(store);
        }
        expected += QUEUED;
        // A plain reader sees what is committed, without waiting for a writer.
        let conn = Connection::open(&path).unwrap();
        let stored: i64 = conn
            .query_row("SELECT count(*) FROM tasks", [], |row| row.get(0))
            .unwrap();
        let how = if close { "close" } else { "drop" };
        assert_eq!(
            stored as usize, expected,
            "{how} returned before every queued write was committed"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruned_pages_go_back_to_the_file_system() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.db");
    let store = SqliteStore::open(&path, StoreConfig::default())
        .await
        .unwrap();
    // 4,000 tasks with 8 KiB bodies: about 8,000 pages.
    let body = format!("{{\"pad\":\"{}\"}}", "x".repeat(8 * 1024));
    for chunk in 0..4 {
        let batch: Vec<NewTask> = (0..1000)
            .map(|i| {
                NewTask::new(
                    "http://127.0.0.1:9/x".into(),
                    body.clone().into_bytes(),
                    format!("big-{chunk}-{i}"),
                    1,
                    Duration::from_secs(1),
                    &Limits::default(),
                )
                .unwrap()
            })
            .collect();
        store.submit_many(batch, t(0)).await.unwrap();
    }
    let canceled = store
        .bulk(BulkRequest::new(
            tc_model::store::BulkAction::Cancel,
            tc_model::store::TaskFilter::default(),
            t(1),
        ))
        .await
        .unwrap();
    assert_eq!(canceled.applied, 4000);
    let pages = |path: &std::path::Path| {
        let conn = Connection::open(path).unwrap();
        (pragma(&conn, "page_count"), pragma(&conn, "freelist_count"))
    };
    let (full, _) = pages(&path);
    let mut pruned = 0;
    loop {
        let n = store
            .prune(State::Canceled, Duration::ZERO, t(10), 1000)
            .await
            .unwrap();
        if n == 0 {
            break;
        }
        pruned += n;
    }
    assert_eq!(pruned, 4000);
    // Each batch gives back at most 1024 pages; later batches (deleting
    // nothing here) go on until only the reserve for reuse is left.
    for _ in 0..8 {
        store
            .prune(State::Canceled, Duration::ZERO, t(10), 1000)
            .await
            .unwrap();
    }
    let (after, free) = pages(&path);
    store.close().await;
    assert!(full > 8_000, "{full} pages with the tasks");
    assert_eq!(free, 2048, "the free pages kept for reuse");
    assert!(
        after < full / 2,
        "{after} pages after pruning everything (from {full})"
    );
}

/// A prune round with nothing to delete reads on a reader and never waits
/// for the writer: its search walks every finished task of its state (97 ms
/// at 250,000 tasks), which on the writer held every submit, claim and
/// completion meanwhile (phase 12's paced p99). Shown with another
/// connection holding the file's write lock: the prune must answer at once
/// instead of queueing behind the lock (the writer would wait its busy
/// timeout and fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prune_with_nothing_to_delete_does_not_wait_for_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.db");
    let store = SqliteStore::open(&path, StoreConfig::default())
        .await
        .unwrap();
    for i in 0..3 {
        store.submit(task(&format!("k{i}")), t(0)).await.unwrap();
    }
    let claimed = store
        .claim_due(3, t(1), Duration::from_secs(30), Default::default())
        .await
        .unwrap();
    for task in &claimed {
        store
            .complete(
                task.id,
                task.attempt,
                Completion::Success {
                    http_status: 200,
                    result: b"ok".to_vec(),
                    content_type: None,
                },
                t(2),
            )
            .await
            .unwrap();
    }
    let lock = Connection::open(&path).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    // Finished at 2 ms, kept for a second: nothing is due at 10 ms.
    let pruned = tokio::time::timeout(
        Duration::from_secs(30),
        store.prune(State::Success, Duration::from_secs(1), t(10), 1000),
    )
    .await
    .expect("the prune waited for the write lock");
    lock.execute_batch("ROLLBACK").unwrap();
    assert_eq!(pruned, Ok(0));
    // Due now, it deletes them all, through the writer.
    let pruned = store
        .prune(State::Success, Duration::ZERO, t(10), 1000)
        .await
        .unwrap();
    assert_eq!(pruned, 3);
}

/// A file's permission bits.
#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// A new database holds destination headers and signing
/// secrets, so the file and its `-wal` and `-shm` (which SQLite creates
/// with the database file's mode) are the owner's alone; so is a backup.
/// An existing file keeps the mode its owner gave it.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_files_are_the_owner_s_alone_and_existing_ones_keep_their_mode() {
    use std::os::unix::fs::PermissionsExt;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    let store = SqliteStore::open(&path, StoreConfig::default())
        .await
        .unwrap();
    store.submit(task("a"), t(0)).await.unwrap();
    let sidecar = |suffix: &str| {
        let mut name = path.clone().into_os_string();
        name.push(suffix);
        std::path::PathBuf::from(name)
    };
    for file in [path.clone(), sidecar("-wal"), sidecar("-shm")] {
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
    let copy = dir.path().join("copy.db");
    tc_store::backup::backup(&path, &copy, &tc_store::backup::BackupConfig::default()).unwrap();
    assert_eq!(mode(&copy), 0o600, "the backup");
    store.close().await;

    // An existing (here empty) file of the owner's choosing stays as it is.
    let shared = dir.path().join("shared.db");
    std::fs::write(&shared, b"").unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o640)).unwrap();
    let store = SqliteStore::open(&shared, StoreConfig::default())
        .await
        .unwrap();
    store.submit(task("b"), t(0)).await.unwrap();
    assert_eq!(mode(&shared), 0o640);
    store.close().await;
}
