//! Submit and idempotency: a new key makes a task, the same key and
//! payload the same task in every state, another payload a conflict; under
//! concurrency, in batches, and with a delay.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tc_model::store::{StoreError, TaskStore};
use tc_model::{FirstRun, State, TaskId};
use tokio::task::JoinSet;

use super::Verdict;
use super::check::*;
use crate::ClaimDue;

/// A new key makes a pending task, due now, with what was submitted.
pub async fn submit_creates_a_pending_task<S: TaskStore>(store: S) -> Verdict {
    let new = task_with("order-1", URL, b"{\"n\":1}", 4, 2_500);
    let task = create(&store, new.clone(), at(0)).await?;
    ensure_eq!(task.state, State::Pending, "state");
    ensure_eq!(task.url, new.url(), "url");
    ensure_eq!(task.body, new.body(), "body");
    ensure_eq!(task.idempotency_key, new.idempotency_key(), "key");
    ensure_eq!(task.max_attempts, 4, "max_attempts");
    ensure_eq!(task.timeout, Duration::from_millis(2_500), "timeout");
    ensure_eq!(task.attempt, 0, "attempt");
    ensure_eq!(task.created_at, at(0), "created_at");
    ensure_eq!(task.updated_at, at(0), "updated_at");
    ensure_eq!(task.next_run_at, Some(at(0)), "a new task is due at once");
    ensure_eq!(
        (task.started_at, task.finished_at, task.lease_until),
        (None, None, None),
        "times of a new task"
    );
    ensure_eq!(
        (&task.http_status, &task.result, &task.error),
        (&None, &None, &None),
        "outcome of a new task"
    );
    ensure!(task.attempts.is_empty(), "a new task has no tries");
    ensure_eq!(
        get(&store, task.id).await?,
        task,
        "get returns what submit did"
    );
    Ok(())
}

