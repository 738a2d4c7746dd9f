//! Completion: what a guarded write does to the task it names (success,
//! retry, failure), why a stale, canceled or recovered attempt's write is
//! lost, the history of tries, and a retry by hand.

use std::time::Duration;

use tc_model::store::{Completion, Guarded, StoreError, TaskStore};
use tc_model::{State, TaskId};

use super::Verdict;
use super::check::*;
use crate::ClaimDue;
use tc_model::tenant::Scope;

/// Success writes the result and closes the try with its status.
pub async fn complete_success_records_the_result<S: TaskStore>(store: S) -> Verdict {
    let task = create(&store, new_task("s"), at(0)).await?;
    claim_only(&store, task.id, at(10), LEASE).await?;
    let outcome = Completion::Success {
        http_status: 201,
        result: b"created".to_vec(),
        content_type: Some("text/plain".to_owned()),
    };
    let done = store
        .complete(task.id, 1, outcome, at(25))
        .await
        .step("complete")?;
    let done = applied(&store, task.id, done, "complete success").await?;
    ensure_eq!(done.state, State::Success, "state");
    ensure_eq!(done.http_status, Some(201), "http_status");
    ensure_eq!(done.result.as_deref(), Some(&b"created"[..]), "result");
    ensure_eq!(
        done.result_content_type.as_deref(),
        Some("text/plain"),
        "content type"
    );
    ensure_eq!(done.error, None, "error");
    ensure_eq!(done.finished_at, Some(at(25)), "finished_at");
    ensure_eq!(done.updated_at, at(25), "updated_at");
    ensure_eq!(done.lease_until, None, "lease_until");
    ensure_eq!(done.attempt, 1, "attempt");
    ensure_eq!(
        done.attempts,
        vec![closed_try(1, at(10), at(25), Some(201), None)],
        "history"
    );
    ensure_eq!(get(&store, task.id).await?, done, "stored task");
    let again = store
        .complete(task.id, 1, success(200), at(30))
        .await
        .step("complete")?;
    ensure_eq!(again, Guarded::Lost(State::Success), "a second completion");
    ensure_eq!(
        get(&store, task.id).await?,
        done,
        "stored task after a second completion"
    );
    Ok(())
}

