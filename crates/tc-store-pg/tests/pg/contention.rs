//! Writes that must not wait on one another: state changes beside an open
//! transaction that changed other tasks' states, bulk actions beside single
//! writes on many connections, and batches that share keys in opposite
//! orders. Each runs bounded loops; a wait that should not exist shows as a
//! lock timeout or a deadlock, never as a measured time.

use std::sync::Arc;

use tc_model::destination::ClaimGate;
use tc_model::store::{BulkAction, BulkRequest, Completion, StoreError, TaskFilter};
use tc_model::store::{Tasks, Work};
use tc_model::{Limits, NewTask, State, TaskId, Timestamp};
use tc_store_pg::testing::TestDatabase;
use tc_store_pg::{PgConfig, PgStore};

use crate::support::{Raw, database, new_task};
use tc_model::tenant::Scope;
use tc_testkit::ClaimDue;

const LEASE: std::time::Duration = std::time::Duration::from_secs(30);

async fn open(db: &TestDatabase, pool_size: usize) -> (PgStore, String) {
    let schema = db.fresh_schema();
    let store = PgStore::open(
        db.url(),
        PgConfig {
            schema: Some(schema.clone()),
            pool_size,
            ..PgConfig::default()
        },
    )
    .await
    .unwrap();
    (store, schema)
}

async fn backend_pid(raw: &Raw) -> i32 {
    raw.client()
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

/// The state counts as the tasks themselves say, read outside the store.
async fn counted(raw: &Raw) -> Vec<(String, i64)> {
    raw.client()
        .query(
            "SELECT state, count(*) FROM tasks GROUP BY state ORDER BY state",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

async fn store_counts(store: &PgStore) -> Vec<(String, i64)> {
    let counts = store.count_by_state().await.unwrap();
    State::ALL
        .into_iter()
        .filter(|s| counts.get(*s) > 0)
        .map(|s| (s.as_str().to_owned(), counts.get(s) as i64))
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_iter()
        .collect()
}

/// A pending task's cancel as a node of this version writes it: the task,
/// its queue row and its count deltas in one statement (schema steps 24
/// and 25).
fn cancel_sql(key: &str) -> String {
    format!(
        "WITH moved AS ( \
             UPDATE tasks SET state = 'canceled' WHERE idempotency_key = '{key}' \
             RETURNING pos, destination \
         ), gone AS ( \
             DELETE FROM queue WHERE pos IN (SELECT pos FROM moved) \
         ) \
         INSERT INTO task_count_deltas (state, destination, n) \
         SELECT 'canceled', NULL, 1 FROM moved \
         UNION ALL SELECT 'pending', destination, -1 FROM moved"
    )
}

/// A transaction that changed one task's state and is still open (a bulk
/// chunk, say) makes no other state change wait, not even one from a
/// backend that counted into the same counter shard before (pid mod 64).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_change_never_waits_for_another_open_transactions_counts() {
    let Some(db) = database().await else { return };
    let (store, schema) = open(&db, 2).await;
    let now = Timestamp::default();
    for key in ["held", "free"] {
        store.submit(new_task(key), now).await.unwrap();
    }
    let holder = Raw::connect(&db, None, Some(&schema)).await;
    let shard = backend_pid(&holder).await % 64;
    // New backends get the next pids: within a few hundred connections one
    // shares the holder's shard.
    let mut other = None;
    for _ in 0..1000 {
        let raw = Raw::connect(&db, None, Some(&schema)).await;
        if backend_pid(&raw).await % 64 == shard {
            other = Some(raw);
            break;
        }
    }
    let other = other.expect("a backend in the holder's shard within 1000 connections");
    holder
        .execute(&format!("BEGIN; {}", cancel_sql("held")))
        .await
        .unwrap();
    let changed = other
        .execute(&format!("SET lock_timeout = '5s'; {}", cancel_sql("free")))
        .await;
    assert_eq!(changed, Ok(()), "the second state change waited");
    holder.execute("COMMIT").await.unwrap();
    assert_eq!(
        store_counts(&store).await,
        [("canceled".to_owned(), 2)],
        "counts after both"
    );
    db.cleanup().await.unwrap();
}

fn keyed(key: String, url: &str) -> NewTask {
    NewTask::new(
        url.to_owned(),
        b"{}".to_vec(),
        key,
        1,
        std::time::Duration::from_secs(1),
        &Limits::default(),
    )
    .unwrap()
}

/// What one concurrent actor saw: how many operations it ran, and every
/// error the store answered that is not a legitimate answer.
#[derive(Default)]
struct Seen {
    ops: u64,
    errors: Vec<String>,
}

impl Seen {
    fn note<T>(&mut self, what: &str, result: Result<T, StoreError>) -> Option<T> {
        self.ops += 1;
        match result {
            Ok(value) => Some(value),
            // The task was deleted by a bulk delete, or moved on: answers.
            Err(StoreError::NotFound | StoreError::NotTerminal(_)) => None,
            Err(e) => {
                self.errors.push(format!("{what}: {e}"));
                None
            }
        }
    }
}

/// Bulk retry, cancel and delete run again and again beside claims,
/// completions, cancels and batch submits on sixteen connections: no
/// operation fails (no deadlock, no lock timeout), and the state counts
/// equal the tasks' states at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bulk_actions_beside_single_writes_never_fail() {
    let Some(db) = database().await else { return };
    let (store, schema) = open(&db, 16).await;
    let store = Arc::new(store);
    let now = Timestamp::default();
    let hosts = ["http://127.0.0.1:9/a", "http://127.0.0.1:10/b"];
    let seeded: Vec<NewTask> = (0..800)
        .map(|i| keyed(format!("seed-{i}"), hosts[i % 2]))
        .collect();
    let ids: Arc<Vec<TaskId>> = Arc::new(
        store
            .submit_many(seeded, now)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.unwrap().task.id)
            .collect(),
    );

    let mut actors = tokio::task::JoinSet::new();
    for w in 0..4u64 {
        let store = Arc::clone(&store);
        actors.spawn(async move {
            let mut seen = Seen::default();
            for round in 0..40u64 {
                let claimed = seen
                    .note(
                        "claim",
                        store.claim_due(8, now, LEASE, ClaimGate::default()).await,
                    )
                    .unwrap_or_default();
                for (i, task) in claimed.into_iter().enumerate() {
                    let outcome = if (round + i as u64 + w).is_multiple_of(3) {
                        Completion::Failed {
                            reason: "http_500".into(),
                            http_status: Some(500),
                        }
                    } else {
                        Completion::Success {
                            http_status: 200,
                            result: b"ok".to_vec(),
                            content_type: None,
                        }
                    };
                    let done = store.complete(task.id, task.attempt, outcome, now).await;
                    seen.note("complete", done);
                }
            }
            seen
        });
    }
    for c in 0..2u64 {
        let (store, ids) = (Arc::clone(&store), Arc::clone(&ids));
        actors.spawn(async move {
            let mut seen = Seen::default();
            let mut rng = fastrand::Rng::with_seed(c);
            for _ in 0..120 {
                let id = ids[rng.usize(..ids.len())];
                let canceled = store.cancel(id, Scope::Admin, now).await;
                seen.note("cancel", canceled);
            }
            seen
        });
    }
    {
        let store = Arc::clone(&store);
        actors.spawn(async move {
            let mut seen = Seen::default();
            for round in 0..10 {
                let batch = (0..50)
                    .map(|i| keyed(format!("late-{round}-{i}"), hosts[i % 2]))
                    .collect();
                let submitted = store.submit_many(batch, now).await;
                seen.note("submit_many", submitted);
            }
            seen
        });
    }
    {
        let store = Arc::clone(&store);
        actors.spawn(async move {
            let mut seen = Seen::default();
            for _ in 0..12 {
                for (action, state) in [
                    (BulkAction::Retry, State::Failed),
                    (BulkAction::Cancel, State::Pending),
                    (BulkAction::Delete, State::Canceled),
                    (BulkAction::Cancel, State::Running),
                ] {
                    let filter = TaskFilter::state(Some(state));
                    let done = store.bulk(BulkRequest::new(action, filter, now)).await;
                    seen.note(action.as_str(), done);
                }
            }
            seen
        });
    }
    let mut ops = 0;
    let mut errors = Vec::new();
    while let Some(seen) = actors.join_next().await {
        let seen = seen.unwrap();
        ops += seen.ops;
        errors.extend(seen.errors);
    }
    // 160 claims, 240 cancels, 10 batches and 48 bulk actions, plus a
    // completion per task claimed.
    assert!(ops > 458, "the actors ran: {ops} operations");
    assert!(
        errors.is_empty(),
        "{} of {ops} operations failed:\n{}",
        errors.len(),
        errors.join("\n")
    );
    let raw = Raw::connect(&db, None, Some(&schema)).await;
    assert_eq!(store_counts(&store).await, counted(&raw).await);
    db.cleanup().await.unwrap();
}