/// The same key and payload give back the existing task, whatever its
/// state; nothing new is created and nothing is requeued.
pub async fn resubmit_returns_the_same_task_in_every_state<S: TaskStore>(store: S) -> Verdict {
    let mut made = Vec::new();
    for (i, state) in State::ALL.into_iter().enumerate() {
        let key = format!("key-{state}");
        made.push(task_in(&store, &key, state, at(i as i64 * 10)).await?);
    }
    // A task waiting for a retry, too.
    let waiting = create(&store, new_task("key-retrying"), at(100)).await?;
    let waiting = claim_only(&store, waiting.id, at(100), LEASE).await?;
    let waiting_id = waiting.id;
    let waiting = store
        .complete(
            waiting.id,
            1,
            retry(at(1_000_000_000), "http_503", Some(503)),
            at(101),
        )
        .await
        .step("complete")?;
    made.push(applied(&store, waiting_id, waiting, "retry").await?);

    for before in &made {
        let again = store
            .submit(new_task(&before.idempotency_key), at(500))
            .await
            .step("resubmit")?;
        ensure!(
            !again.created,
            "resubmit of a {} task created one",
            before.state
        );
        ensure_eq!(again.task, *before, "resubmit of a {} task", before.state);
        ensure_eq!(
            get(&store, before.id).await?,
            *before,
            "stored {} task",
            before.state
        );
    }
    ensure_eq!(
        list_all(&store, None).await?.len(),
        made.len(),
        "resubmits add no rows"
    );
    let claimed = store
        .claim_due(
            100,
            at(600),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure!(
        claimed.is_empty(),
        "a resubmit made something due: {claimed:?}"
    );
    Ok(())
}

/// The same key with any field of the payload changed is refused, and the
/// first task stays as it was.
pub async fn same_key_different_payload_is_a_conflict<S: TaskStore>(store: S) -> Verdict {
    let original = create(&store, task_with("k", URL, b"{}", 3, 5_000), at(0)).await?;
    let variants = [
        (
            "url",
            task_with("k", "http://127.0.0.1:9/other", b"{}", 3, 5_000),
        ),
        ("json", task_with("k", URL, b"{\"x\":1}", 3, 5_000)),
        ("max_attempts", task_with("k", URL, b"{}", 4, 5_000)),
        ("timeout_ms", task_with("k", URL, b"{}", 3, 5_001)),
        (
            "priority",
            task_with("k", URL, b"{}", 3, 5_000)
                .with_priority(4)
                .map_err(|e| e.to_string())?,
        ),
    ];
    for (field, variant) in &variants {
        let got = store.submit(variant.clone(), at(10)).await;
        ensure_eq!(
            got,
            Err(StoreError::IdempotencyConflict {
                fields: vec![*field]
            }),
            "same key, different {field}"
        );
    }
    ensure_eq!(
        get(&store, original.id).await?,
        original,
        "the original task"
    );
    // Still a conflict once the task is done.
    let task = claim_only(&store, original.id, at(20), LEASE).await?;
    store
        .complete(task.id, 1, success(200), at(30))
        .await
        .step("complete")?;
    let got = store.submit(variants[1].1.clone(), at(40)).await;
    ensure_eq!(
        got,
        Err(StoreError::IdempotencyConflict {
            fields: vec!["json"]
        }),
        "conflict after success"
    );
    ensure_eq!(list_all(&store, None).await?.len(), 1, "rows");
    Ok(())
}

/// Many concurrent submits of one key: one row, one `created`, one id.
pub async fn concurrent_submits_of_one_key_make_one_row<S: TaskStore>(store: S) -> Verdict {
    const CALLERS: usize = 200;
    let store = Arc::new(store);
    let mut callers = JoinSet::new();
    for _ in 0..CALLERS {
        let store = Arc::clone(&store);
        callers.spawn(async move { store.submit(new_task("one-key"), at(0)).await });
    }
    let mut created = 0;
    let mut seen = HashSet::new();
    while let Some(joined) = callers.join_next().await {
        let submitted = joined.unwrap().step("concurrent submit")?;
        created += usize::from(submitted.created);
        seen.insert(submitted.task.id);
    }
    ensure_eq!(created, 1, "submits that said created");
    ensure_eq!(seen.len(), 1, "distinct ids handed out");
    let counts = store.count_by_state().await.step("count_by_state")?;
    ensure_eq!(counts.get(State::Pending), 1, "pending rows");
    ensure_eq!(list_all(&*store, None).await?.len(), 1, "rows listed");
    Ok(())
}

/// Many concurrent submits of distinct keys all land, each once.
pub async fn concurrent_submits_of_distinct_keys_all_land<S: TaskStore>(store: S) -> Verdict {
    const CALLERS: usize = 200;
    let store = Arc::new(store);
    let mut callers = JoinSet::new();
    for i in 0..CALLERS {
        let store = Arc::clone(&store);
        callers.spawn(async move { store.submit(new_task(&format!("key-{i}")), at(0)).await });
    }
    let mut seen = HashSet::new();
    while let Some(joined) = callers.join_next().await {
        let submitted = joined.unwrap().step("concurrent submit")?;
        ensure!(submitted.created, "a new key said created = false");
        ensure!(seen.insert(submitted.task.id), "an id was handed out twice");
    }
    let listed = list_all(&*store, None).await?;
    ensure_eq!(listed.len(), CALLERS, "rows listed");
    let listed: HashSet<TaskId> = listed.iter().map(|t| t.id).collect();
    ensure!(listed == seen, "listed ids differ from the submitted ones");
    Ok(())
}

/// A task asked to run later is pending and not due until then; its
/// schedule is kept as asked and is part of the idempotency payload.
pub async fn a_delayed_task_waits_for_its_time_and_keeps_its_schedule<S: TaskStore>(
    store: S,
) -> Verdict {
    let later = new_task("later")
        .with_first_run(FirstRun::At(at(5_000)))
        .map_err(|e| format!("schedule: {e}"))?;
    let task = create(&store, later.clone(), at(0)).await?;
    ensure_eq!(task.first_run, FirstRun::At(at(5_000)), "schedule");
    ensure_eq!(task.next_run_at, Some(at(5_000)), "due at run_at");
    ensure_eq!(
        store.next_due().await.step("next_due")?,
        Some(at(5_000)),
        "next_due"
    );
    let early = store
        .claim_due(
            10,
            at(4_999),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure!(early.is_empty(), "claimed before its time: {early:?}");

    // The same schedule again is the same task; another is a conflict.
    let again = store.submit(later, at(100)).await.step("resubmit")?;
    ensure!(
        !again.created && again.task.id == task.id,
        "resubmit made {again:?}"
    );
    for (other, fields) in [
        (FirstRun::Now, vec!["run_at"]),
        (FirstRun::At(at(5_001)), vec!["run_at"]),
        (
            FirstRun::After(Duration::from_millis(5_000)),
            vec!["delay_ms", "run_at"],
        ),
    ] {
        let new = new_task("later")
            .with_first_run(other)
            .map_err(|e| format!("schedule: {e}"))?;
        ensure_eq!(
            store.submit(new, at(100)).await,
            Err(StoreError::IdempotencyConflict { fields }),
            "resubmit with {other:?}"
        );
    }
    let on_time = store
        .claim_due(
            10,
            at(5_000),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure_eq!(ids(&on_time), vec![task.id], "claimed on time");

    // A delay counts from the submit and repeats as the same delay.
    let delayed = new_task("delayed")
        .with_first_run(FirstRun::After(Duration::from_millis(300)))
        .map_err(|e| format!("schedule: {e}"))?;
    let task = create(&store, delayed.clone(), at(1_000)).await?;
    ensure_eq!(task.next_run_at, Some(at(1_300)), "due after its delay");
    let again = store.submit(delayed, at(2_000)).await.step("resubmit")?;
    ensure!(
        !again.created && again.task.id == task.id,
        "a later resubmit made {again:?}"
    );
    ensure_eq!(
        again.task.next_run_at,
        Some(at(1_300)),
        "the due time stays"
    );

    // A time that has passed runs at once.
    let past = new_task("past")
        .with_first_run(FirstRun::At(at(10)))
        .map_err(|e| format!("schedule: {e}"))?;
    let task = create(&store, past, at(6_000)).await?;
    ensure_eq!(
        task.next_run_at,
        Some(at(6_000)),
        "a past run_at is due now"
    );
    ensure_eq!(task.first_run, FirstRun::At(at(10)), "kept as asked");
    Ok(())
}

/// A batch answers item by item, in order, as single submits would: new
/// keys are created, a key seen earlier (in the store or in the batch) is
/// the same task, a different payload under it is a conflict.
pub async fn submit_many_answers_each_item_as_submit_would<S: TaskStore>(store: S) -> Verdict {
    let old = create(&store, new_task("old"), at(0)).await?;
    let batch = vec![
        new_task("a"),
        new_task("old"),
        task_with("old", URL, b"{}", 1, 1_000),
        new_task("b"),
        new_task("a"),
        task_with("a", URL, b"[]", 3, 5_000),
    ];
    let results = store.submit_many(batch, at(10)).await.step("submit_many")?;
    ensure_eq!(results.len(), 6, "one result per item");
    let created: Vec<Option<bool>> = results
        .iter()
        .map(|r| r.as_ref().ok().map(|s| s.created))
        .collect();
    ensure_eq!(
        created,
        vec![Some(true), Some(false), None, Some(true), Some(false), None],
        "created per item"
    );
    ensure_eq!(
        results[2].as_ref().err(),
        Some(&StoreError::IdempotencyConflict {
            fields: vec!["json", "max_attempts", "timeout_ms"]
        }),
        "a different payload under an old key"
    );
    ensure_eq!(
        results[5].as_ref().err(),
        Some(&StoreError::IdempotencyConflict {
            fields: vec!["json"]
        }),
        "a different payload under a key from earlier in the batch"
    );
    let id = |i: usize| results[i].as_ref().map(|s| s.task.id).ok();
    ensure_eq!(id(1), Some(old.id), "the old key's task");
    ensure_eq!(id(4), id(0), "a key repeated in the batch is one task");
    for i in [0, 3] {
        let task = results[i].as_ref().map_err(|e| format!("item {i}: {e}"))?;
        ensure_eq!(
            get(&store, task.task.id).await?,
            task.task,
            "item {i} as stored"
        );
    }
    let counts = store.count_by_state().await.step("count_by_state")?;
    ensure_eq!(counts.get(State::Pending), 3, "tasks after the batch");
    Ok(())
}
