//! Schema step 24 on a live database, now followed by step 25: 200,000
//! tasks in every state, a node of schema 23 (whose writes the triggers
//! count) claiming and ending before and during the upgrade until the
//! fence of step 25 refuses it, and a node of this version (whose
//! statements count themselves) doing every kind of write afterwards:
//! every write is counted once, by the statement or by the trigger, every
//! destination with pending tasks keeps a due mark no later than its
//! earliest task, and the queue holds exactly the unfinished tasks.

use crate::live_upgrade::{
    claims_every_due_task_once, fill_200000, is_fenced, task_id, upgrade_beside,
    writes_after_the_step,
};
use crate::support::{Raw, database};

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

/// One round of the old node: claim a task and end it; the server's error
/// once the old node is fenced.
async fn old_round(old: &Raw) -> Result<(), tokio_postgres::Error> {
    let row = old.client().query_one(OLD_CLAIM, &[]).await?;
    let id: Vec<u8> = row.get(0);
    old.client().execute(OLD_COMPLETE, &[&id]).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_24_upgrades_200000_tasks_while_a_schema_23_node_serves_and_counts_stay_exact() {
    let Some(db) = database().await else { return };
    let schema = db.schema_at(23).await.unwrap();
    let old = Raw::connect_old(&db, &schema).await;
    fill_200000(&old).await;
    let row = old.client().query_one(OLD_CLAIM, &[]).await.unwrap();
    let theirs = task_id(&row.get::<_, Vec<u8>>(0));
    old.execute(&Raw::insert_task_sql("old-before"))
        .await
        .unwrap();
    let store = upgrade_beside(db.url(), &schema, 2_000, || old_round(&old)).await;
    // After the upgrade the old node's writes are refused, whole.
    let refused = old_round(&old).await.unwrap_err();
    assert!(is_fenced(&refused), "{refused:?}");
    let submit = old.execute(&Raw::insert_task_sql("old-after")).await;
    assert!(
        submit.as_ref().is_err_and(|e| e.contains("schema 25")),
        "{submit:?}"
    );
    writes_after_the_step(&store, &old, theirs).await;
    claims_every_due_task_once(&store, &old).await;
    store.close();
    drop(store);
    db.cleanup().await.unwrap();
}
