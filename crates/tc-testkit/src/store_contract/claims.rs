//! Claims and leases: what a claim takes and in which order, concurrent
//! claimers, cancel in every state, heartbeats, release and the recovery of
//! expired leases.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tc_model::store::{Guarded, StoreError, TaskStore};
use tc_model::{State, TaskId, Timestamp};
use tokio::task::JoinSet;

use super::Verdict;
use super::check::*;
use crate::ClaimDue;
use tc_model::tenant::Scope;

/// Claims take due tasks by due time (then creation order), skip the ones
/// not yet due, and mark each running with a lease and an open try.
pub async fn claim_takes_the_oldest_due_first<S: TaskStore>(store: S) -> Verdict {
    // Created in one order, due in another.
    let a = create(&store, new_task("a"), at(30)).await?;
    let b = create(&store, new_task("b"), at(10)).await?;
    let c = create(&store, new_task("c"), at(20)).await?;
    let d = create(&store, new_task("d"), at(1_000)).await?;
    let e = create(&store, new_task("e"), at(20)).await?;

    let none = store
        .claim_due(
            0,
            at(100),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due(0, tc_model::destination::ClaimGate::default())")?;
    ensure!(
        none.is_empty(),
        "claim_due(0, tc_model::destination::ClaimGate::default()) claimed {}",
        none.len()
    );
    let first = store
        .claim_due(
            2,
            at(100),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure_eq!(ids(&first), vec![b.id, c.id], "first two by due time");
    let second = store
        .claim_due(
            10,
            at(100),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure_eq!(
        ids(&second),
        vec![e.id, a.id],
        "the rest of the due ones, ties by creation"
    );
    for task in first.iter().chain(&second) {
        let task = &with_history(&store, task.clone()).await?;
        ensure_eq!(task.state, State::Running, "claimed state");
        ensure_eq!(task.attempt, 1, "claimed attempt");
        ensure_eq!(task.started_at, Some(at(100)), "started_at");
        ensure_eq!(
            task.lease_until,
            Some(at(100).saturating_add(LEASE)),
            "lease_until"
        );
        ensure_eq!(
            task.attempts,
            vec![open_try(1, at(100))],
            "history of a claimed task"
        );
        ensure_eq!(
            get(&store, task.id).await?,
            *task,
            "claim returns the stored task"
        );
    }
    let early = store
        .claim_due(
            10,
            at(999),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure!(
        early.is_empty(),
        "claimed a task before it was due: {:?}",
        ids(&early)
    );
    let on_time = store
        .claim_due(
            10,
            at(1_000),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure_eq!(ids(&on_time), vec![d.id], "due exactly now is due");
    Ok(())
}

/// Concurrent claimers over many tasks: every task claimed exactly once.
pub async fn concurrent_claimers_never_share_a_task<S: TaskStore>(store: S) -> Verdict {
    const TASKS: usize = 200;
    const CLAIMERS: usize = 8;
    let mut submitted = HashSet::new();
    for i in 0..TASKS {
        submitted.insert(create(&store, new_task(&format!("t{i}")), at(0)).await?.id);
    }
    let store = Arc::new(store);
    let mut claimers = JoinSet::new();
    for _ in 0..CLAIMERS {
        let store = Arc::clone(&store);
        claimers.spawn(async move {
            let mut mine = Vec::new();
            for _ in 0..TASKS {
                let batch = store
                    .claim_due(7, at(1), LEASE, tc_model::destination::ClaimGate::default())
                    .await?;
                if batch.is_empty() {
                    break;
                }
                mine.extend(batch);
            }
            Ok::<_, StoreError>(mine)
        });
    }
    let mut claimed = HashSet::new();
    while let Some(joined) = claimers.join_next().await {
        for task in joined.unwrap().step("claim_due")? {
            ensure!(claimed.insert(task.id), "task {} claimed twice", task.id);
            ensure_eq!(task.attempt, 1, "attempt of a claimed task");
        }
    }
    ensure!(
        claimed == submitted,
        "claimed {} of {TASKS} tasks",
        claimed.len()
    );
    let counts = store.count_by_state().await.step("count_by_state")?;
    ensure_eq!(counts.get(State::Running), TASKS as u64, "running");
    ensure_eq!(counts.get(State::Pending), 0, "pending");
    Ok(())
}

/// Pending and running tasks cancel; terminal ones come back unchanged;
/// an unknown id is not found.
pub async fn cancel_in_every_state<S: TaskStore>(store: S) -> Verdict {
    let pending = create(&store, new_task("p"), at(0)).await?;
    let got = store
        .cancel(pending.id, Scope::Admin, at(5))
        .await
        .step("cancel pending")?;
    ensure_eq!(got.state, State::Canceled, "pending → canceled");
    ensure_eq!(got.finished_at, Some(at(5)), "finished_at");
    ensure_eq!(got.attempt, 0, "attempt");
    ensure!(got.attempts.is_empty(), "a never-run task has no tries");
    ensure_eq!(get(&store, pending.id).await?, got, "stored task");
    ensure_eq!(
        store.next_due().await.step("next_due")?,
        None,
        "a canceled task is not due"
    );
    let claimed = store
        .claim_due(
            10,
            at(1_000),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .step("claim_due")?;
    ensure!(claimed.is_empty(), "a canceled task was claimed");

    let running = create(&store, new_task("r"), at(10)).await?;
    claim_only(&store, running.id, at(10), LEASE).await?;
    let got = store
        .cancel(running.id, Scope::Admin, at(25))
        .await
        .step("cancel running")?;
    ensure_eq!(got.state, State::Canceled, "running → canceled");
    ensure_eq!(got.finished_at, Some(at(25)), "finished_at");
    ensure_eq!(got.lease_until, None, "lease_until");
    ensure_eq!(
        got.attempts,
        vec![closed_try(1, at(10), at(25), None, Some("canceled"))],
        "the cut try is closed as canceled"
    );
    ensure_eq!(get(&store, running.id).await?, got, "stored task");

    for (i, state) in [State::Success, State::Failed, State::Canceled]
        .into_iter()
        .enumerate()
    {
        let before = task_in(&store, &format!("t-{state}"), state, at(100 + i as i64)).await?;
        let got = store
            .cancel(before.id, Scope::Admin, at(500))
            .await
            .step("cancel terminal")?;
        ensure_eq!(got, before, "cancel of a {state} task returns it unchanged");
        ensure_eq!(get(&store, before.id).await?, before, "stored {state} task");
    }
    let got = store
        .cancel(
            TaskId::new(Timestamp::from_millis(0), [0xee; 10]),
            Scope::Admin,
            at(600),
        )
        .await;
    ensure_eq!(got, Err(StoreError::NotFound), "cancel of an unknown id");
    Ok(())
}

/// A stalled runner of attempt 1 that heartbeats after the task was
/// recovered and claimed again (attempt 2) extends nothing: the newer claim's
/// lease is its own runner's to extend.
pub async fn old_attempts_heartbeat_leaves_a_newer_claim_alone<S: TaskStore>(store: S) -> Verdict {
    let short = Duration::from_secs(1);
    let task = create(&store, new_task("stalled"), at(0)).await?;
    claim_only(&store, task.id, at(0), short).await?;
    let moved = store
        .recover_expired(at(2_000))
        .await
        .step("recover_expired")?;
    ensure_eq!(moved, 1, "recovered");
    let rerun = claim_only(&store, task.id, at(2_000), short).await?;
    ensure_eq!(rerun.attempt, 2, "claimed again");
    let beat = store
        .heartbeat(vec![(task.id, 1)], at(2_500), LEASE)
        .await
        .step("heartbeat")?;
    ensure_eq!(
        beat,
        vec![lost(task.id, 1, Some(State::Running))],
        "the old attempt's heartbeat extended a lease"
    );
    ensure_eq!(
        get(&store, task.id).await?.lease_until,
        Some(at(2_000).saturating_add(short)),
        "the newer claim's lease"
    );
    let beat = store
        .heartbeat(vec![(task.id, 2)], at(2_500), LEASE)
        .await
        .step("heartbeat")?;
    ensure_eq!(beat, vec![], "the newer attempt's own heartbeat");
    Ok(())
}

/// Heartbeats extend the leases of running tasks only, and never shorten one.
pub async fn heartbeat_extends_only_running_leases<S: TaskStore>(store: S) -> Verdict {
    let short = Duration::from_secs(10);
    let a = create(&store, new_task("a"), at(0)).await?;
    let a = claim_only(&store, a.id, at(0), short).await?;
    let b = create(&store, new_task("b"), at(1)).await?;
    let b = claim_only(&store, b.id, at(1), short).await?;
    let pending = task_in(&store, "p", State::Pending, at(2)).await?;
    let done = task_in(&store, "d", State::Success, at(3)).await?;
    let gone = TaskId::new(Timestamp::from_millis(0), [0xee; 10]);
    let running = vec![
        (a.id, 1),
        (b.id, 1),
        (pending.id, 0),
        (done.id, 1),
        (gone, 1),
    ];
    let mut beat = store
        .heartbeat(running, at(5_000), LEASE)
        .await
        .step("heartbeat")?;
    beat.sort_by_key(|l| l.id);
    let mut want = vec![
        lost(pending.id, 0, Some(State::Pending)),
        lost(done.id, 1, Some(State::Success)),
        lost(gone, 1, None),
    ];
    want.sort_by_key(|l| l.id);
    ensure_eq!(
        beat,
        want,
        "the leases not extended, with their tasks' states"
    );
    for task in [&a, &b] {
        let now = get(&store, task.id).await?;
        ensure_eq!(
            now.lease_until,
            Some(at(5_000).saturating_add(LEASE)),
            "extended lease"
        );
        ensure_eq!(now.state, State::Running, "state");
    }
    ensure_eq!(
        get(&store, pending.id).await?,
        pending,
        "pending task after heartbeat"
    );
    ensure_eq!(
        get(&store, done.id).await?,
        done,
        "done task after heartbeat"
    );
    // A late, shorter heartbeat does not pull a lease in.
    store
        .heartbeat(vec![(a.id, 1)], at(6_000), Duration::from_secs(1))
        .await
        .step("heartbeat")?;
    ensure_eq!(
        get(&store, a.id).await?.lease_until,
        Some(at(5_000).saturating_add(LEASE)),
        "lease after a shorter heartbeat"
    );
    let moved = store
        .recover_expired(at(20_000))
        .await
        .step("recover_expired")?;
    ensure_eq!(moved, 0, "extended leases are not expired");
    Ok(())
}

/// Release puts a running task back without using up its attempt; the
/// history keeps the interrupted try and the next claim reuses its number.
pub async fn release_keeps_the_attempt_and_the_history<S: TaskStore>(store: S) -> Verdict {
    // One attempt only: a release that used it up would leave nothing to run.
    let task = create(&store, task_with("rel", URL, b"{}", 1, 1_000), at(0)).await?;
    claim_only(&store, task.id, at(10), LEASE).await?;
    let released = store.release(task.id, 1, at(20)).await.step("release")?;
    let released = applied(&store, task.id, released, "release").await?;
    ensure_eq!(released.state, State::Pending, "state");
    ensure_eq!(released.attempt, 0, "the interrupted try is not counted");
    ensure_eq!(released.next_run_at, Some(at(20)), "due at once");
    ensure_eq!(released.lease_until, None, "lease_until");
    let interrupted = closed_try(1, at(10), at(20), None, Some("interrupted"));
    ensure_eq!(released.attempts, vec![interrupted.clone()], "history");
    ensure_eq!(get(&store, task.id).await?, released, "stored task");
    let again = store.release(task.id, 1, at(21)).await.step("release")?;
    ensure_eq!(again, Guarded::Lost(State::Pending), "a second release");

    let rerun = claim_only(&store, task.id, at(30), LEASE).await?;
    ensure_eq!(rerun.attempt, 1, "the next claim reuses the attempt");
    ensure_eq!(
        rerun.attempts,
        vec![interrupted.clone(), open_try(1, at(30))],
        "history keeps both tries"
    );
    let done = store
        .complete(task.id, 1, success(200), at(45))
        .await
        .step("complete")?;
    let done = applied(&store, task.id, done, "complete").await?;
    ensure_eq!(
        done.attempts,
        vec![interrupted, closed_try(1, at(30), at(45), Some(200), None)],
        "history after the rerun"
    );
    Ok(())
}

/// Expired leases go back to pending, or to failed `interrupted` when no
/// attempt is left; live leases (including one ending exactly now) stay.
pub async fn recover_expired_requeues_or_fails<S: TaskStore>(store: S) -> Verdict {
    let s = Duration::from_secs;
    let requeue = create(&store, task_with("requeue", URL, b"{}", 3, 1_000), at(0)).await?;
    claim_only(&store, requeue.id, at(0), s(10)).await?;
    let last = create(&store, task_with("last", URL, b"{}", 1, 1_000), at(0)).await?;
    claim_only(&store, last.id, at(0), s(10)).await?;
    let live = create(&store, new_task("live"), at(0)).await?;
    let live = claim_only(&store, live.id, at(0), s(60)).await?;
    let edge = create(&store, new_task("edge"), at(0)).await?;
    let edge = claim_only(&store, edge.id, at(0), s(20)).await?;
    let waiting = task_in(&store, "waiting", State::Pending, at(0)).await?;

    let moved = store
        .recover_expired(at(20_000))
        .await
        .step("recover_expired")?;
    ensure_eq!(moved, 2, "recovered");
    let interrupted = closed_try(1, at(0), at(20_000), None, Some("interrupted"));

    let got = get(&store, requeue.id).await?;
    ensure_eq!(got.state, State::Pending, "with attempts left → pending");
    ensure_eq!(got.attempt, 1, "the recovered try counts");
    ensure_eq!(got.next_run_at, Some(at(20_000)), "due at once");
    ensure_eq!(got.lease_until, None, "lease_until");
    ensure_eq!(got.attempts, vec![interrupted.clone()], "history");

    let got = get(&store, last.id).await?;
    ensure_eq!(got.state, State::Failed, "with no attempt left → failed");
    ensure_eq!(got.error.as_deref(), Some("interrupted"), "error");
    ensure_eq!(got.finished_at, Some(at(20_000)), "finished_at");
    ensure_eq!(got.lease_until, None, "lease_until");
    ensure_eq!(got.attempts, vec![interrupted], "history");

    ensure_eq!(get(&store, live.id).await?, live, "a live lease");
    ensure_eq!(
        get(&store, edge.id).await?,
        edge,
        "a lease ending exactly now"
    );
    ensure_eq!(get(&store, waiting.id).await?, waiting, "a pending task");
    let moved = store
        .recover_expired(at(20_000))
        .await
        .step("recover_expired")?;
    ensure_eq!(moved, 0, "a second recovery");
    Ok(())
}
