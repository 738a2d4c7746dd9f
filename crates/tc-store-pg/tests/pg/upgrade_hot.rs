//! Schema step 19 on a live database: 200,000 tasks in every
//! state, a node of schema 16 claiming and ending tasks before and during
//! the upgrade (until the fence of step 25 refuses it), and a node of this
//! version ending the old node's tries afterwards: every try is in the
//! history once, and the counts are exact.

use std::time::Duration;

use crate::live_upgrade::{
    fill_200000, is_deadlock_victim, is_fenced, open_in_background, task_id,
};
use crate::support::{Raw, database};
use tc_model::store::{Completion, Guarded};
use tc_model::store::{Tasks, Work};
use tc_model::tenant::Scope;
use tc_model::{State, Timestamp};
use tc_testkit::ClaimDue;

const LEASE: Duration = Duration::from_secs(60);

/// The history rows of the tasks just filled: an open one per running
/// task, a closed one per ended task.
const FILL_ATTEMPTS: &str = "
INSERT INTO attempts (task_id, n, started_at, finished_at, duration_ms)
SELECT id, 1, started_at, finished_at, CASE WHEN finished_at IS NOT NULL THEN 0 END
FROM tasks WHERE state <> 'pending'";

/// A claim as a schema-16 node makes it: the task moves to running and
/// its open history row is inserted; answers the task's id.
const OLD_CLAIM: &str = "
WITH due AS (
    SELECT pos FROM tasks WHERE state = 'pending' AND destination = 'h1:80'
      AND next_run_at <= 1 ORDER BY next_run_at, pos LIMIT 1 FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE tasks t SET state = 'running', attempt = t.attempt + 1, started_at = 5,
                       lease_until = 9000000000000, next_run_at = NULL, updated_at = 5
    FROM due WHERE t.pos = due.pos RETURNING t.id, t.attempt, t.started_at
), opened AS (
    INSERT INTO attempts (task_id, n, started_at) SELECT id, attempt, started_at FROM claimed
)
SELECT id FROM claimed";

/// A success as a schema-16 node writes it, for the task `$1` on try 1.
const OLD_COMPLETE: &str = "
WITH done AS (
    UPDATE tasks SET state = 'success', http_status = 200, finished_at = 6, updated_at = 6,
                     lease_until = NULL, ends = ends + 1
    WHERE id = $1 AND state = 'running' AND attempt = 1 RETURNING id
)
UPDATE attempts a SET finished_at = 6, http_status = 200, duration_ms = 1
FROM done WHERE a.task_id = done.id AND a.n = 1 AND a.finished_at IS NULL";

/// One round of the old node: claim a task and end it; the server's error
/// once the old node is fenced.
async fn old_round(old: &Raw) -> Result<Vec<u8>, tokio_postgres::Error> {
    let row = old.client().query_one(OLD_CLAIM, &[]).await?;
    let id: Vec<u8> = row.get(0);
    old.client().execute(OLD_COMPLETE, &[&id]).await?;
    Ok(id)
}

