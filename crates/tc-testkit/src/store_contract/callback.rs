//! Callbacks: a task with a `callback_url` gets its callback
//! task in the same write that ends it, once per end, keyed by the end; the
//! callback fields round-trip through every read.

use tc_model::callback::{Callback, CallbackOn};
use tc_model::destination::DestinationUpdate;
use tc_model::store::{BulkAction, BulkRequest, StoreError, TaskFilter, TaskStore};
use tc_model::{NewTask, State, Task, TaskId};

use super::Verdict;
use super::check::*;
use tc_model::tenant::Scope;

/// Callbacks go to a host of their own, paused (see [`hold_callbacks`]).
const CALLBACK_URL: &str = "http://callbacks.example:9/done";

/// Pauses the callbacks' destination, so that the scenarios' claims take
/// only the tasks they name (a callback is an ordinary, due task).
async fn hold_callbacks<S: TaskStore>(store: &S) -> Verdict {
    set(
        store,
        "callbacks.example:9",
        DestinationUpdate {
            paused: Some(true),
            ..DestinationUpdate::default()
        },
        at(0),
    )
    .await?;
    Ok(())
}

/// A task asking for a callback on `on` (state names).
fn with_callback(key: &str, on: &[&str]) -> NewTask {
    new_task(key).with_callback(
        Callback::new(
            CALLBACK_URL.to_owned(),
            CallbackOn::parse(on.iter().copied()).unwrap(),
        )
        .unwrap(),
    )
}

/// Every task that is a callback of `parent`, in creation order.
async fn callbacks_of<S: TaskStore>(store: &S, parent: TaskId) -> Result<Vec<Task>, String> {
    let mut found = Vec::new();
    for listed in list_all(store, None).await? {
        if listed.callback_of == Some(parent) {
            // A listing carries no bodies: read each one whole.
            found.push(get(store, listed.id).await?);
        }
    }
    Ok(found)
}

/// Checks that `callback` is the callback of `parent`'s latest end, with
/// `key`, and that its body is `parent`'s view.
fn is_callback_of(callback: &Task, parent: &Task, key: &str) -> Verdict {
    ensure_eq!(
        parent.callback_task_id,
        Some(callback.id),
        "callback_task_id"
    );
    ensure_eq!(callback.callback_of, Some(parent.id), "callback_of");
    ensure_eq!(callback.idempotency_key, key, "the callback's key");
    ensure_eq!(callback.url, CALLBACK_URL, "the callback's url");
    ensure_eq!(
        callback.method,
        tc_model::Method::Post,
        "the callback's method"
    );
    ensure_eq!(callback.max_attempts, parent.max_attempts, "max_attempts");
    ensure_eq!(callback.timeout, parent.timeout, "timeout");
    ensure_eq!(callback.state, State::Pending, "a new callback is pending");
    ensure_eq!(callback.callback, None, "a callback asks for no callback");
    let body: serde_json::Value = serde_json::from_slice(&callback.body)
        .map_err(|e| format!("the callback's body is not JSON: {e}"))?;
    ensure_eq!(body["id"], parent.id.to_string(), "body.id");
    ensure_eq!(body["state"], parent.state.as_str(), "body.state");
    ensure_eq!(
        body["callback_task_id"],
        callback.id.to_string(),
        "body.callback_task_id"
    );
    let result = parent
        .result
        .as_deref()
        .map(|r| String::from_utf8_lossy(r).into_owned());
    ensure_eq!(
        body["result"].as_str().map(str::to_owned),
        result,
        "body.result"
    );
    ensure_eq!(body["result_truncated"], false, "body.result_truncated");
    Ok(())
}