/// Retry goes back to pending, due at the given time, keeping the attempt.
pub async fn complete_retry_returns_to_pending_until_due<S: TaskStore>(store: S) -> Verdict {
    let task = create(&store, new_task("r"), at(0)).await?;
    claim_only(&store, task.id, at(10), LEASE).await?;
    let done = store
        .complete(task.id, 1, retry(at(5_000), "http_503", Some(503)), at(20))
        .await
        .step("complete")?;
    let done = applied(&store, task.id, done, "complete retry").await?;
    ensure_eq!(done.state, State::Pending, "state");
    ensure_eq!(done.attempt, 1, "a retry keeps the attempt count");
    ensure_eq!(done.next_run_at, Some(at(5_000)), "next_run_at");
    ensure_eq!(done.error.as_deref(), Some("http_503"), "error");
    ensure_eq!(done.http_status, Some(503), "http_status");
    ensure_eq!(done.lease_until, None, "lease_until");
    ensure_eq!(done.finished_at, None, "finished_at");
    ensure_eq!(
        done.attempts,
        vec![closed_try(1, at(10), at(20), Some(503), Some("http_503"))],
        "history"
    );
    ensure_eq!(get(&store, task.id).await?, done, "stored task");
    let early = store
        .claim_due(
            10,
            at(4_999),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure!(early.is_empty(), "claimed before the retry was due");
    let again = claim_only(&store, task.id, at(5_000), LEASE).await?;
    ensure_eq!(again.attempt, 2, "the next try's attempt");
    ensure_eq!(again.attempts.len(), 2, "tries in the history");
    ensure_eq!(again.attempts[1], open_try(2, at(5_000)), "the new try");
    Ok(())
}

/// Failed is terminal, with the reason and status.
pub async fn complete_failed_is_terminal<S: TaskStore>(store: S) -> Verdict {
    let task = create(&store, new_task("f"), at(0)).await?;
    claim_only(&store, task.id, at(10), LEASE).await?;
    let done = store
        .complete(task.id, 1, failed("http_400", Some(400)), at(40))
        .await
        .step("complete")?;
    let done = applied(&store, task.id, done, "complete failed").await?;
    ensure_eq!(done.state, State::Failed, "state");
    ensure_eq!(done.error.as_deref(), Some("http_400"), "error");
    ensure_eq!(done.http_status, Some(400), "http_status");
    ensure_eq!(done.finished_at, Some(at(40)), "finished_at");
    ensure_eq!(done.lease_until, None, "lease_until");
    ensure_eq!(
        done.attempts,
        vec![closed_try(1, at(10), at(40), Some(400), Some("http_400"))],
        "history"
    );
    ensure_eq!(get(&store, task.id).await?, done, "stored task");
    let claimed = store
        .claim_due(
            10,
            at(1_000_000),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure!(claimed.is_empty(), "a failed task was claimed");
    Ok(())
}

/// A write for an attempt other than the current one changes nothing.
pub async fn stale_attempt_write_is_lost<S: TaskStore>(store: S) -> Verdict {
    let task = create(&store, new_task("stale"), at(0)).await?;
    claim_only(&store, task.id, at(10), LEASE).await?;
    store
        .complete(task.id, 1, retry(at(20), "timeout", None), at(15))
        .await
        .step("complete")?;
    let current = claim_only(&store, task.id, at(20), LEASE).await?;
    ensure_eq!(current.attempt, 2, "second try");
    for attempt in [0, 1, 3] {
        let got = store
            .complete(task.id, attempt, success(200), at(30))
            .await
            .step("complete")?;
        ensure_eq!(
            got,
            Guarded::Lost(State::Running),
            "complete with attempt {attempt}"
        );
        let got = store
            .release(task.id, attempt, at(30))
            .await
            .step("release")?;
        ensure_eq!(
            got,
            Guarded::Lost(State::Running),
            "release with attempt {attempt}"
        );
    }
    ensure_eq!(
        get(&store, task.id).await?,
        current,
        "task after stale writes"
    );
    Ok(())
}

/// A canceled task stays canceled whatever its runner writes afterwards.
pub async fn write_after_cancel_is_lost<S: TaskStore>(store: S) -> Verdict {
    let task = create(&store, new_task("c"), at(0)).await?;
    claim_only(&store, task.id, at(10), LEASE).await?;
    let canceled = store
        .cancel(task.id, Scope::Admin, at(15))
        .await
        .step("cancel")?;
    ensure_eq!(canceled.state, State::Canceled, "state after cancel");
    for outcome in [
        success(200),
        retry(at(100), "http_503", Some(503)),
        failed("http_400", Some(400)),
    ] {
        let got = store
            .complete(task.id, 1, outcome.clone(), at(20))
            .await
            .step("complete")?;
        ensure_eq!(
            got,
            Guarded::Lost(State::Canceled),
            "complete {outcome:?} after cancel"
        );
    }
    let got = store.release(task.id, 1, at(20)).await.step("release")?;
    ensure_eq!(got, Guarded::Lost(State::Canceled), "release after cancel");
    let beat = store
        .heartbeat(vec![(task.id, 1)], at(20), LEASE)
        .await
        .step("heartbeat")?;
    ensure_eq!(
        beat,
        vec![lost(task.id, 1, Some(State::Canceled))],
        "heartbeats extended after cancel"
    );
    ensure_eq!(
        get(&store, task.id).await?,
        canceled,
        "task after late writes"
    );
    Ok(())
}

/// After its lease expired and it was recovered, the old runner's write
/// loses, both while the task waits and once it runs again.
pub async fn write_after_recovery_is_lost<S: TaskStore>(store: S) -> Verdict {
    let task = create(&store, new_task("rec"), at(0)).await?;
    claim_only(&store, task.id, at(0), Duration::from_secs(1)).await?;
    let moved = store
        .recover_expired(at(2_000))
        .await
        .step("recover_expired")?;
    ensure_eq!(moved, 1, "recovered");
    let waiting = get(&store, task.id).await?;
    ensure_eq!(waiting.state, State::Pending, "state after recovery");
    let got = store
        .complete(task.id, 1, success(200), at(2_500))
        .await
        .step("complete")?;
    ensure_eq!(
        got,
        Guarded::Lost(State::Pending),
        "old runner completes while pending"
    );
    ensure_eq!(
        get(&store, task.id).await?,
        waiting,
        "task after the lost write"
    );
    let rerun = claim_only(&store, task.id, at(3_000), LEASE).await?;
    ensure_eq!(rerun.attempt, 2, "the recovered try counted");
    let got = store
        .complete(task.id, 1, success(200), at(3_500))
        .await
        .step("complete")?;
    ensure_eq!(
        got,
        Guarded::Lost(State::Running),
        "old runner completes the new try"
    );
    ensure_eq!(
        get(&store, task.id).await?,
        rerun,
        "task after the lost write"
    );
    let got = store
        .complete(task.id, 2, success(200), at(4_000))
        .await
        .step("complete")?;
    ensure_eq!(
        applied(&store, task.id, got, "new runner").await?.state,
        State::Success,
        "new runner's write"
    );
    Ok(())
}

/// Each try is a row: number, start, end, status, error, duration.
pub async fn attempt_history_records_every_try<S: TaskStore>(store: S) -> Verdict {
    let task = create(&store, new_task("h"), at(0)).await?;
    claim_only(&store, task.id, at(100), LEASE).await?;
    store
        .complete(task.id, 1, retry(at(1_000), "http_503", Some(503)), at(350))
        .await
        .step("complete")?;
    claim_only(&store, task.id, at(1_000), LEASE).await?;
    store
        .complete(task.id, 2, retry(at(3_000), "timeout", None), at(6_000))
        .await
        .step("complete")?;
    let third = claim_only(&store, task.id, at(7_000), LEASE).await?;
    ensure_eq!(
        third.http_status,
        Some(503),
        "the last answered status is kept"
    );
    let done = store
        .complete(task.id, 3, success(200), at(7_042))
        .await
        .step("complete")?;
    let done = applied(&store, task.id, done, "complete").await?;
    let want = vec![
        closed_try(1, at(100), at(350), Some(503), Some("http_503")),
        closed_try(2, at(1_000), at(6_000), None, Some("timeout")),
        closed_try(3, at(7_000), at(7_042), Some(200), None),
    ];
    ensure_eq!(done.attempts, want, "history in the completion");
    ensure_eq!(get(&store, task.id).await?.attempts, want, "history in get");
    let listed = list_all(&store, None).await?;
    ensure_eq!(
        listed.first().map(|t| &t.attempts),
        Some(&want),
        "history in list"
    );
    Ok(())
}

/// Guarded writes on tasks that are not running change nothing and say so.
pub async fn illegal_writes_change_nothing<S: TaskStore>(store: S) -> Verdict {
    let mut tasks = Vec::new();
    for (i, state) in [
        State::Pending,
        State::Success,
        State::Failed,
        State::Canceled,
    ]
    .into_iter()
    .enumerate()
    {
        tasks.push(task_in(&store, &format!("t-{state}"), state, at(i as i64 * 10)).await?);
    }
    // Pending after a retry, with an attempt on record.
    let retrying = create(&store, new_task("retrying"), at(100)).await?;
    let retrying_id = retrying.id;
    claim_only(&store, retrying.id, at(100), LEASE).await?;
    let retrying = store
        .complete(
            retrying.id,
            1,
            retry(at(1_000_000_000), "http_500", Some(500)),
            at(110),
        )
        .await
        .step("complete")?;
    tasks.push(applied(&store, retrying_id, retrying, "retry").await?);

    for before in &tasks {
        for outcome in [success(200), retry(at(200), "x", None), failed("x", None)] {
            let got = store
                .complete(before.id, before.attempt, outcome, at(300))
                .await
                .step("complete")?;
            ensure_eq!(
                got,
                Guarded::Lost(before.state),
                "complete on a {} task",
                before.state
            );
        }
        let got = store
            .release(before.id, before.attempt, at(300))
            .await
            .step("release")?;
        ensure_eq!(
            got,
            Guarded::Lost(before.state),
            "release on a {} task",
            before.state
        );
        ensure_eq!(
            get(&store, before.id).await?,
            *before,
            "{} task after refused writes",
            before.state
        );
    }
    let beat = store
        .heartbeat(
            tasks.iter().map(|t| (t.id, t.attempt)).collect(),
            at(300),
            LEASE,
        )
        .await
        .step("heartbeat")?;
    ensure_eq!(
        beat.len(),
        tasks.len(),
        "heartbeats on tasks that are not running"
    );
    for lost in &beat {
        let task = tasks.iter().find(|t| t.id == lost.id);
        ensure_eq!(
            Some((lost.attempt, lost.state)),
            task.map(|t| (t.attempt, Some(t.state))),
            "{} lost with its attempt and state",
            lost.id
        );
    }
    Ok(())
}

/// A failed or canceled task becomes pending at `run_at` with a fresh budget:
/// attempt numbers go on, the history stays, the outcome fields are cleared.
/// Pending, running and success tasks are refused with their state.
pub async fn retry_reopens_failed_and_canceled_with_a_fresh_budget<S: TaskStore>(
    store: S,
) -> Verdict {
    for state in [State::Pending, State::Running, State::Success] {
        let task = task_in(&store, &format!("no-{state}"), state, at(0)).await?;
        ensure_eq!(
            store.retry(task.id, at(1), at(1), None).await,
            Err(StoreError::NotRetryable(state)),
            "retry of a {state} task"
        );
        ensure_eq!(
            get(&store, task.id).await?,
            task,
            "{state} task after refused retry"
        );
    }
    ensure_eq!(
        store
            .retry(TaskId::new(at(0), [7; 10]), at(1), at(1), None)
            .await,
        Err(StoreError::NotFound),
        "retry of an unknown id"
    );

    // A task that failed on its last of 2 tries.
    let task = create(&store, task_with("twice", URL, b"{}", 2, 1_000), at(0)).await?;
    for n in 1..=2 {
        let claimed = claim_only(&store, task.id, at(n * 10), LEASE).await?;
        let outcome = if n == 1 {
            Completion::Retry {
                next_run_at: at(n * 10),
                reason: "http_503".to_owned(),
                http_status: Some(503),
            }
        } else {
            failed("http_503", Some(503))
        };
        store
            .complete(task.id, claimed.attempt, outcome, at(n * 10 + 1))
            .await
            .step("complete")?;
    }
    ensure_eq!(
        get(&store, task.id).await?.state,
        State::Failed,
        "state before retry"
    );
    let reopened = store
        .retry(task.id, at(500), at(100), None)
        .await
        .step("retry")?;
    ensure_eq!(reopened.state, State::Pending, "state after retry");
    ensure_eq!(reopened.attempt, 2, "attempt numbers go on");
    ensure_eq!(reopened.attempt_in_round(), 0, "a fresh round");
    ensure_eq!(reopened.next_run_at, Some(at(500)), "due at run_at");
    ensure_eq!(
        (
            reopened.error.clone(),
            reopened.http_status,
            reopened.result.clone(),
            reopened.finished_at
        ),
        (None, None, None, None),
        "outcome fields cleared"
    );
    ensure_eq!(reopened.attempts.len(), 2, "the history keeps every try");
    ensure_eq!(get(&store, task.id).await?, reopened, "the stored task");
    let early = store
        .claim_due(
            10,
            at(499),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure!(early.is_empty(), "claimed before run_at: {early:?}");
    // Two more tries: 3 may retry, 4 is the last.
    let third = claim_only(&store, task.id, at(500), LEASE).await?;
    ensure_eq!(third.attempt, 3, "the next try's number");
    ensure!(third.can_retry(), "try 3 of the new round has a successor");
    store.release(task.id, 3, at(501)).await.step("release")?;
    let moved = store
        .recover_expired(at(502))
        .await
        .step("recover_expired")?;
    ensure_eq!(moved, 0, "nothing expired");
    let third = claim_only(&store, task.id, at(510), Duration::from_millis(1)).await?;
    let moved = store
        .recover_expired(at(600))
        .await
        .step("recover_expired")?;
    ensure_eq!(moved, 1, "the expired try");
    ensure_eq!(
        get(&store, task.id).await?.state,
        State::Pending,
        "an expired try {} of the new round goes back to pending",
        third.attempt
    );
    let fourth = claim_only(&store, task.id, at(700), LEASE).await?;
    ensure_eq!(fourth.attempt, 4, "the last try's number");
    ensure!(!fourth.can_retry(), "try 4 is the round's last");

    // A canceled task reopens too, due at once.
    let canceled = task_in(&store, "stopped", State::Canceled, at(0)).await?;
    let again = store
        .retry(canceled.id, at(800), at(800), None)
        .await
        .step("retry")?;
    ensure_eq!(again.state, State::Pending, "canceled task after retry");
    ensure_eq!(again.next_run_at, Some(at(800)), "due now");
    Ok(())
}
