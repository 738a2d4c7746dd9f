//! The counts by state and by destination against a recount of the tasks
//! after every write path of the store: since schema step 17, pending and
//! running are read from `destination_tasks` and the finished states from
//! `state_counts`; since step 27 the writer tallies both from the moves
//! each write reports (no triggers), so every path that inserts, deletes
//! or moves a task has to report its moves. A topic's publish and a
//! subscription's health go through the batch submit and the cancel, which
//! rows here cover.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;
use tc_model::callback::{Callback, CallbackOn};
use tc_model::destination::ClaimGate;
use tc_model::store::{BulkAction, BulkRequest, Completion, Guarded, StateCounts, TaskFilter};
use tc_model::store::{Tasks, Topics, Work};
use tc_model::tenant::Scope;
use tc_model::topic::event::NewEvent;
use tc_model::topic::{EventTypes, SubscriptionSpec, TopicRef, TopicSpec};
use tc_model::{Limits, NewTask, State, TaskId, Timestamp};
use tc_store::{SqliteStore, StoreConfig};
use tc_testkit::ClaimDue;

const LEASE: Duration = Duration::from_secs(30);

fn t(ms: i64) -> Timestamp {
    Timestamp::from_millis(1_700_000_000_000 + ms)
}

fn task(key: &str, destination: &str) -> NewTask {
    NewTask::new(
        format!("http://{destination}/{key}"),
        b"{}".to_vec(),
        key.to_owned(),
        2,
        Duration::from_secs(2),
        &Limits::default(),
    )
    .unwrap()
}

/// The topic the publish rows publish to.
fn orders() -> TopicRef {
    TopicRef {
        tenant: None,
        name: "orders".to_owned(),
    }
}

