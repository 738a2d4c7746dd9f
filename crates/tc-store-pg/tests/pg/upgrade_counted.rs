//! Schema step 24 on a live database: 200,000 tasks in every state, a node
//! of schema 23 (whose writes the triggers count) claiming, ending and
//! submitting before, during and after the upgrade, and a node of this
//! version (whose statements count themselves) doing every kind of write
//! beside it afterwards: every write is counted once, by the statement or
//! by the trigger, and every destination with pending tasks keeps a due
//! mark no later than its earliest task.

use std::time::Duration;

use tc_model::destination::ClaimGate;
use tc_model::store::{Completion, Guarded, Tasks, Work};
use tc_model::tenant::Scope;
use tc_model::{State, TaskId, Timestamp};
use tc_store_pg::{PgConfig, PgStore};
use tc_testkit::ClaimDue;

use crate::support::{Raw, database, new_task};

const LEASE: Duration = Duration::from_secs(60);

/// 200,000 tasks as schema 23 left them, in four transactions of 50,000
/// (positions within one count up to 65,535): pending and due, running
/// (every other one's lease already over), and ended ones.
const FILL: &str = "
INSERT INTO tasks (id, idempotency_key, state, url, body, max_attempts, timeout_ns, attempt,
                   created_at, updated_at, started_at, finished_at, next_run_at, lease_until)
SELECT uuid_send(gen_random_uuid()), 'old-' || g, s.state, 'http://h' || (g % 7) || '/x',
       '\\x7b7d', 3, 1000000000, CASE WHEN s.state = 'pending' THEN 0 ELSE 1 END, g, g,
       CASE WHEN s.state <> 'pending' THEN g END,
       CASE WHEN s.state NOT IN ('pending', 'running') THEN g END,
       CASE WHEN s.state = 'pending' THEN 0 END,
       CASE WHEN s.state = 'running' THEN
           CASE WHEN (g / 10) % 2 = 0 THEN 1 ELSE 9000000000000 END END
FROM generate_series($1::bigint, $2::bigint) AS g, LATERAL (SELECT CASE
    WHEN g % 10 < 3 THEN 'pending' WHEN g % 10 = 3 THEN 'running'
    WHEN g % 10 < 7 THEN 'success' WHEN g % 10 < 9 THEN 'failed'
    ELSE 'canceled' END AS state) AS s";

/// A claim as a schema-23 node makes it (its trigger counts it).
const OLD_CLAIM: &str = "
WITH due AS (
    SELECT pos FROM tasks WHERE state = 'pending' AND destination = 'h1:80'
      AND next_run_at <= 1 ORDER BY next_run_at, pos LIMIT 1 FOR UPDATE SKIP LOCKED
)
UPDATE tasks t SET state = 'running', attempt = t.attempt + 1, started_at = 5,
                   lease_until = 9000000000000, next_run_at = NULL, updated_at = 5
FROM due WHERE t.pos = due.pos RETURNING t.id";

/// A success as a schema-23 node writes it, for the task `$1` on try 1.
const OLD_COMPLETE: &str = "
UPDATE tasks SET state = 'success', http_status = 200, finished_at = 6, updated_at = 6,
                 lease_until = NULL, ends = ends + 1
WHERE id = $1 AND state = 'running' AND attempt = 1";

/// One round of the old node: claim a task and end it.
async fn old_round(old: &Raw) -> Vec<u8> {
    let row = old.client().query_one(OLD_CLAIM, &[]).await.unwrap();
    let id: Vec<u8> = row.get(0);
    old.client().execute(OLD_COMPLETE, &[&id]).await.unwrap();
    id
}

/// The counts' rows that differ from the tasks (none when exact): each
/// state's total, and each destination's pending and running tasks.
const MISCOUNTED: &str = "
WITH counted AS (
    SELECT state, destination, sum(n) AS n FROM (
        SELECT state, destination, n FROM task_count_totals
        UNION ALL SELECT state, '', n FROM task_count_deltas
        UNION ALL SELECT state, destination, n FROM task_count_deltas
            WHERE destination IS NOT NULL
    ) AS c GROUP BY 1, 2 HAVING sum(n) <> 0
), stored AS (
    SELECT state, '' AS destination, count(*) AS n FROM tasks GROUP BY 1
    UNION ALL
    SELECT state, destination, count(*) FROM tasks
    WHERE state IN ('pending', 'running') GROUP BY 1, 2
)
SELECT coalesce(c.state, s.state) || ' ' || coalesce(c.destination, s.destination) || ': ' ||
       coalesce(c.n, 0) || ' counted, ' || coalesce(s.n, 0) || ' stored'
FROM counted c FULL JOIN stored s ON s.state = c.state AND s.destination = c.destination
WHERE c.n IS DISTINCT FROM s.n";

/// The destinations with pending tasks whose earliest due time has no
/// mark at or before it (a claim would never walk them).
const UNMARKED: &str = "
SELECT t.destination FROM tasks t WHERE t.state = 'pending' GROUP BY t.destination
HAVING NOT EXISTS (SELECT 1 FROM pending_destinations p
                   WHERE p.destination = t.destination AND p.next_due <= min(t.next_run_at))
   AND NOT EXISTS (SELECT 1 FROM due_marks m
                   WHERE m.destination = t.destination AND m.due_at <= min(t.next_run_at))";