/// Two batches with the same keys, one in reverse order, sent at once:
/// neither fails, each key is created once, both batches answer it with
/// the same task, and a key whose payloads differ is a conflict for
/// exactly one of the two.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batches_with_the_same_keys_in_opposite_orders_never_deadlock() {
    let Some(db) = database().await else { return };
    let (store, _) = open(&db, 4).await;
    let store = Arc::new(store);
    let now = Timestamp::default();
    for round in 0..8 {
        let keys: Vec<String> = (0..200).map(|i| format!("r{round}-{i:03}")).collect();
        // Every tenth key carries another url in the second batch.
        let forward: Vec<NewTask> = keys
            .iter()
            .map(|k| keyed(k.clone(), "http://127.0.0.1:9/a"))
            .collect();
        let backward: Vec<NewTask> = keys
            .iter()
            .enumerate()
            .rev()
            .map(|(i, k)| {
                let url = if i % 10 == 0 {
                    "http://127.0.0.1:9/other"
                } else {
                    "http://127.0.0.1:9/a"
                };
                keyed(k.clone(), url)
            })
            .collect();
        let (a, b) = (Arc::clone(&store), Arc::clone(&store));
        let first = tokio::spawn(async move { a.submit_many(forward, now).await });
        let second = tokio::spawn(async move { b.submit_many(backward, now).await });
        let first = first
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("round {round}, forward: {e}"));
        let mut second = second
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("round {round}, backward: {e}"));
        second.reverse();
        for (i, (one, two)) in first.iter().zip(&second).enumerate() {
            match (one, two) {
                (Ok(one), Ok(two)) => {
                    assert_ne!(
                        i % 10,
                        0,
                        "round {round}, key {i}: both took differing payloads"
                    );
                    assert_eq!(one.task.id, two.task.id, "round {round}, key {i}");
                    assert!(
                        one.created != two.created,
                        "round {round}, key {i}: created once"
                    );
                }
                (Ok(won), Err(StoreError::IdempotencyConflict { .. }))
                | (Err(StoreError::IdempotencyConflict { .. }), Ok(won)) => {
                    assert_eq!(i % 10, 0, "round {round}, key {i}: a conflict");
                    assert!(won.created, "round {round}, key {i}");
                }
                other => panic!("round {round}, key {i}: {other:?}"),
            }
        }
    }
    db.cleanup().await.unwrap();
}
