//! Priorities through a worker: the due tasks of one
//! destination are called higher priority first.

use std::time::Duration;

use tc_downstream::Downstream;
use tc_model::destination::DestinationUpdate;
use tc_model::store::TaskStore;
use tc_model::{Limits, NewTask, State};

use super::{Rig, stop, wait_terminal};

/// Three tasks wait behind their paused destination (priorities 0, 9
/// and 5, submitted in that order); resumed, a worker with one slot calls
/// them 9, 5, 0.
pub(super) async fn higher_priorities_are_called_first<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let destination = tc_model::destination_of(&rig.url("/"));
    let pause = |paused: bool| DestinationUpdate {
        paused: Some(paused),
        ..DestinationUpdate::default()
    };
    rig.store
        .update_destination(destination.clone(), pause(true), rig.clock.now())
        .await
        .map_err(|e| format!("pause: {e}"))?;
    let mut ids = Vec::new();
    for priority in [0u8, 9, 5] {
        let key = format!("prio-{priority}");
        let new = NewTask::new(
            rig.url(&format!("/prio/{priority}")),
            b"{}".to_vec(),
            key,
            3,
            Duration::from_secs(2),
            &Limits::default(),
        )
        .and_then(|t| t.with_priority(priority))
        .map_err(|e| format!("invalid task: {e}"))?;
        let submitted = rig
            .store
            .submit(new, rig.clock.now())
            .await
            .map_err(|e| format!("submit: {e}"))?;
        ids.push(submitted.task.id);
    }
    let mut config = rig.config();
    config.concurrency = 1;
    let worker = rig.spawn_worker(config);
    let control = worker.control();
    let mut events = control.subscribe();
    rig.store
        .update_destination(destination, pause(false), rig.clock.now())
        .await
        .map_err(|e| format!("resume: {e}"))?;
    control.destinations_changed();
    // In the order they end (a wait passes over the others' events).
    for id in [ids[1], ids[2], ids[0]] {
        let ended = wait_terminal(&mut events, id).await?;
        ensure!(ended.state == State::Success, "{ended:?}");
    }
    let order: Vec<String> = rig.script.read(|r| {
        r.calls()
            .iter()
            .filter(|c| c.path.starts_with("/prio/"))
            .map(|c| c.path.clone())
            .collect()
    });
    ensure!(
        order == ["/prio/9", "/prio/5", "/prio/0"],
        "calls in the order {order:?}"
    );
    stop(worker).await
}
