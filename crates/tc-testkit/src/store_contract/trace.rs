//! The contract for a task's trace context: kept by every store as
//! submitted (one at a time or in a batch) and read back by `get`, a
//! listing and a claim; not part of the work, so a resubmit in another
//! trace gets the first task, whose context stays.

use tc_model::store::TaskStore;
use tc_model::{State, TraceContext};

use tc_model::destination::ClaimGate;

use super::Verdict;
use super::check::{Step, URL_A, at, claim, create, get, list_all, task_for};

fn context(parent: &str, state: Option<&str>) -> TraceContext {
    TraceContext::from_headers(Some(parent), state).unwrap()
}

/// See the module's doc.
pub async fn tasks_keep_their_trace_context<S: TaskStore>(store: S) -> Verdict {
    let caller = context(
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
    );
    let created = create(
        &store,
        task_for(URL_A, "traced").with_trace(caller.clone()),
        at(0),
    )
    .await?;
    ensure_eq!(
        get(&store, created.id).await?.trace,
        Some(caller.clone()),
        "get"
    );
    let plain = create(&store, task_for(URL_A, "untraced"), at(1)).await?;
    ensure_eq!(
        get(&store, plain.id).await?.trace,
        None,
        "a task submitted without one"
    );

    let other = context(
        "00-11111111111111111111111111111111-2222222222222222-00",
        None,
    );
    let again = store
        .submit(task_for(URL_A, "traced").with_trace(other.clone()), at(2))
        .await
        .step("resubmit in another trace")?;
    ensure!(
        !again.created && again.task.id == created.id && again.task.trace == Some(caller.clone()),
        "a resubmit in another trace gets the first task with its context: {again:?}"
    );

    let batch = store
        .submit_many(
            vec![task_for(URL_A, "batched").with_trace(other.clone())],
            at(3),
        )
        .await
        .step("submit_many")?;
    let batched = match batch.as_slice() {
        [Ok(submitted)] => get(&store, submitted.task.id).await?,
        other => return Err(format!("submit_many answered {other:?}")),
    };
    ensure_eq!(batched.trace, Some(other), "a task submitted in a batch");

    let listed = list_all(&store, Some(State::Pending)).await?;
    ensure_eq!(
        listed
            .iter()
            .find(|t| t.id == created.id)
            .map(|t| t.trace.clone()),
        Some(Some(caller.clone())),
        "the listing"
    );
    let claimed = claim(&store, 10, at(10), ClaimGate::default()).await?;
    ensure_eq!(
        claimed
            .iter()
            .find(|t| t.id == created.id)
            .map(|t| t.trace.clone()),
        Some(Some(caller)),
        "the claimed task, what the worker sends ({} claimed)",
        claimed.len()
    );
    Ok(())
}
