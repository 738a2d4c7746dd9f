//! Schema step 29: the state's indexes (`tasks_pending`, `tasks_ended`,
//! and `tasks_leased` for the running tasks) in place of `tasks_by_state`,
//! on a file that has a task in every state.

use std::time::Duration;

use rusqlite::Connection;
use tc_model::State;
use tc_model::destination::ClaimGate;
use tc_model::store::{Completion, ListQuery, TaskFilter, Tasks, Work};
use tc_model::tenant::Scope;
use tc_store::{SqliteStore, StoreConfig};
use tc_testkit::ClaimDue;

use crate::file::{LEASE, a_task_in_every_state, t};

/// Every state's listing (and the unfiltered one), as idempotency keys in
/// list order, walked one task a page so that the cursor is used too.
async fn listings(store: &SqliteStore) -> Vec<(Option<State>, Vec<String>)> {
    let mut all = Vec::new();
    for state in std::iter::once(None).chain(State::ALL.map(Some)) {
        let mut keys = Vec::new();
        let mut after = None;
        for _ in 0..100 {
            let query = ListQuery {
                filter: TaskFilter::state(state),
                limit: 1,
                after,
                max_result_bytes: None,
                ..ListQuery::default()
            };
            let page = store.list(query, Scope::Admin).await.unwrap();
            keys.extend(page.tasks.iter().map(|t| t.idempotency_key.clone()));
            after = page.next;
            if after.is_none() {
                break;
            }
        }
        all.push((state, keys));
    }
    all
}

/// `want`: the keys of each state's listing, in seq order.
fn check(listed: &[(Option<State>, Vec<String>)], want: &[(State, &[&str])], when: &str) {
    for (state, keys) in listed {
        let expected: Vec<&str> = match state {
            None => {
                let mut every: Vec<&str> =
                    want.iter().flat_map(|(_, k)| k.iter().copied()).collect();
                every.sort_by_key(|key| KEYS.iter().position(|k| k == key));
                every
            }
            Some(state) => want
                .iter()
                .find(|(s, _)| s == state)
                .map_or(Vec::new(), |(_, k)| k.to_vec()),
        };
        assert_eq!(keys, &expected, "{state:?} {when}");
    }
}

/// The tasks' keys in submit (seq) order.
const KEYS: [&str; 7] = [
    "done", "failed", "canceled", "running", "retrying", "waiting", "late",
];

/// A file with a task in every state, as a step-28 build left it (this
/// build writes it, then it is given back `tasks_by_state` and version
/// 28): upgraded, every state lists the same tasks, a prune finds its
/// ended tasks, and the indexes stay right through claims and ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_29_upgrades_a_file_with_a_task_in_every_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("step28.db");
    let store = SqliteStore::open(&path, StoreConfig::default())
        .await
        .unwrap();
    let ids = a_task_in_every_state(&store, &KEYS).await;
    let ok = || Completion::Success {
        http_status: 200,
        result: b"ok".to_vec(),
        content_type: None,
    };
    let every_state: [(State, &[&str]); 5] = [
        (State::Pending, &["retrying", "waiting", "late"]),
        (State::Running, &["running"]),
        (State::Success, &["done"]),
        (State::Failed, &["failed"]),
        (State::Canceled, &["canceled"]),
    ];
    let before = listings(&store).await;
    check(&before, &every_state, "before");
    let counts = store.count_by_state().await.unwrap();
    store.close().await;
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "DROP INDEX tasks_pending; DROP INDEX tasks_ended;
             CREATE INDEX tasks_by_state ON tasks (state, seq);
             PRAGMA user_version = 28;",
        )
        .unwrap();
    }

    let store = SqliteStore::open(&path, StoreConfig::default())
        .await
        .unwrap();
    assert_eq!(listings(&store).await, before, "after the upgrade");
    assert_eq!(store.count_by_state().await.unwrap(), counts);
    // The running task ends, the two due ones are claimed, one of them
    // fails for good: each index gains and loses its entries.
    store.complete(ids[3], 1, ok(), t(60)).await.unwrap();
    let claimed = store
        .claim_due(5, t(60), LEASE, ClaimGate::default())
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3, "retrying, waiting and late are due");
    let fail = Completion::Failed {
        reason: "http_404".into(),
        http_status: Some(404),
    };
    store.complete(ids[5], 1, fail, t(70)).await.unwrap();
    check(
        &listings(&store).await,
        &[
            (State::Running, &["retrying", "late"]),
            (State::Success, &["done", "running"]),
            (State::Failed, &["failed", "waiting"]),
            (State::Canceled, &["canceled"]),
        ],
        "after claims and ends",
    );
    // A prune walks `tasks_ended`: the ended tasks of a state, only those.
    let pruned = store
        .prune(State::Success, Duration::from_millis(1), t(100), 10)
        .await
        .unwrap();
    assert_eq!(pruned, 2);
    check(
        &listings(&store).await,
        &[
            (State::Running, &["retrying", "late"]),
            (State::Failed, &["failed", "waiting"]),
            (State::Canceled, &["canceled"]),
        ],
        "after the prune",
    );
    store.close().await;

    let conn = Connection::open(&path).unwrap();
    let indexes: Vec<String> = conn
        .prepare(
            "SELECT name FROM sqlite_schema WHERE type = 'index' \
             AND name IN ('tasks_by_state', 'tasks_pending', 'tasks_ended') ORDER BY name",
        )
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(indexes, ["tasks_ended", "tasks_pending"]);
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
}