/// Success and failure (by a completion and by a recovery that used the
/// last attempt) each create the callback with the transition; a task
/// without a `callback_url` gets none.
pub async fn a_callback_is_created_with_the_terminal_transition<S: TaskStore>(store: S) -> Verdict {
    hold_callbacks(&store).await?;
    let ok = create(
        &store,
        with_callback("cb-ok", &["success", "failed"]),
        at(0),
    )
    .await?;
    let ok = claim_only(&store, ok.id, at(10), LEASE).await?;
    let done = store
        .complete(ok.id, ok.attempt, success(200), at(20))
        .await
        .step("complete")?;
    let ok = applied(&store, ok.id, done, "complete success").await?;
    let made = callbacks_of(&store, ok.id).await?;
    ensure_eq!(made.len(), 1, "callbacks of a success");
    is_callback_of(&made[0], &ok, &format!("callback:{}", ok.id))?;

    let bad = create(&store, with_callback("cb-failed", &["failed"]), at(0)).await?;
    let bad = claim_only(&store, bad.id, at(30), LEASE).await?;
    let done = store
        .complete(bad.id, bad.attempt, failed("http_400", Some(400)), at(40))
        .await
        .step("complete")?;
    let bad = applied(&store, bad.id, done, "complete failed").await?;
    let made = callbacks_of(&store, bad.id).await?;
    ensure_eq!(made.len(), 1, "callbacks of a failure");
    is_callback_of(&made[0], &bad, &format!("callback:{}", bad.id))?;

    // Recovery fails a task whose lease ran out on its last attempt.
    let lost = create(
        &store,
        task_with("cb-lost", URL, b"{}", 1, 5_000)
            .with_callback(Callback::new(CALLBACK_URL.to_owned(), CallbackOn::default()).unwrap()),
        at(0),
    )
    .await?;
    claim_only(&store, lost.id, at(50), LEASE).await?;
    let after_lease = at(50 + LEASE.as_millis() as i64 + 1);
    store
        .recover_expired(after_lease)
        .await
        .step("recover_expired")?;
    let lost = get(&store, lost.id).await?;
    ensure_eq!(lost.state, State::Failed, "recovered on its last attempt");
    let made = callbacks_of(&store, lost.id).await?;
    ensure_eq!(made.len(), 1, "callbacks of a recovered failure");
    is_callback_of(&made[0], &lost, &format!("callback:{}", lost.id))?;

    let plain = task_in(&store, "cb-none", State::Success, at(60)).await?;
    ensure_eq!(plain.callback_task_id, None, "no callback_url, no callback");
    ensure_eq!(
        callbacks_of(&store, plain.id).await?.len(),
        0,
        "callbacks of a task without a callback_url"
    );
    Ok(())
}

/// One callback per end: a second write on an ended task makes none; a
/// task retried by hand that ends again gets `callback:{id}:{n}`.
pub async fn a_callback_is_made_once_per_end_with_the_n_th_end_s_key<S: TaskStore>(
    store: S,
) -> Verdict {
    hold_callbacks(&store).await?;
    let all = ["success", "failed", "canceled"];
    let task = create(&store, with_callback("cb-ends", &all), at(0)).await?;
    let first = store
        .cancel(task.id, Scope::Admin, at(10))
        .await
        .step("cancel")?;
    ensure_eq!(first.state, State::Canceled, "canceled");
    let again = store
        .cancel(task.id, Scope::Admin, at(11))
        .await
        .step("cancel again")?;
    ensure_eq!(again, first, "a second cancel changes nothing");
    let made = callbacks_of(&store, task.id).await?;
    ensure_eq!(made.len(), 1, "callbacks after the first end");
    is_callback_of(&made[0], &first, &format!("callback:{}", task.id))?;

    store
        .retry(task.id, at(20), at(20), None)
        .await
        .step("retry by hand")?;
    let running = claim_only(&store, task.id, at(20), LEASE).await?;
    let done = store
        .complete(
            task.id,
            running.attempt,
            failed("http_400", Some(400)),
            at(30),
        )
        .await
        .step("complete")?;
    let second = applied(&store, task.id, done, "complete failed").await?;
    let late = store
        .complete(task.id, running.attempt, success(200), at(31))
        .await
        .step("a late completion")?;
    ensure!(
        matches!(late, tc_model::store::Guarded::Lost(State::Failed)),
        "a late completion is lost, got {late:?}"
    );
    let made = callbacks_of(&store, task.id).await?;
    ensure_eq!(made.len(), 2, "callbacks after the second end");
    is_callback_of(&made[1], &second, &format!("callback:{}:2", task.id))?;
    ensure!(made[0].id != made[1].id, "two ends, two callbacks");
    Ok(())
}