/// The old node's first round beside the upgrade, tried again while the
/// server ends it as a deadlock's victim.
async fn first_round(old: &Raw) -> Vec<u8> {
    loop {
        match old_round(old).await {
            Err(e) if is_deadlock_victim(&e) => {}
            round => return round.unwrap(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_19_upgrades_200000_tasks_while_a_schema_16_node_claims_and_ends_tries() {
    let Some(db) = database().await else { return };
    let schema = db.schema_at(16).await.unwrap();
    let old = Raw::connect_old(&db, &schema).await;
    fill_200000(&old).await;
    old.execute(FILL_ATTEMPTS).await.unwrap();
    // Claimed by the old node before the upgrade, ended by a new one after.
    let claimed_before = old.client().query_one(OLD_CLAIM, &[]).await.unwrap();
    let claimed_before = task_id(&claimed_before.get::<_, Vec<u8>>(0));

    let upgrade = open_in_background(db.url(), &schema);
    let mut old_ended = vec![first_round(&old).await];
    for _ in 0..10_000 {
        if upgrade.is_finished() {
            break;
        }
        match old_round(&old).await {
            Ok(id) => old_ended.push(id),
            Err(e) if is_fenced(&e) => break,
            Err(e) if is_deadlock_victim(&e) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    let store = upgrade.await.unwrap().unwrap();
    let refused = old_round(&old).await.unwrap_err();
    assert!(is_fenced(&refused), "{refused:?}");

    // A new node ends the old node's try: its open row is closed, no
    // second row is written.
    let now = Timestamp::from_millis(10);
    let ended = store
        .complete(
            claimed_before,
            1,
            Completion::Success {
                http_status: 200,
                result: b"ok".to_vec(),
                content_type: None,
            },
            now,
        )
        .await
        .unwrap();
    assert_eq!(ended, Guarded::Applied(State::Success));
    let task = store.get(claimed_before, Scope::Admin).await.unwrap();
    assert_eq!(task.attempts.len(), 1, "{:?}", task.attempts);
    assert_eq!(task.attempts[0].http_status, Some(200));

    // A new node's claim writes no row; its running task shows its open
    // try; its end writes the one row.
    let claimed = store
        .claim_due(3, now, LEASE, tc_model::destination::ClaimGate::default())
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
    for task in &claimed {
        let running = store.get(task.id, Scope::Admin).await.unwrap();
        assert_eq!(running.state, State::Running);
        let open: Vec<_> = running
            .attempts
            .iter()
            .filter(|a| a.finished_at.is_none())
            .collect();
        assert_eq!(open.len(), 1, "{:?}", running.attempts);
        let answer = store
            .complete(
                task.id,
                task.attempt,
                Completion::Failed {
                    reason: "http_400".into(),
                    http_status: Some(400),
                },
                now,
            )
            .await
            .unwrap();
        assert_eq!(answer, Guarded::Applied(State::Failed));
        let done = store.get(task.id, Scope::Admin).await.unwrap();
        assert_eq!(done.attempts.len(), 1, "{:?}", done.attempts);
        assert_eq!(done.attempts[0].error.as_deref(), Some("http_400"));
    }

    // Recovery closes the old node's expired tries (half the running ones).
    let recovered = store
        .recover_expired(Timestamp::from_millis(1_000))
        .await
        .unwrap();
    assert_eq!(recovered, 10_000);

    // Every try once: no task has two rows for one try, none an open row
    // unless it runs, and the old node's tasks each have their one row.
    let doubled: i64 = old
        .client()
        .query_one(
            "SELECT count(*) FROM (SELECT task_id, n FROM attempts \
             GROUP BY task_id, n HAVING count(*) > 1) AS d",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(doubled, 0);
    let open_not_running: i64 = old
        .client()
        .query_one(
            "SELECT count(*) FROM attempts a JOIN tasks t ON t.id = a.task_id \
             WHERE a.finished_at IS NULL AND t.state <> 'running'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(open_not_running, 0);
    for id in &old_ended {
        let task = store.get(task_id(id), Scope::Admin).await.unwrap();
        assert_eq!(task.state, State::Success);
        assert_eq!(task.attempts.len(), 1, "{:?}", task.attempts);
    }

    let counts = store.count_by_state().await.unwrap();
    for row in old
        .client()
        .query("SELECT state, count(*) FROM tasks GROUP BY state", &[])
        .await
        .unwrap()
    {
        let state: State = row.get::<_, String>(0).parse().unwrap();
        assert_eq!(counts.get(state) as i64, row.get::<_, i64>(1), "{state}");
    }
    store.close();
    drop(store);
    db.cleanup().await.unwrap();
}

/// How many times the test looks for the step's wait (every 10 ms: 30 s).
const LOOKS: usize = 3_000;

/// A node of schema 18 holds `attempts` (as a completion whose cached plan
/// locks it before the `tasks` of its `WITH`), then asks for `tasks`,
/// which step 19 took first while it waits for `attempts`: a deadlock. The
/// old session waits a minute before it looks for one, so the server ends
/// the step as the victim; the upgrading node tries the step again once
/// the old transaction is done, and opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_19_is_tried_again_when_it_deadlocks_with_an_old_node() {
    let Some(db) = database().await else { return };
    let schema = db.schema_at(18).await.unwrap();
    let old = Raw::connect_old(&db, &schema).await;
    old.execute("SET deadlock_timeout = '60s'; BEGIN; LOCK TABLE attempts IN ROW EXCLUSIVE MODE")
        .await
        .unwrap();
    let upgrade = open_in_background(db.url(), &schema);
    let watcher = Raw::connect(&db, None, None).await;
    let step_waits = "SELECT count(*) FROM pg_locks l \
         JOIN pg_class c ON c.oid = l.relation \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = $1 AND c.relname = 'attempts' AND NOT l.granted";
    let mut looks = 0;
    while watcher
        .client()
        .query_one(step_waits, &[&schema])
        .await
        .unwrap()
        .get::<_, i64>(0)
        == 0
    {
        looks += 1;
        assert!(
            looks < LOOKS && !upgrade.is_finished(),
            "the step never waited"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Waits until the server ends the step, then commits.
    old.execute("LOCK TABLE tasks IN ROW EXCLUSIVE MODE; COMMIT")
        .await
        .unwrap();

    let store = upgrade.await.unwrap().unwrap();
    let leased: Vec<String> = watcher
        .column(&format!(
            "SELECT indexname::text FROM pg_indexes \
             WHERE schemaname = '{schema}' AND indexname = 'tasks_leased'"
        ))
        .await;
    assert!(leased.is_empty(), "{leased:?}");
    store.close();
    drop(store);
    db.cleanup().await.unwrap();
}
