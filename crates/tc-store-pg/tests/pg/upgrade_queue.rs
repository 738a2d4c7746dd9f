//! Schema step 25 on a live database: 200,000 tasks in every state as
//! schema 24 left them, a node of schema 24 (whose statements count
//! themselves, `taskcenter.writes = counted`) claiming, ending and
//! submitting before and during the step; after it every write of that
//! node to `tasks` is refused whole (no task is claimed through both
//! layouts), the queue holds exactly the unfinished tasks, the counts are
//! exact, and a node of this version does every kind of write.

use crate::live_upgrade::{
    check_counts, claims_every_due_task_once, fill_200000, is_fenced, task_id, upgrade_beside,
    writes_after_the_step,
};
use crate::support::{Raw, database};

/// A claim as a schema-24 node makes it: the task moves to running, and
/// the statement writes its own count deltas.
const OLD_CLAIM: &str = "
WITH due AS (
    SELECT pos FROM tasks WHERE state = 'pending' AND destination = 'h1:80'
      AND next_run_at <= 1 ORDER BY next_run_at, pos LIMIT 1 FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE tasks t SET state = 'running', attempt = t.attempt + 1, started_at = 5,
                       lease_until = 9000000000000, next_run_at = NULL, updated_at = 5
    FROM due WHERE t.pos = due.pos RETURNING t.id, t.destination
), counted AS (
    INSERT INTO task_count_deltas (state, destination, n)
    SELECT 'running', destination, 1 FROM claimed
    UNION ALL SELECT 'pending', destination, -1 FROM claimed
)
SELECT id FROM claimed";

/// A success as a schema-24 node writes it, for the task `$1` on try 1.
const OLD_COMPLETE: &str = "
WITH done AS (
    UPDATE tasks SET state = 'success', http_status = 200, finished_at = 6, updated_at = 6,
                     lease_until = NULL, ends = ends + 1
    WHERE id = $1 AND state = 'running' AND attempt = 1 RETURNING destination
), counted AS (
    INSERT INTO task_count_deltas (state, destination, n)
    SELECT 'success', NULL, 1 FROM done
    UNION ALL SELECT 'running', destination, -1 FROM done
)
SELECT count(*) FROM done";

/// A submit as a schema-24 node writes it: the task, its count and its
/// due mark.
fn old_submit(key: &str) -> String {
    format!(
        "WITH made AS ( \
             INSERT INTO tasks (id, idempotency_key, state, url, body, max_attempts, \
                                timeout_ns, created_at, updated_at, next_run_at) \
             VALUES (uuid_send(gen_random_uuid()), '{key}', 'pending', \
                     'http://127.0.0.1:9/x', '\\x7b7d', 3, 1000000000, 0, 0, 0) \
             RETURNING destination, next_run_at \
         ), counted AS ( \
             INSERT INTO task_count_deltas (state, destination, n) \
             SELECT 'pending', destination, 1 FROM made \
         ) \
         INSERT INTO due_marks (destination, due_at) SELECT destination, next_run_at FROM made"
    )
}

/// One round of the old node: claim a task and end it; the server's error
/// once the old node is fenced.
async fn old_round(old: &Raw) -> Result<(), tokio_postgres::Error> {
    let row = old.client().query_one(OLD_CLAIM, &[]).await?;
    let id: Vec<u8> = row.get(0);
    old.client().query_one(OLD_COMPLETE, &[&id]).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_25_moves_200000_tasks_to_the_queue_while_a_schema_24_node_is_fenced() {
    let Some(db) = database().await else { return };
    let schema = db.schema_at(24).await.unwrap();
    // The fill as a schema-23 node writes (the triggers count it); the
    // rounds as a schema-24 node (each statement counts itself).
    fill_200000(&Raw::connect_old(&db, &schema).await).await;
    let old = Raw::connect_as(&db, &schema, "-c taskcenter.writes=counted").await;
    let row = old.client().query_one(OLD_CLAIM, &[]).await.unwrap();
    let theirs = task_id(&row.get::<_, Vec<u8>>(0));
    old.execute(&old_submit("old-before")).await.unwrap();
    check_counts(&old).await;

    let store = upgrade_beside(db.url(), &schema, 2_000, || old_round(&old)).await;
    // Every write of the old node to `tasks` is refused whole: its claim,
    // its end of the task it claimed before, its submit, a heartbeat and
    // a delete.
    let refused = old_round(&old).await.unwrap_err();
    assert!(is_fenced(&refused), "{refused:?}");
    let end = old
        .client()
        .query_one(OLD_COMPLETE, &[&theirs.as_bytes().as_slice()])
        .await
        .unwrap_err();
    assert!(is_fenced(&end), "{end:?}");
    for write in [
        old_submit("old-after"),
        "UPDATE tasks SET lease_until = 1 WHERE state = 'running'".to_owned(),
        "DELETE FROM tasks WHERE state = 'success'".to_owned(),
    ] {
        let answer = old.execute(&write).await;
        assert!(
            answer.as_ref().is_err_and(|e| e.contains("schema 25")),
            "{write}: {answer:?}"
        );
    }
    writes_after_the_step(&store, &old, theirs).await;
    claims_every_due_task_once(&store, &old).await;
    store.close();
    drop(store);
    db.cleanup().await.unwrap();
}
