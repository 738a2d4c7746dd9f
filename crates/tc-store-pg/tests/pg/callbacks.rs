//! A callback is written in the transaction that ends its parent (issue
//! 28): when the callback's insert fails (a trigger of the test refuses
//! it, as a crash between the two writes would cut them), the parent's end
//! is not written either, on every path that ends a task (a cancel, a
//! grouped completion, a recovery); once inserts pass again, each end makes
//! exactly one callback.

use std::time::Duration;

use tc_model::callback::{Callback, CallbackOn};
use tc_model::destination::{ClaimGate, DestinationUpdate};
use tc_model::store::{Completion, Guarded, ListQuery};
use tc_model::store::{Destinations, Tasks, Work};
use tc_model::{Limits, NewTask, State, Task, TaskId, Timestamp};
use tc_store_pg::{PgClock, PgConfig, PgStore};

use crate::support::database;
use tc_model::tenant::Scope;
use tc_testkit::ClaimDue;

const LEASE: Duration = Duration::from_secs(30);

fn at(ms: i64) -> Timestamp {
    Timestamp::from_millis(1_700_000_000_000 + ms)
}

fn task(key: &str, max_attempts: u32, on: &[&str]) -> NewTask {
    NewTask::new(
        format!("http://127.0.0.1:9/{key}"),
        b"{}".to_vec(),
        key.to_owned(),
        max_attempts,
        Duration::from_secs(1),
        &Limits::default(),
    )
    .unwrap()
    .with_callback(
        Callback::new(
            "http://127.0.0.2:9/done".to_owned(),
            CallbackOn::parse(on.iter().copied()).unwrap(),
        )
        .unwrap(),
    )
}

async fn callbacks_of(store: &PgStore, parent: TaskId) -> Vec<Task> {
    let all = store
        .list(
            ListQuery {
                limit: 1000,
                ..ListQuery::default()
            },
            Scope::Admin,
        )
        .await
        .unwrap()
        .tasks;
    all.into_iter()
        .filter(|t| t.callback_of == Some(parent))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_whose_callback_cannot_be_written_is_not_written_either() {
    let Some(db) = database().await else { return };
    let schema = db.fresh_schema();
    let store = PgStore::open(
        db.url(),
        PgConfig {
            clock: PgClock::Caller,
            schema: Some(schema.clone()),
            ..PgConfig::default()
        },
    )
    .await
    .unwrap();
    // The callbacks' destination is paused: claims take only the parents.
    store
        .update_destination(
            "127.0.0.2:9".to_owned(),
            DestinationUpdate {
                paused: Some(true),
                ..DestinationUpdate::default()
            },
            at(0),
        )
        .await
        .unwrap();
    let canceled = store
        .submit(task("canceled", 3, &["canceled"]), at(0))
        .await
        .unwrap()
        .task;
    let completed = store
        .submit(task("completed", 3, &["success"]), at(0))
        .await
        .unwrap()
        .task;
    let recovered = store
        .submit(task("recovered", 1, &["failed"]), at(0))
        .await
        .unwrap()
        .task;
    let claimed = store
        .claim_due(10, at(1), LEASE, ClaimGate::default())
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
    let attempt = |id: TaskId| claimed.iter().find(|t| t.id == id).unwrap().attempt;
    let success = || Completion::Success {
        http_status: 200,
        result: b"ok".to_vec(),
        content_type: None,
    };
    db.execute(&format!(
        "SET search_path TO {schema};
         CREATE FUNCTION refuse_callbacks() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.idempotency_key LIKE 'callback:%' THEN
                 RAISE EXCEPTION 'callbacks refused by the test';
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER refuse_callbacks BEFORE INSERT ON tasks
             FOR EACH ROW EXECUTE FUNCTION refuse_callbacks();"
    ))
    .await
    .unwrap();

    assert!(
        store
            .cancel(canceled.id, Scope::Admin, at(2))
            .await
            .is_err()
    );
    assert!(
        store
            .complete(completed.id, attempt(completed.id), success(), at(2))
            .await
            .is_err()
    );
    assert!(
        store
            .recover_expired(at(2).saturating_add(LEASE))
            .await
            .is_err()
    );
    for id in [canceled.id, completed.id, recovered.id] {
        let task = store.get(id, Scope::Admin).await.unwrap();
        assert_eq!(
            (task.state.is_terminal(), task.ends, task.callback_task_id),
            (false, 0, None),
            "{}: nothing of its end was written",
            task.idempotency_key
        );
        assert!(callbacks_of(&store, id).await.is_empty());
    }

    db.execute(&format!(
        "SET search_path TO {schema}; DROP TRIGGER refuse_callbacks ON tasks;"
    ))
    .await
    .unwrap();
    assert_eq!(
        store
            .cancel(canceled.id, Scope::Admin, at(3))
            .await
            .unwrap()
            .state,
        State::Canceled
    );
    assert_eq!(
        store
            .complete(completed.id, attempt(completed.id), success(), at(3))
            .await
            .unwrap(),
        Guarded::Applied(State::Success)
    );
    assert_eq!(
        store
            .recover_expired(at(3).saturating_add(LEASE))
            .await
            .unwrap(),
        1
    );
    // A second write on an ended task makes no second callback.
    assert!(matches!(
        store
            .complete(completed.id, attempt(completed.id), success(), at(4))
            .await
            .unwrap(),
        Guarded::Lost(State::Success)
    ));
    store
        .cancel(canceled.id, Scope::Admin, at(4))
        .await
        .unwrap();
    for id in [canceled.id, completed.id, recovered.id] {
        let task = store.get(id, Scope::Admin).await.unwrap();
        let made = callbacks_of(&store, id).await;
        assert_eq!(made.len(), 1, "{}", task.idempotency_key);
        assert_eq!(task.callback_task_id, Some(made[0].id));
        assert_eq!(task.ends, 1);
        assert_eq!(made[0].idempotency_key, format!("callback:{id}"));
    }
    drop(store);
    db.cleanup().await.unwrap();
}
