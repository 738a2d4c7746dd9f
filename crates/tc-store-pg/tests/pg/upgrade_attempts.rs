//! Schema step 27 on a live database: 200,000 tasks as schema 26 left
//! them, a history row for each of the 120,000 tries that ended, and a node
//! of schema 26 writing history rows (as its ends write them) before and
//! during the step. After it every row is there once, each task's tries
//! read in the order they were written, and a node of this version writes
//! and reads history through the new key, the only index left.

use std::time::Duration;

use tc_model::destination::ClaimGate;
use tc_model::store::{Completion, Tasks, Work};
use tc_model::tenant::Scope;
use tc_model::{TaskId, Timestamp};
use tc_store_pg::PgStore;
use tc_testkit::ClaimDue;

use crate::live_upgrade::{fill_200000, task_id, upgrade_beside};
use crate::support::{Raw, database, new_task};

/// The history of the tasks just filled: one row for each ended try.
const FILL_HISTORY: &str = "
INSERT INTO attempts (task_id, n, started_at, finished_at, duration_ms)
SELECT id, 1, started_at, finished_at, 0 FROM tasks
WHERE state NOT IN ('pending', 'running')";

/// A second try's history row as a schema-26 node writes it when the try
/// ends (`seq` left to its identity), for the failed task at position
/// `$1` (failed tasks are those whose position ends in 7 or 8).
const OLD_HISTORY: &str = "
INSERT INTO attempts (task_id, n, started_at, finished_at, http_status, duration_ms)
SELECT id, 2, 7, 8, 500, 1 FROM tasks WHERE pos = $1 AND state = 'failed'
";

/// The indexes of `attempts`.
const INDEXES: &str = "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'attempts'";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_27_keys_the_history_by_task_while_a_schema_26_node_writes_it() {
    let Some(db) = database().await else { return };
    let schema = db.schema_at(26).await.unwrap();
    let old = Raw::connect(&db, None, Some(&schema)).await;
    fill_200000(&old).await;
    old.execute(FILL_HISTORY).await.unwrap();
    let positions: Vec<i64> = old
        .column("SELECT pos FROM tasks WHERE state = 'failed' ORDER BY pos")
        .await;
    let mut next = positions.iter();
    let store = upgrade_beside(db.url(), &schema, 2_000, || {
        let pos = *next.next().unwrap();
        let old = &old;
        async move { old.client().execute(OLD_HISTORY, &[&pos]).await.map(drop) }
    })
    .await;
    // And once more after the step, as such a node still runs.
    let pos = next.next().unwrap();
    assert_eq!(old.client().execute(OLD_HISTORY, &[pos]).await.unwrap(), 1);
    let second_tries: Vec<TaskId> = old
        .column::<Vec<u8>>("SELECT task_id FROM attempts WHERE n = 2")
        .await
        .iter()
        .map(|id| task_id(id))
        .collect();
    assert!(second_tries.len() >= 2, "{second_tries:?}");

    let indexes: Vec<String> = old.column(INDEXES).await;
    assert_eq!(indexes, ["attempts_pkey"]);
    let rows: i64 = old
        .client()
        .query_one("SELECT count(*) FROM attempts", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 120_000 + second_tries.len() as i64);
    for id in &second_tries {
        check_tries(&store, *id, &[1, 2]).await;
    }
    new_tries(&store).await;
    store.close();
    drop(store);
    db.cleanup().await.unwrap();
}

/// The task's tries as the store reads them, by number.
async fn check_tries(store: &PgStore, id: TaskId, expected: &[u32]) {
    let task = store.get(id, Scope::Admin).await.unwrap();
    let tries: Vec<u32> = task.attempts.iter().map(|a| a.n).collect();
    assert_eq!(tries, expected, "{id}");
}

/// This version's node ends two tries of a new task (a retry, then a
/// success) and reads both back in order. (The filled tasks are not in
/// `queue`, so the claims find the new task alone.)
async fn new_tries(store: &PgStore) {
    let lease = Duration::from_secs(60);
    let now = Timestamp::from_millis(10);
    let id = store.submit(new_task("new-1"), now).await.unwrap().task.id;
    let outcomes = [
        Completion::Retry {
            next_run_at: now,
            reason: "http_503".into(),
            http_status: Some(503),
        },
        Completion::Success {
            http_status: 200,
            result: b"ok".to_vec(),
            content_type: None,
        },
    ];
    for outcome in outcomes {
        let claimed = store
            .claim_due(1, now, lease, ClaimGate::default())
            .await
            .unwrap();
        assert_eq!(claimed.iter().map(|t| t.id).collect::<Vec<_>>(), [id]);
        store
            .complete(id, claimed[0].attempt, outcome, now)
            .await
            .unwrap();
    }
    check_tries(store, id, &[1, 2]).await;
}
