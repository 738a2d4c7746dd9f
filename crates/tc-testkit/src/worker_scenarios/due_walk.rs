//! A due task is called within one poll interval however many other
//! destinations wait: not yet due, or paused.

use std::time::Duration;

use tc_downstream::Downstream;
use tc_model::destination::DestinationUpdate;
use tc_model::store::TaskStore;
use tc_model::{FirstRun, Limits, NewTask, State};
use tokio::time::Instant;

use super::{Rig, stop, wait_terminal};

/// How many destinations wait, and how many of them are paused (with due
/// tasks); the others' tasks are due in an hour.
const WAITING: usize = 5_000;
const PAUSED: usize = 300;

/// The `i`th waiting destination's task url: its host sorts after every
/// host a rig's base url can have, so a rotation that starts after the
/// rig's host meets all of them before it wraps around to it. None is
/// ever called.
fn waiting_url(i: usize) -> String {
    format!("http://zz-wait-{i:05}.invalid:80/never")
}

/// One task to the rig's host runs (the worker's rotation now starts
/// after that host); then 5,000 destinations get tasks that cannot run now
/// (300 paused, the rest due in an hour); then a new task to the rig's
/// host is called within one poll interval of its submit, without a
/// wake-up, and none of the waiting ones is called.
pub(super) async fn a_due_task_runs_past_thousands_of_waiting_destinations<
    S: TaskStore,
    D: Downstream,
>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let config = rig.config();
    let poll = config.poll_interval;
    let worker = rig.spawn_worker(config);
    let control = worker.control();
    let mut events = control.subscribe();
    let first = rig.submit("/walk/first", "walk-first").await?;
    control.task_submitted();
    let ended = wait_terminal(&mut events, first.id).await?;
    ensure!(ended.state == State::Success, "the first task: {ended:?}");

    let later = rig.clock.now().saturating_add(Duration::from_secs(3600));
    let tasks: Vec<NewTask> = (0..WAITING)
        .map(|i| {
            let task = NewTask::new(
                waiting_url(i),
                b"{}".to_vec(),
                format!("walk-waiting-{i}"),
                3,
                Duration::from_secs(2),
                &Limits::default(),
            )
            .map_err(|e| format!("invalid task: {e}"))?;
            if i < PAUSED {
                Ok(task)
            } else {
                task.with_first_run(FirstRun::At(later))
                    .map_err(|e| format!("a delayed task: {e}"))
            }
        })
        .collect::<Result<_, String>>()?;
    for i in 0..PAUSED {
        let name = tc_model::destination_of(&waiting_url(i));
        let pause = DestinationUpdate {
            paused: Some(true),
            ..DestinationUpdate::default()
        };
        rig.store
            .update_destination(name, pause, rig.clock.now())
            .await
            .map_err(|e| format!("pause: {e}"))?;
    }
    for chunk in tasks.chunks(1000) {
        for result in rig
            .store
            .submit_many(chunk.to_vec(), rig.clock.now())
            .await
            .map_err(|e| format!("submit_many: {e}"))?
        {
            result.map_err(|e| format!("submit: {e}"))?;
        }
    }
    // Let the worker see them all (and sleep) before the due task comes.
    control.task_submitted();
    tokio::time::sleep(poll * 3).await;

    let submitted = Instant::now();
    let due = rig.submit("/walk/due", "walk-due").await?;
    let ended = wait_terminal(&mut events, due.id).await?;
    ensure!(ended.state == State::Success, "the due task: {ended:?}");
    let called = rig.script.read(|r| {
        r.calls()
            .iter()
            .find(|c| c.path == "/walk/due")
            .map(|c| c.at)
    });
    let Some(called) = called else {
        return Err("the due task's call was not seen".to_owned());
    };
    if rig.paused_clock {
        // Without a wake-up, the next claim comes within one poll interval.
        let waited = called.saturating_duration_since(submitted);
        ensure!(
            waited <= poll,
            "the due task waited {waited:?}, more than the poll interval {poll:?}"
        );
    }
    let strays = rig
        .script
        .read(|r| r.calls().iter().filter(|c| c.path == "/never").count());
    ensure!(strays == 0, "{strays} calls to waiting destinations");
    stop(worker).await
}
