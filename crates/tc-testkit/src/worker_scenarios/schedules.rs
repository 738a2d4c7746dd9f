//! A schedule firing through the worker's firing loop on any store: every
//! second (a six-field pattern, which only tc-model's
//! `CronPattern::parse_with_seconds` takes; the API refuses it), so a
//! real-time run sees several firings within seconds. Each fire time makes
//! one task, keyed by its time, which the worker then runs; the firing
//! record names the latest.

use std::collections::BTreeSet;
use std::time::Duration;

use tc_downstream::Downstream;
use tc_model::schedule::{
    CatchUp, CronPattern, Overlap, Recurrence, ScheduleSpec, TaskTemplate, Zone, firing_key,
};
use tc_model::store::{ListQuery, TaskStore};
use tc_model::{Limits, NewTask, State};
use tokio::sync::broadcast::error::RecvError;

use super::{GUARD, Rig, stop};
use tc_model::tenant::Scope;

/// Three firings of an every-second schedule run as three tasks, one per
/// fire time, and the schedule's record is the last of them.
pub(super) async fn a_schedule_fires_one_task_per_time_and_records_it<
    S: TaskStore,
    D: Downstream,
>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let template = NewTask::new(
        rig.url("/tick"),
        b"{}".to_vec(),
        "template".to_owned(),
        1,
        Duration::from_secs(2),
        &Limits::default(),
    )
    .map_err(|e| format!("fixture: {e}"))?;
    let spec = ScheduleSpec {
        name: "every-second".into(),
        when: Recurrence {
            cron: CronPattern::parse_with_seconds("* * * * * *").map_err(|e| e.to_string())?,
            zone: Zone::UTC,
        },
        task: TaskTemplate::of(template),
        paused: false,
        overlap: Overlap::Allow,
        catch_up: CatchUp::None,
    };
    rig.store
        .create_schedule(spec, rig.clock.now())
        .await
        .map_err(|e| format!("create: {e}"))?;
    let worker = rig.spawn_worker(rig.config());
    let mut events = worker.control().subscribe();
    let three = async {
        let mut done = BTreeSet::new();
        while done.len() < 3 {
            match events.recv().await {
                Ok(e) if e.state == State::Success => {
                    done.insert(e.task_id);
                }
                Ok(_) => {}
                Err(RecvError::Lagged(n)) => return Err(format!("missed {n} worker events")),
                Err(RecvError::Closed) => return Err("the worker stopped".to_owned()),
            }
        }
        Ok(())
    };
    tokio::time::timeout(GUARD, three)
        .await
        .map_err(|_| format!("three firings did not run within {GUARD:?}"))??;
    stop(worker).await?;

    let page = rig
        .store
        .list(
            ListQuery {
                limit: 1000,
                ..ListQuery::default()
            },
            Scope::Admin,
        )
        .await
        .map_err(|e| format!("list: {e}"))?;
    let keys: Vec<&str> = page
        .tasks
        .iter()
        .map(|t| t.idempotency_key.as_str())
        .collect();
    let distinct: BTreeSet<&str> = keys.iter().copied().collect();
    ensure!(
        keys.len() >= 3 && distinct.len() == keys.len(),
        "one task per fire time, at least three: {keys:?}"
    );
    ensure!(
        keys.iter()
            .all(|k| k.starts_with("schedule:every-second:") && k.ends_with('Z')),
        "every key names the schedule and its fire time: {keys:?}"
    );
    let schedule = rig
        .store
        .schedule("every-second".into())
        .await
        .map_err(|e| format!("schedule: {e}"))?;
    let last = schedule.last_run_at.ok_or("no firing recorded")?;
    let recorded = firing_key("every-second", last);
    ensure!(
        distinct.iter().next_back() == Some(&recorded.as_str()),
        "the record {recorded} is the latest firing of {keys:?}"
    );
    let task = rig
        .get(schedule.last_task_id.ok_or("no task recorded")?)
        .await?;
    ensure!(
        task.idempotency_key == recorded,
        "the recorded task is the latest firing's: {}",
        task.idempotency_key
    );
    Ok(())
}