/// Canceling makes a callback only for a task that asked for `canceled`,
/// whether pending or running, alone or in a bulk cancel.
pub async fn a_cancel_makes_a_callback_only_when_asked<S: TaskStore>(store: S) -> Verdict {
    hold_callbacks(&store).await?;
    let default = create(
        &store,
        with_callback("cb-default", &["success", "failed"]),
        at(0),
    )
    .await?;
    let canceled = store
        .cancel(default.id, Scope::Admin, at(5))
        .await
        .step("cancel")?;
    ensure_eq!(canceled.callback_task_id, None, "not asked for on cancel");
    ensure_eq!(
        callbacks_of(&store, default.id).await?.len(),
        0,
        "callbacks of a cancel not asked for"
    );

    let running = create(&store, with_callback("cb-running", &["canceled"]), at(0)).await?;
    claim_only(&store, running.id, at(10), LEASE).await?;
    let canceled = store
        .cancel(running.id, Scope::Admin, at(20))
        .await
        .step("cancel")?;
    let made = callbacks_of(&store, running.id).await?;
    ensure_eq!(made.len(), 1, "callbacks of a running task canceled");
    is_callback_of(&made[0], &canceled, &format!("callback:{}", running.id))?;

    let swept = create(
        &store,
        with_callback("cb-bulk", &["canceled"]),
        at(1_000_000),
    )
    .await?;
    let outcome = store
        .bulk(BulkRequest::new(
            BulkAction::Cancel,
            TaskFilter {
                idempotency_key: Some("cb-bulk".to_owned()),
                ..TaskFilter::default()
            },
            at(30),
        ))
        .await
        .step("bulk cancel")?;
    ensure_eq!(outcome.applied, 1, "bulk cancel applied");
    let swept = get(&store, swept.id).await?;
    let made = callbacks_of(&store, swept.id).await?;
    ensure_eq!(made.len(), 1, "callbacks of a bulk cancel");
    is_callback_of(&made[0], &swept, &format!("callback:{}", swept.id))?;
    Ok(())
}

/// `callback_url` and `callback_on` are kept and are part of the work (a
/// resubmit with another callback is a conflict); `callback_of` and
/// `callback_task_id` read back the same from `get` and a listing.
pub async fn callback_fields_round_trip<S: TaskStore>(store: S) -> Verdict {
    hold_callbacks(&store).await?;
    let asked = with_callback("cb-rt", &["canceled", "success"]);
    let task = create(&store, asked.clone(), at(0)).await?;
    let want = Callback::new(
        CALLBACK_URL.to_owned(),
        CallbackOn::parse(["success", "canceled"]).unwrap(),
    )
    .unwrap();
    ensure_eq!(task.callback.as_ref(), Some(&want), "submit's answer");
    ensure_eq!(
        get(&store, task.id).await?.callback,
        Some(want.clone()),
        "get"
    );
    let again = store.submit(asked, at(1)).await.step("resubmit")?;
    ensure!(!again.created, "the same callback is the same work");
    for (other, fields) in [
        (new_task("cb-rt"), vec!["callback_url", "callback_on"]),
        (
            with_callback("cb-rt", &["success", "failed"]),
            vec!["callback_on"],
        ),
    ] {
        ensure_eq!(
            store.submit(other.clone(), at(2)).await,
            Err(StoreError::IdempotencyConflict { fields }),
            "a resubmit with another callback: {:?}",
            other.callback()
        );
    }
    let batch = store
        .submit_many(vec![with_callback("cb-rt-batch", &["failed"])], at(3))
        .await
        .step("submit_many")?;
    let batched = batch
        .into_iter()
        .next()
        .ok_or("submit_many answered nothing")?
        .step("batch item")?;
    ensure_eq!(
        get(&store, batched.task.id).await?.callback.map(|c| c.on()),
        Some(CallbackOn::parse(["failed"]).unwrap()),
        "a batch item's callback_on"
    );

    let canceled = store
        .cancel(task.id, Scope::Admin, at(10))
        .await
        .step("cancel")?;
    let callback_id = canceled
        .callback_task_id
        .ok_or("cancel's answer names no callback")?;
    let listed = list_all(&store, None).await?;
    let parent_listed = listed.iter().find(|t| t.id == task.id);
    ensure_eq!(
        parent_listed.and_then(|t| t.callback_task_id),
        Some(callback_id),
        "the parent's callback_task_id in a listing"
    );
    let callback_listed = listed.iter().find(|t| t.id == callback_id);
    ensure_eq!(
        callback_listed.and_then(|t| t.callback_of),
        Some(task.id),
        "the callback's callback_of in a listing"
    );
    ensure_eq!(
        get(&store, callback_id).await?.callback_of,
        Some(task.id),
        "the callback's callback_of in get"
    );
    ensure_eq!(
        get(&store, task.id).await?.callback_task_id,
        Some(callback_id),
        "the parent's callback_task_id in get"
    );
    Ok(())
}
