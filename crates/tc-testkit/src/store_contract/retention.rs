//! Retention: deleting a finished task frees its key; pruning deletes old
//! finished tasks of one state in batches, never a live one.

use std::time::Duration;

use tc_model::store::{StoreError, TaskStore};
use tc_model::{State, Task, TaskId};

use super::Verdict;
use super::check::*;
use tc_model::tenant::Scope;

/// A finished task is deleted with its history; its key is free again. A
/// pending or running task is refused with its state, an unknown id is not
/// found.
pub async fn delete_takes_only_finished_tasks_and_frees_the_key<S: TaskStore>(store: S) -> Verdict {
    for state in [State::Pending, State::Running] {
        let task = task_in(&store, &format!("live-{state}"), state, at(0)).await?;
        ensure_eq!(
            store.delete(task.id, Scope::Admin).await,
            Err(StoreError::NotTerminal(state)),
            "delete of a {state} task"
        );
        ensure_eq!(
            get(&store, task.id).await?,
            task,
            "{state} task after refused delete"
        );
    }
    for state in [State::Success, State::Failed, State::Canceled] {
        let key = format!("done-{state}");
        let task = task_in(&store, &key, state, at(0)).await?;
        store.delete(task.id, Scope::Admin).await.step("delete")?;
        ensure_eq!(
            store.get(task.id, Scope::Admin).await,
            Err(StoreError::NotFound),
            "get after delete"
        );
        ensure_eq!(
            store.delete(task.id, Scope::Admin).await,
            Err(StoreError::NotFound),
            "second delete"
        );
        // The key is free: the same key makes a new task, even with another payload.
        let again = task_with(&key, URL, b"{\"other\":1}", 2, 1_000);
        let fresh = create(&store, again, at(10)).await?;
        ensure!(fresh.id != task.id, "the key's new task reused the old id");
        ensure_eq!(fresh.attempts.len(), 0, "the new task's history");
    }
    let counts = store.count_by_state().await.step("count_by_state")?;
    ensure_eq!(
        counts.iter().map(|(_, n)| n).sum::<u64>(),
        5,
        "tasks left after deletes: {counts:?}"
    );
    ensure_eq!(
        store
            .delete(TaskId::new(at(0), [7; 10]), Scope::Admin)
            .await,
        Err(StoreError::NotFound),
        "delete of an unknown id"
    );
    Ok(())
}

/// Retention deletes finished tasks of one state that finished before the
/// cutoff, at most `limit` at a time and oldest first; never a pending or
/// running one, never a newer one; their keys are free again.
pub async fn prune_deletes_old_finished_tasks_of_one_state_in_batches<S: TaskStore>(
    store: S,
) -> Verdict {
    let old: Vec<Task> = {
        let mut old = Vec::new();
        for n in 0..3 {
            old.push(task_in(&store, &format!("old-{n}"), State::Success, at(n)).await?);
        }
        old
    };
    let failed = task_in(&store, "old-failed", State::Failed, at(0)).await?;
    let pending = task_in(&store, "old-pending", State::Pending, at(0)).await?;
    let running = task_in(&store, "old-running", State::Running, at(0)).await?;
    let fresh = task_in(&store, "fresh", State::Success, at(5_000)).await?;
    let keep = Duration::from_secs(1);
    // At 5.5 s, finished before 4.5 s goes: the three old successes.
    let first = store
        .prune(State::Success, keep, at(5_500), 2)
        .await
        .step("prune")?;
    ensure_eq!(first, 2, "the first batch");
    ensure_eq!(
        store.get(old[0].id, Scope::Admin).await,
        Err(StoreError::NotFound),
        "oldest gone first"
    );
    ensure_eq!(
        store.get(old[1].id, Scope::Admin).await,
        Err(StoreError::NotFound),
        "second oldest gone"
    );
    ensure_eq!(
        get(&store, old[2].id).await?.state,
        State::Success,
        "left for the next batch"
    );
    let second = store
        .prune(State::Success, keep, at(5_500), 2)
        .await
        .step("prune")?;
    ensure_eq!(second, 1, "the rest");
    let third = store
        .prune(State::Success, keep, at(5_500), 2)
        .await
        .step("prune")?;
    ensure_eq!(third, 0, "nothing more");
    for (task, what) in [(&failed, "a failed task"), (&fresh, "a newer success")] {
        ensure_eq!(get(&store, task.id).await?, *task, "{what} is kept");
    }
    for state in [State::Pending, State::Running] {
        let n = store
            .prune(state, Duration::ZERO, at(1_000_000), 10)
            .await
            .step("prune")?;
        ensure_eq!(n, 0, "pruning {state} deletes nothing");
    }
    ensure_eq!(
        get(&store, pending.id).await?.state,
        State::Pending,
        "pending kept"
    );
    ensure_eq!(
        get(&store, running.id).await?.state,
        State::Running,
        "running kept"
    );
    let gone = store
        .prune(State::Failed, keep, at(5_500), 10)
        .await
        .step("prune")?;
    ensure_eq!(gone, 1, "the old failure");
    let counts = store.count_by_state().await.step("count_by_state")?;
    ensure_eq!(
        (counts.get(State::Success), counts.get(State::Failed)),
        (1, 0),
        "counts after pruning"
    );
    create(&store, new_task("old-0"), at(6_000)).await?;
    Ok(())
}

/// A store opened by one process alone leads its upkeep (lease recovery,
/// pruning) from its first moment: nothing waits for a lead no one else
/// could take. (Several processes on one PostgreSQL schema: one leads,
/// tc-store-pg's `leader` test.)
pub async fn a_lone_store_leads_its_upkeep<S: TaskStore>(store: S) -> Verdict {
    ensure_eq!(store.leads_upkeep(), true, "a lone store's lead");
    Ok(())
}