/// One write through the store.
enum Step {
    /// A submit (to `127.0.0.1:1` or `:2` by the key's first letter).
    Submit(&'static str),
    /// A submit that asks for a callback when it succeeds.
    SubmitWithCallback(&'static str),
    /// One batch of submits.
    SubmitMany(&'static [&'static str]),
    /// An event published to the topic `orders`: a task per subscription
    /// (one to each destination).
    Publish(&'static str),
    /// A claim of up to n due tasks (at the step's time).
    Claim(usize),
    /// The running task ends so.
    Complete(&'static str, fn(Timestamp) -> Completion),
    Cancel(&'static str),
    /// A running task given back to pending.
    Release(&'static str),
    /// Every lease expired by then.
    RecoverExpired(Timestamp),
    /// An operator's retry of a finished task.
    Retry(&'static str),
    /// A finished task's delete (the store refuses others).
    Delete(&'static str),
    Prune(State),
    Bulk(BulkAction, Option<State>),
}

fn success(_: Timestamp) -> Completion {
    Completion::Success {
        http_status: 200,
        result: b"ok".to_vec(),
        content_type: None,
    }
}

fn failed(_: Timestamp) -> Completion {
    Completion::Failed {
        reason: "http_400".into(),
        http_status: Some(400),
    }
}

fn retry_later(now: Timestamp) -> Completion {
    Completion::Retry {
        next_run_at: now,
        reason: "http_503".into(),
        http_status: Some(503),
    }
}

/// The store's counts against `SELECT state, count(*) FROM tasks GROUP BY
/// state` on a connection of its own, after `what`; the counts.
async fn check(store: &SqliteStore, path: &Path, what: &str) -> StateCounts {
    let kept = store.count_by_state().await.unwrap();
    let conn = Connection::open(path).unwrap();
    let mut recount = StateCounts::default();
    let mut stmt = conn
        .prepare("SELECT state, count(*) FROM tasks GROUP BY state")
        .unwrap();
    let mut rows = stmt.query([]).unwrap();
    while let Some(row) = rows.next().unwrap() {
        let state: State = row.get::<_, String>(0).unwrap().parse().unwrap();
        recount.set(state, u64::try_from(row.get::<_, i64>(1).unwrap()).unwrap());
    }
    assert_eq!(kept, recount, "after {what}");
    let (by_destination, recounted) = tc_store::recount::destination_counts(&conn).unwrap();
    assert_eq!(by_destination, recounted, "by destination, after {what}");
    kept
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_counts_equal_a_recount_after_every_write_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counts.db");
    let store = SqliteStore::open(&path, StoreConfig::default())
        .await
        .unwrap();
    let ids: &mut HashMap<&str, TaskId> = &mut HashMap::new();
    let steps: Vec<(&str, Step)> = vec![
        ("a submit", Step::Submit("a1")),
        ("a resubmit of the same key", Step::Submit("a1")),
        ("a second destination", Step::Submit("b1")),
        ("a batch", Step::SubmitMany(&["a2", "a3", "b2", "b3", "a4"])),
        (
            "a batch with a taken key",
            Step::SubmitMany(&["a6", "a1", "b4"]),
        ),
        ("a topic's publish", Step::Publish("e1")),
        ("a callback's parent", Step::SubmitWithCallback("a5")),
        ("a claim", Step::Claim(4)),
        ("a success", Step::Complete("a1", success)),
        ("a failure", Step::Complete("b1", failed)),
        ("a retry later", Step::Complete("a2", retry_later)),
        ("a release", Step::Release("b2")),
        ("a claim of the rest", Step::Claim(10)),
        ("a success with a callback", Step::Complete("a5", success)),
        ("a cancel of a running task", Step::Cancel("b2")),
        ("a lease recovery", Step::RecoverExpired(t(600_000))),
        ("an operator's retry of a failure", Step::Retry("b1")),
        ("an operator's retry of a cancel", Step::Retry("b2")),
        ("a cancel of a pending task", Step::Cancel("a4")),
        ("a claim after recovery", Step::Claim(2)),
        ("a delete of a success", Step::Delete("a1")),
        ("a delete of a cancel", Step::Delete("a4")),
        (
            "a bulk cancel of pending",
            Step::Bulk(BulkAction::Cancel, Some(State::Pending)),
        ),
        (
            "a bulk retry of canceled",
            Step::Bulk(BulkAction::Retry, Some(State::Canceled)),
        ),
        ("a claim of everything", Step::Claim(20)),
        ("a failure to prune", Step::Complete("b3", failed)),
        ("a prune of failed", Step::Prune(State::Failed)),
        ("a prune of success", Step::Prune(State::Success)),
        (
            "a bulk cancel of running",
            Step::Bulk(BulkAction::Cancel, Some(State::Running)),
        ),
        (
            "a bulk delete of canceled",
            Step::Bulk(BulkAction::Delete, Some(State::Canceled)),
        ),
        (
            "a bulk cancel of the rest",
            Step::Bulk(BulkAction::Cancel, None),
        ),
        (
            "a bulk delete of the rest",
            Step::Bulk(BulkAction::Delete, None),
        ),
    ];
    store
        .put_topic(orders(), TopicSpec::default(), t(0))
        .await
        .unwrap();
    for (id, url) in [
        ("s1", "http://127.0.0.1:1/e"),
        ("s2", "http://127.0.0.1:2/e"),
    ] {
        let spec = SubscriptionSpec::new(url.to_owned(), EventTypes::all()).unwrap();
        store
            .create_subscription(orders(), id.to_owned(), spec, t(0))
            .await
            .unwrap();
    }
    let mut now = t(0);
    let mut seen = StateCounts::default();
    for (what, step) in steps {
        now = Timestamp::from_millis(now.as_millis() + 1_000);
        run(&store, ids, step, now).await;
        let counts = check(&store, &path, what).await;
        for state in State::ALL {
            seen.set(state, seen.get(state).max(counts.get(state)));
        }
    }
    // Every state was counted above zero somewhere on the way.
    for state in State::ALL {
        assert!(seen.get(state) > 0, "never a task {state:?}");
    }
    let left = store.count_by_state().await.unwrap();
    assert_eq!(
        left,
        StateCounts::default(),
        "the last bulk delete left tasks"
    );
    store.close().await;
}

/// Runs one step at `now`, keeping the ids of the tasks it submits.
async fn run<'k>(
    store: &SqliteStore,
    ids: &mut HashMap<&'k str, TaskId>,
    step: Step,
    now: Timestamp,
) where
    'static: 'k,
{
    let destination = |key: &str| {
        if key.starts_with('a') {
            "127.0.0.1:1"
        } else {
            "127.0.0.1:2"
        }
    };
    let attempt = |id: TaskId| async move { store.get(id, Scope::Admin).await.unwrap().attempt };
    match step {
        Step::Submit(key) => {
            let got = store
                .submit(task(key, destination(key)), now)
                .await
                .unwrap();
            ids.insert(key, got.task.id);
        }
        Step::SubmitWithCallback(key) => {
            let callback = Callback::new(
                "http://127.0.0.1:3/cb".to_owned(),
                CallbackOn::parse(["success"]).unwrap(),
            )
            .unwrap();
            let new = task(key, destination(key)).with_callback(callback);
            ids.insert(key, store.submit(new, now).await.unwrap().task.id);
        }
        Step::SubmitMany(keys) => {
            let tasks = keys.iter().map(|k| task(k, destination(k))).collect();
            let got = store.submit_many(tasks, now).await.unwrap();
            for (key, got) in keys.iter().zip(got) {
                ids.insert(key, got.unwrap().task.id);
            }
        }
        Step::Publish(key) => {
            let new = NewEvent::new(
                orders(),
                "order.placed".to_owned(),
                b"{}".to_vec(),
                key.to_owned(),
                2,
                Duration::from_secs(2),
                &Limits::default(),
            )
            .unwrap();
            let published = store.publish(new, format!("ev-{key}"), now).await.unwrap();
            assert_eq!(published.event.tasks.len(), 2, "{key}");
        }
        Step::Claim(n) => {
            store
                .claim_due(n, now, LEASE, ClaimGate::default())
                .await
                .unwrap();
        }
        Step::Complete(key, how) => {
            let id = ids[key];
            let done = store
                .complete(id, attempt(id).await, how(now), now)
                .await
                .unwrap();
            assert!(matches!(done, Guarded::Applied(_)), "{key}: {done:?}");
        }
        Step::Cancel(key) => {
            store.cancel(ids[key], Scope::Admin, now).await.unwrap();
        }
        Step::Release(key) => {
            let id = ids[key];
            let done = store.release(id, attempt(id).await, now).await.unwrap();
            assert!(matches!(done, Guarded::Applied(_)), "{key}: {done:?}");
        }
        Step::RecoverExpired(at) => {
            store.recover_expired(at).await.unwrap();
        }
        Step::Retry(key) => {
            store.retry(ids[key], now, now, None).await.unwrap();
        }
        Step::Delete(key) => {
            store.delete(ids[key], Scope::Admin).await.unwrap();
        }
        Step::Prune(state) => {
            store
                .prune(
                    state,
                    Duration::ZERO,
                    Timestamp::from_millis(now.as_millis() + 1),
                    100,
                )
                .await
                .unwrap();
        }
        Step::Bulk(action, state) => {
            store
                .bulk(BulkRequest::new(action, TaskFilter::state(state), now))
                .await
                .unwrap();
        }
    }
}
