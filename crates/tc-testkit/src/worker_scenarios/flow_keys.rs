//! Flow keys through a worker: a key's `max_in_flight` holds however many
//! slots the worker has (its tasks' calls never overlap past it) while
//! tasks without the key run; and a downstream's rate-limit fields that
//! say no call is left hold the task's flow key too, on another host as
//! well, until their reset.

use std::time::Duration;

use tc_downstream::Downstream;
use tc_downstream::fake::{Reply, Step};
use tc_model::flow_key::FlowKeyUpdate;
use tc_model::store::TaskStore;
use tc_model::{Limits, NewTask, State, TaskId};

use super::destinations::{MS, check_started_after, check_tasks, length, paths, seen, submit_each};
use super::{GUARD, Rig, stop, wait_all_terminal, wait_all_terminal_within, wait_for};

/// Submits one task of `key` per path, on `url_of`'s url.
async fn submit_keyed<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
    paths: impl IntoIterator<Item = String>,
    url_of: impl Fn(&str) -> Result<String, String>,
    key: &str,
) -> Result<Vec<TaskId>, String> {
    let mut ids = Vec::new();
    for path in paths {
        let new = NewTask::new(
            url_of(&path)?,
            b"{}".to_vec(),
            format!("fk{path}"),
            3,
            Duration::from_secs(60),
            &Limits::default(),
        )
        .and_then(|t| t.with_flow_key(Some(key.to_owned())))
        .map_err(|e| format!("invalid task: {e}"))?;
        let submitted = rig
            .store
            .submit(new, rig.clock.now())
            .await
            .map_err(|e| format!("submit: {e}"))?;
        ids.push(submitted.task.id);
    }
    Ok(ids)
}

async fn set_key<S: TaskStore, D>(
    rig: &Rig<S, D>,
    key: &str,
    update: FlowKeyUpdate,
) -> Result<(), String> {
    rig.store
        .put_flow_key(None, key.to_owned(), update, rig.clock.now())
        .await
        .map(|_| ())
        .map_err(|e| format!("put_flow_key: {e}"))
}

/// Key `k` may have one call in flight: its four slow tasks (two on each
/// host) are called one after another, while the tasks without a key run
/// beside them.
pub(super) async fn a_flow_key_s_cap_holds_across_hosts<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let call = length(rig, Duration::from_secs(2), Duration::from_millis(300));
    set_key(
        rig,
        "k",
        FlowKeyUpdate {
            max_in_flight: Some(Some(1)),
            ..FlowKeyUpdate::default()
        },
    )
    .await?;
    for path in paths("/fk/", 2).chain(paths("/fk-other/", 2)) {
        rig.script
            .plan(&path, [Step::ReplyAfter(call, Reply::status(200))]);
    }
    let worker = rig.spawn_worker(rig.config());
    let mut events = worker.control().subscribe();
    let mut keyed = submit_keyed(rig, paths("/fk/", 2), |p| Ok(rig.url(p)), "k").await?;
    keyed.extend(submit_keyed(rig, paths("/fk-other/", 2), |p| rig.other_url(p), "k").await?);
    let free = submit_each(rig, paths("/free/", 3), |p| Ok(rig.url(p)), 3).await?;
    worker.control().task_submitted();
    // One wait for both sets: a wait for one set drops the other's events,
    // and a keyed task may end before the free ones (the first call to a
    // host goes alone).
    let all: Vec<TaskId> = free.iter().chain(&keyed).copied().collect();
    wait_all_terminal_within(&mut events, &all, call * 4 + GUARD).await?;
    stop(worker).await?;
    check_tasks(rig, &free, State::Success, 1).await?;
    check_tasks(rig, &keyed, State::Success, 1).await?;
    let mut calls = seen(rig, "/fk");
    calls.sort_by_key(|c| c.at);
    ensure!(calls.len() == 4, "{} calls of key k, want 4", calls.len());
    for pair in calls.windows(2) {
        check_started_after(&pair[1], &pair[0], "key k's cap of 1 did not hold")?;
    }
    // The tasks without a key did not queue behind the key's chain.
    for free in seen(rig, "/free/") {
        ensure!(
            free.at < calls[2].at,
            "{} waited for key k's third call",
            free.path
        );
    }
    Ok(())
}

/// A `200` with `X-RateLimit-Remaining: 0` to a task of key `k` holds
/// the key's tasks on the other host too until the reset, while that
/// host's tasks without the key run.
pub(super) async fn rate_limit_fields_hold_the_task_s_flow_key_too<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let reset = length(rig, Duration::from_secs(30), Duration::from_secs(3));
    let header = reset.as_secs().to_string();
    rig.script.plan(
        "/fkrl/first",
        [Step::Reply(
            Reply::status(200)
                .header("x-ratelimit-remaining", "0")
                .header("x-ratelimit-reset", &header),
        )],
    );
    let worker = rig.spawn_worker(rig.config());
    let mut events = worker.control().subscribe();
    let first = submit_keyed(rig, ["/fkrl/first".to_owned()], |p| Ok(rig.url(p)), "k").await?;
    worker.control().task_submitted();
    wait_for(&mut events, first[0], &[State::Success]).await?;
    let held = submit_keyed(rig, paths("/fkrl-held/", 2), |p| rig.other_url(p), "k").await?;
    let free = submit_each(rig, paths("/fkrl-free/", 3), |p| rig.other_url(p), 3).await?;
    worker.control().task_submitted();
    wait_all_terminal(&mut events, &free).await?;
    ensure!(
        seen(rig, "/fkrl-held/").is_empty(),
        "key k's tasks were called on another host before the reset"
    );
    check_tasks(rig, &held, State::Pending, 0).await?;
    wait_all_terminal_within(&mut events, &held, reset + GUARD).await?;
    stop(worker).await?;
    check_tasks(rig, &held, State::Success, 1).await?;
    let said_spent = seen(rig, "/fkrl/first")
        .first()
        .map(|c| c.ended.unwrap_or(c.at))
        .ok_or("the first call is not seen")?;
    for call in seen(rig, "/fkrl-held/") {
        ensure!(
            call.at + MS >= said_spent + reset,
            "{} called {:?} after the spent window's answer, before its reset of {reset:?}",
            call.path,
            call.at.duration_since(said_spent)
        );
    }
    Ok(())
}