async fn check_counts(old: &Raw) {
    let wrong: Vec<String> = old
        .client()
        .query(MISCOUNTED, &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(wrong.is_empty(), "{wrong:?}");
    let unmarked: Vec<String> = old
        .client()
        .query(UNMARKED, &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(unmarked.is_empty(), "{unmarked:?}");
}

fn task_id(bytes: &[u8]) -> TaskId {
    TaskId::from_bytes(bytes.try_into().unwrap())
}

/// Every write of this version's node, beside the old node's.
async fn new_writes(store: &PgStore, old: &Raw, now: Timestamp) {
    let sub = store.submit(new_task("new-1"), now).await.unwrap();
    let batch = vec![new_task("new-2"), new_task("new-3"), new_task("new-4")];
    store.submit_many(batch, now).await.unwrap();
    let claimed = store
        .claim_due(8, now, LEASE, ClaimGate::default())
        .await
        .unwrap();
    assert_eq!(claimed.len(), 8);
    let retry = Completion::Retry {
        next_run_at: Timestamp::from_millis(20),
        reason: "http_503".into(),
        http_status: Some(503),
    };
    let failed = Completion::Failed {
        reason: "http_400".into(),
        http_status: Some(400),
    };
    let success = Completion::Success {
        http_status: 200,
        result: b"ok".to_vec(),
        content_type: None,
    };
    for (task, outcome) in claimed.iter().zip([retry, failed.clone(), success]) {
        store
            .complete(task.id, task.attempt, outcome, now)
            .await
            .unwrap();
    }
    let released = store.release(claimed[3].id, claimed[3].attempt, now).await;
    assert_eq!(released.unwrap(), Guarded::Applied(State::Pending));
    store
        .cancel(claimed[4].id, Scope::Admin, now)
        .await
        .unwrap();
    store.cancel(sub.task.id, Scope::Admin, now).await.unwrap();
    store.retry(claimed[1].id, now, now, None).await.unwrap();
    store.delete(claimed[2].id, Scope::Admin).await.unwrap();
    let pruned = store
        .prune(
            State::Canceled,
            Duration::ZERO,
            Timestamp::from_millis(99),
            100,
        )
        .await
        .unwrap();
    assert!(pruned > 0);
    // The old node's task, claimed before, ended by the new node.
    let row = old.client().query_one(OLD_CLAIM, &[]).await.unwrap();
    let theirs = task_id(&row.get::<_, Vec<u8>>(0));
    let ended = store.complete(theirs, 1, failed, now).await.unwrap();
    assert_eq!(ended, Guarded::Applied(State::Failed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_24_upgrades_200000_tasks_while_a_schema_23_node_serves_and_counts_stay_exact() {
    let Some(db) = database().await else { return };
    let schema = db.schema_at(23).await.unwrap();
    let old = Raw::connect(&db, None, Some(&schema)).await;
    for part in 0..4i64 {
        let (from, to) = (part * 50_000 + 1, (part + 1) * 50_000);
        old.client().execute(FILL, &[&from, &to]).await.unwrap();
    }
    let upgrade = tokio::spawn({
        let (url, schema) = (db.url().to_owned(), schema.clone());
        async move {
            let config = PgConfig {
                schema: Some(schema),
                pool_size: 2,
                clock: tc_store_pg::PgClock::Caller,
                ..PgConfig::default()
            };
            PgStore::open(&url, config).await
        }
    });
    let mut rounds = 1;
    old_round(&old).await;
    while !upgrade.is_finished() && rounds < 2_000 {
        old_round(&old).await;
        rounds += 1;
    }
    let store = upgrade.await.unwrap().unwrap();
    // The old node goes on after the upgrade: its claims, ends and
    // submits still count (through the triggers) and mark.
    for _ in 0..5 {
        old_round(&old).await;
    }
    old.execute(&Raw::insert_task_sql("old-after"))
        .await
        .unwrap();
    check_counts(&old).await;

    let now = Timestamp::from_millis(10);
    new_writes(&store, &old, now).await;
    let recovered = store
        .recover_expired(Timestamp::from_millis(1_000))
        .await
        .unwrap();
    assert_eq!(recovered, 10_000);
    check_counts(&old).await;
    // The old node's task submitted after the upgrade is claimed.
    let mut found = false;
    for _ in 0..200 {
        let claimed = store
            .claim_due(
                1_000,
                Timestamp::from_millis(100),
                LEASE,
                ClaimGate::default(),
            )
            .await
            .unwrap();
        found |= claimed.iter().any(|t| t.idempotency_key == "old-after");
        if found || claimed.is_empty() {
            break;
        }
    }
    assert!(found, "the old node's task was never claimed");
    check_counts(&old).await;
    store.close();
    drop(store);
    db.cleanup().await.unwrap();
}
