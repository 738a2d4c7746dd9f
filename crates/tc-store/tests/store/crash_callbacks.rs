//! A process killed while ending tasks that ask for callbacks leaves every
//! ended task with exactly one callback, and no task that did not end with
//! one: the callback is written in the transaction that ends its parent.
//!
//! The ending process is this test binary itself, run again with
//! [`CHILD_ENV`] set, as in crash.rs. And a callback insert that fails
//! (refused by a trigger of the test) takes its parent's end with it.

use std::io::{BufRead, Write};
use std::os::unix::process::ExitStatusExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tc_model::callback::{Callback, CallbackOn};
use tc_model::destination::{ClaimGate, DestinationUpdate};
use tc_model::store::{Completion, ListQuery};
use tc_model::store::{Destinations, Tasks, Work};
use tc_model::tenant::Scope;
use tc_model::{Limits, NewTask, TaskId, Timestamp};
use tc_store::{SqliteStore, StoreConfig};
use tc_testkit::ClaimDue;
use tokio::sync::mpsc;

/// Set (to the database path) in the child: the test then ends tasks.
const CHILD_ENV: &str = "TC_STORE_CALLBACK_CRASH_CHILD";
/// The test's name as libtest filters it, to run only this test in the child.
const TEST_NAME: &str = "crash_callbacks::sigkill_while_ending_tasks_leaves_one_callback_per_end";
/// The child's concurrent callers.
const CALLERS: usize = 4;
/// The child stops by itself after this, should the kill never come.
const DEADLINE: Duration = Duration::from_secs(60);
/// Ends to read before the kill.
const BEFORE_KILL: usize = 200;
/// Callbacks go to a destination of their own, paused: the child's claims
/// take only parents.
const CALLBACK_URL: &str = "http://127.0.0.2:9/done";
const CALLBACK_DESTINATION: &str = "127.0.0.2:9";

#[test]
fn sigkill_while_ending_tasks_leaves_one_callback_per_end() {
    if let Some(path) = std::env::var_os(CHILD_ENV) {
        end_until_killed(path.as_ref());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("callbacks.db");
    let (mut child, mut out) = crate::crash::spawn_child(TEST_NAME, CHILD_ENV, &path);
    let mut ended: Vec<TaskId> = Vec::new();
    let mut line = String::new();
    while ended.len() < BEFORE_KILL {
        line.clear();
        let read = out.read_line(&mut line).unwrap();
        assert!(read > 0, "child ended after {} ends", ended.len());
        ended.push(line.trim_end().parse().unwrap());
    }
    child.kill().unwrap();
    loop {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 || !line.ends_with('\n') {
            break;
        }
        ended.push(line.trim_end().parse().unwrap());
    }
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "the child was killed: {status:?}");

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = SqliteStore::open(&path, StoreConfig::default())
            .await
            .unwrap();
        let all = store
            .list(
                ListQuery {
                    limit: 1_000_000,
                    ..ListQuery::default()
                },
                Scope::Admin,
            )
            .await
            .unwrap()
            .tasks;
        let (parents, callbacks): (Vec<_>, Vec<_>) =
            all.iter().partition(|t| t.callback_of.is_none());
        for id in &ended {
            let parent = parents.iter().find(|t| t.id == *id);
            assert!(
                parent.is_some_and(|t| t.state.is_terminal()),
                "acknowledged end of {id} lost"
            );
        }
        let mut with_callback = 0;
        for parent in &parents {
            let made: Vec<_> = callbacks
                .iter()
                .filter(|c| c.callback_of == Some(parent.id))
                .collect();
            if parent.state.is_terminal() {
                with_callback += 1;
                assert_eq!(made.len(), 1, "callbacks of ended {}", parent.id);
                assert_eq!(parent.callback_task_id, Some(made[0].id));
                assert_eq!(made[0].idempotency_key, format!("callback:{}", parent.id));
            } else {
                assert_eq!(made.len(), 0, "callbacks of {} not ended", parent.id);
                assert_eq!(parent.callback_task_id, None);
            }
        }
        let distinct: std::collections::HashSet<_> = ended.iter().collect();
        assert!(with_callback >= distinct.len(), "{with_callback} ended");
        store.close().await;
    });
}

