//! The group commit (batcher.rs): completions and single submits made at
//! once share statements, and each caller still gets the answer a call of
//! its own would have had: applied or lost (with the state now), not found,
//! created, found under its key, or an idempotency conflict.

use std::sync::Arc;
use std::time::Duration;

use tc_model::destination::ClaimGate;
use tc_model::store::{Completion, Guarded, StoreError};
use tc_model::store::{Tasks, Work};
use tc_model::{Limits, NewTask, State, TaskId, Timestamp};
use tc_store_pg::{PgConfig, PgStore};

use crate::support::{database, new_task};
use tc_model::tenant::Scope;
use tc_testkit::ClaimDue;

const LEASE: Duration = Duration::from_secs(30);

fn success() -> Completion {
    Completion::Success {
        http_status: 200,
        result: b"ok".to_vec(),
        content_type: Some("text/plain".into()),
    }
}

fn retry(now: Timestamp) -> Completion {
    Completion::Retry {
        next_run_at: Timestamp::from_millis(now.as_millis() + 5_000),
        reason: "http_503".into(),
        http_status: Some(503),
    }
}

#[tokio::test]
async fn completions_made_at_once_each_get_their_own_answer() {
    let Some(db) = database().await else { return };
    let store = PgStore::open(
        db.url(),
        PgConfig {
            schema: Some(db.fresh_schema()),
            ..PgConfig::default()
        },
    )
    .await
    .unwrap();
    let store = Arc::new(store);
    let now = Timestamp::from_millis(1_000_000);
    for i in 0..4 {
        store.submit(new_task(&format!("k{i}")), now).await.unwrap();
    }
    let mut claimed = store
        .claim_due(4, now, LEASE, ClaimGate::default())
        .await
        .unwrap();
    claimed.sort_by_key(|t| t.idempotency_key.clone());
    assert_eq!(claimed.len(), 4);
    let (ok, canceled, retried, stale) = (&claimed[0], &claimed[1], &claimed[2], &claimed[3]);
    store.cancel(canceled.id, Scope::Admin, now).await.unwrap();

    // Every call at once: a success, one on a canceled task, the same
    // retry twice (one statement would update it once), a stale attempt
    // and an unknown task.
    let calls: Vec<(TaskId, u32, Completion)> = vec![
        (ok.id, ok.attempt, success()),
        (canceled.id, canceled.attempt, success()),
        (retried.id, retried.attempt, retry(now)),
        (retried.id, retried.attempt, retry(now)),
        (stale.id, stale.attempt + 1, success()),
        (TaskId::new(now, [7; 10]), 1, success()),
    ];
    let mut running = tokio::task::JoinSet::new();
    for (i, (id, attempt, outcome)) in calls.into_iter().enumerate() {
        let store = Arc::clone(&store);
        running.spawn(async move { (i, store.complete(id, attempt, outcome, now).await) });
    }
    let mut answers: Vec<(usize, Result<Guarded, StoreError>)> = running.join_all().await;
    answers.sort_by_key(|(i, _)| *i);
    let answers: Vec<Result<Guarded, StoreError>> = answers.into_iter().map(|(_, a)| a).collect();
    assert_eq!(answers[0], Ok(Guarded::Applied(State::Success)));
    assert_eq!(answers[1], Ok(Guarded::Lost(State::Canceled)));
    let mut twice = vec![answers[2].clone(), answers[3].clone()];
    twice.sort_by_key(|a| format!("{a:?}"));
    assert_eq!(
        twice,
        vec![
            Ok(Guarded::Applied(State::Pending)),
            Ok(Guarded::Lost(State::Pending))
        ]
    );
    assert_eq!(answers[4], Ok(Guarded::Lost(State::Running)));
    assert_eq!(answers[5], Err(StoreError::NotFound));

    // What was written: the success's result and closed try, the retry's
    // due time and reason, nothing on the others.
    let done = store.get(ok.id, Scope::Admin).await.unwrap();
    assert_eq!(done.state, State::Success);
    assert_eq!(done.result.as_deref(), Some(b"ok".as_slice()));
    assert_eq!(done.attempts.len(), 1);
    assert_eq!(done.attempts[0].http_status, Some(200));
    assert!(done.attempts[0].finished_at.is_some());
    let again = store.get(retried.id, Scope::Admin).await.unwrap();
    assert_eq!(again.state, State::Pending);
    assert_eq!(again.error.as_deref(), Some("http_503"));
    assert_eq!(
        again
            .attempts
            .iter()
            .filter(|a| a.finished_at.is_some())
            .count(),
        1
    );
    assert_eq!(
        store.get(stale.id, Scope::Admin).await.unwrap().state,
        State::Running
    );
    assert_eq!(
        store.get(canceled.id, Scope::Admin).await.unwrap().state,
        State::Canceled
    );
    db.cleanup().await.unwrap();
}

fn payload(key: &str, body: &[u8]) -> NewTask {
    NewTask::new(
        "http://127.0.0.1:9/x".to_owned(),
        body.to_vec(),
        key.to_owned(),
        3,
        Duration::from_secs(1),
        &Limits::default(),
    )
    .unwrap()
}

#[tokio::test]
async fn single_submits_made_at_once_are_answered_one_by_one() {
    let Some(db) = database().await else { return };
    let store = PgStore::open(
        db.url(),
        PgConfig {
            schema: Some(db.fresh_schema()),
            ..PgConfig::default()
        },
    )
    .await
    .unwrap();
    let store = Arc::new(store);
    let now = Timestamp::from_millis(1_000_000);
    // Per key: two submits of one payload and one of another, all at once.
    let mut running = tokio::task::JoinSet::new();
    for k in 0..10 {
        for body in [b"a".as_slice(), b"a", b"b"] {
            let store = Arc::clone(&store);
            let key = format!("key-{k}");
            running.spawn(async move {
                let answer = store.submit(payload(&key, body), now).await;
                (key, body, answer)
            });
        }
    }
    let answers = running.join_all().await;
    for k in 0..10 {
        let key = format!("key-{k}");
        let mine: Vec<_> = answers.iter().filter(|(got, _, _)| *got == key).collect();
        let winners: Vec<_> = mine
            .iter()
            .filter_map(|(_, body, a)| match a {
                Ok(s) if s.created => Some((*body, s.task.id)),
                _ => None,
            })
            .collect();
        assert_eq!(winners.len(), 1, "{key}: created once: {mine:?}");
        let (won_body, won_id) = winners[0];
        for (_, body, answer) in &mine {
            match answer {
                Ok(s) => {
                    assert_eq!(*body, won_body, "{key}: same work found");
                    assert_eq!(s.task.id, won_id, "{key}");
                }
                Err(e) => {
                    assert!(
                        matches!(e, StoreError::IdempotencyConflict { .. }),
                        "{key}: {e:?}"
                    );
                    assert_ne!(*body, won_body, "{key}: a conflict only on other work");
                }
            }
        }
    }
    db.cleanup().await.unwrap();
}