/// The child: callers submit a task asking for a callback on every end,
/// then end one (a claimed task completed, or their own canceled), and
/// write the ended task's id to stderr once the write returned, until
/// killed or `DEADLINE`.
fn end_until_killed(path: &std::path::Path) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = Arc::new(
            SqliteStore::open(path, StoreConfig::default())
                .await
                .unwrap(),
        );
        let now = Timestamp::from_millis(0);
        store
            .update_destination(
                CALLBACK_DESTINATION.to_owned(),
                DestinationUpdate {
                    paused: Some(true),
                    ..DestinationUpdate::default()
                },
                now,
            )
            .await
            .unwrap();
        let started = Instant::now();
        let (done, mut ended) = mpsc::unbounded_channel();
        for caller in 0..CALLERS {
            let (store, done) = (Arc::clone(&store), done.clone());
            tokio::spawn(async move {
                for i in (caller..).step_by(CALLERS) {
                    if started.elapsed() > DEADLINE {
                        break;
                    }
                    let on = CallbackOn::parse(["success", "failed", "canceled"]).unwrap();
                    let task = NewTask::new(
                        format!("http://127.0.0.1:9/end/{i}"),
                        b"{}".to_vec(),
                        format!("end-{i}"),
                        3,
                        Duration::from_secs(1),
                        &Limits::default(),
                    )
                    .unwrap()
                    .with_callback(Callback::new(CALLBACK_URL.to_owned(), on).unwrap());
                    let own = store.submit(task, now).await.unwrap().task.id;
                    let id = if i % 3 == 0 {
                        store.cancel(own, Scope::Admin, now).await.unwrap();
                        own
                    } else {
                        let claimed = store
                            .claim_due(1, now, Duration::from_secs(60), ClaimGate::default())
                            .await
                            .unwrap();
                        let Some(task) = claimed.into_iter().next() else {
                            continue;
                        };
                        let outcome = Completion::Success {
                            http_status: 200,
                            result: b"ok".to_vec(),
                            content_type: None,
                        };
                        store
                            .complete(task.id, task.attempt, outcome, now)
                            .await
                            .unwrap();
                        task.id
                    };
                    if done.send(id).is_err() {
                        return;
                    }
                }
            });
        }
        drop(done);
        let mut stderr = std::io::stderr().lock();
        while let Some(id) = ended.recv().await {
            writeln!(stderr, "{id}").unwrap();
            stderr.flush().unwrap();
        }
    });
}

/// When a callback's insert fails (a trigger of the test refuses it, as a
/// crash between the two writes would cut them), the parent's end is not
/// written either, on every path that ends a task; once inserts pass
/// again, each end makes exactly one callback.
#[tokio::test]
async fn an_end_whose_callback_cannot_be_written_is_not_written_either() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("refuse.db");
    let store = SqliteStore::open(&path, StoreConfig::default())
        .await
        .unwrap();
    let now = Timestamp::from_millis(1_000);
    let lease = Duration::from_secs(30);
    store
        .update_destination(
            CALLBACK_DESTINATION.to_owned(),
            DestinationUpdate {
                paused: Some(true),
                ..DestinationUpdate::default()
            },
            now,
        )
        .await
        .unwrap();
    let submit = async |key: &str, max_attempts: u32, on: &str| {
        let task = NewTask::new(
            format!("http://127.0.0.1:9/{key}"),
            b"{}".to_vec(),
            key.to_owned(),
            max_attempts,
            Duration::from_secs(1),
            &Limits::default(),
        )
        .unwrap()
        .with_callback(
            Callback::new(CALLBACK_URL.to_owned(), CallbackOn::parse([on]).unwrap()).unwrap(),
        );
        store.submit(task, now).await.unwrap().task.id
    };
    let canceled = submit("canceled", 3, "canceled").await;
    let completed = submit("completed", 3, "success").await;
    let recovered = submit("recovered", 1, "failed").await;
    let claimed = store
        .claim_due(10, now, lease, ClaimGate::default())
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
    let attempt = |id: TaskId| claimed.iter().find(|t| t.id == id).unwrap().attempt;
    let success = || Completion::Success {
        http_status: 200,
        result: b"ok".to_vec(),
        content_type: None,
    };
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "CREATE TRIGGER refuse_callbacks BEFORE INSERT ON tasks
         WHEN NEW.idempotency_key LIKE 'callback:%'
         BEGIN SELECT RAISE(ABORT, 'callbacks refused by the test'); END;",
    )
    .unwrap();
    let later = now
        .saturating_add(lease)
        .saturating_add(Duration::from_secs(1));
    assert!(store.cancel(canceled, Scope::Admin, now).await.is_err());
    assert!(
        store
            .complete(completed, attempt(completed), success(), now)
            .await
            .is_err()
    );
    assert!(store.recover_expired(later).await.is_err());
    let all = async || {
        store
            .list(
                ListQuery {
                    limit: 1000,
                    ..ListQuery::default()
                },
                Scope::Admin,
            )
            .await
            .unwrap()
            .tasks
    };
    for id in [canceled, completed, recovered] {
        let task = store.get(id, Scope::Admin).await.unwrap();
        assert_eq!(
            (task.state.is_terminal(), task.ends, task.callback_task_id),
            (false, 0, None),
            "{}: nothing of its end was written",
            task.idempotency_key
        );
    }
    assert_eq!(all().await.len(), 3, "no callback task was written");

    conn.execute_batch("DROP TRIGGER refuse_callbacks").unwrap();
    store.cancel(canceled, Scope::Admin, now).await.unwrap();
    store
        .complete(completed, attempt(completed), success(), now)
        .await
        .unwrap();
    assert_eq!(store.recover_expired(later).await.unwrap(), 1);
    // A second write on an ended task makes no second callback.
    store
        .complete(completed, attempt(completed), success(), now)
        .await
        .unwrap();
    store.cancel(canceled, Scope::Admin, now).await.unwrap();
    let tasks = all().await;
    assert_eq!(tasks.len(), 6, "one callback per end");
    for id in [canceled, completed, recovered] {
        let task = store.get(id, Scope::Admin).await.unwrap();
        let made: Vec<_> = tasks.iter().filter(|t| t.callback_of == Some(id)).collect();
        assert_eq!(made.len(), 1, "{}", task.idempotency_key);
        assert_eq!(task.callback_task_id, Some(made[0].id));
        assert_eq!((task.ends, task.state.is_terminal()), (1, true));
    }
    store.close().await;
}
