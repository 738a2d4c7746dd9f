//! The schedules' firing loop, on every node beside the claim
//! loop. It sleeps on the worker's clock until the earliest next firing of
//! all unpaused schedules (at most [`crate::config::WorkerConfig::schedules_interval`],
//! so schedules made on other nodes are seen; a change through this node
//! wakes it at once), reads the schedules again, and fires each one due
//! ([`Schedule::due`]): a normal submit keyed
//! `schedule:{name}:{fire time}`, so nodes firing the same time make one
//! task, then the guarded firing record. A firing whose task's url or
//! callback url the allow-list no longer admits (it was narrowed after the
//! schedule was made) submits nothing and is recorded as the schedule's
//! `last_error`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tc_model::Timestamp;
use tc_model::schedule::{FiringError, Overlap, Schedule, firing_key, rfc3339_utc};
use tc_model::store::{StoreError, TaskStore};
use tc_model::tenant::Scope;
use tokio_util::sync::CancellationToken;

use crate::config::{ShutdownReport, WorkerConfig, WorkerError};
use crate::shared::Shared;

/// What one firing did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fired {
    /// A task was submitted (or found: another node fired first).
    Submitted,
    /// `overlap: skip` and the previous firing's task is still going.
    Skipped,
    /// The allow-list refused its task: recorded as the schedule's
    /// `last_error`.
    Refused,
}

/// Fires `schedule` for `at`: skips when its overlap rule says so, refuses
/// (and records why) when the allow-list `prefixes` do not admit its
/// task's urls, else submits its task under the firing's key and records
/// the firing.
async fn fire<S: TaskStore>(
    shared: &Shared<S>,
    schedule: &Schedule,
    at: Timestamp,
    now: Timestamp,
    prefixes: &[String],
) -> Result<Fired, StoreError> {
    let name = &schedule.spec.name;
    if schedule.spec.overlap == Overlap::Skip
        && let Some(previous) = schedule.last_task_id
    {
        match shared.store.get(previous, Scope::Admin).await {
            Ok(task) if !task.state.is_terminal() => {
                tracing::info!(
                    schedule = %name,
                    fire_time = %rfc3339_utc(at),
                    previous_task_id = %previous,
                    state = %task.state,
                    "schedule_skipped"
                );
                return Ok(Fired::Skipped);
            }
            // Finished, or deleted since: nothing runs.
            Ok(_) | Err(StoreError::NotFound) => {}
            Err(e) => return Err(e),
        }
    }
    let key = firing_key(name, at);
    let task = match schedule.spec.task.task(key) {
        Ok(task) => task,
        Err(e) => {
            // The template passed the same checks when it was stored; a
            // firing that cannot be built is skipped, not retried forever.
            tracing::warn!(schedule = %name, error = %e, "schedule_invalid_task");
            return Ok(Fired::Skipped);
        }
    };
    if let Err(refusal) =
        tc_model::urls_allowed(task.url(), task.callback().map(|c| c.url()), prefixes)
    {
        shared
            .store
            .record_firing_error(name.clone(), FiringError::url_not_allowed(refusal, at))
            .await?;
        tracing::warn!(
            schedule = %name,
            fire_time = %rfc3339_utc(at),
            error = %refusal,
            "schedule_refused"
        );
        return Ok(Fired::Refused);
    }
    let submitted = shared.store.submit(task, now).await?;
    shared
        .store
        .record_firing(name.clone(), at, submitted.task.id)
        .await?;
    if submitted.created {
        shared.wake.notify_one();
    }
    tracing::info!(
        schedule = %name,
        fire_time = %rfc3339_utc(at),
        task_id = %submitted.task.id,
        created = submitted.created,
        "schedule_fired"
    );
    Ok(Fired::Submitted)
}

/// The loop; ends when `stop` is canceled.
pub(crate) async fn schedule_loop<S: TaskStore>(
    shared: Arc<Shared<S>>,
    config: WorkerConfig,
    stop: CancellationToken,
) -> Result<ShutdownReport, WorkerError> {
    let up_since = shared.clock.now();
    // The last time each schedule was dealt with here (fired or skipped),
    // so a skipped time is not looked at again.
    let mut handled: HashMap<String, Timestamp> = HashMap::new();
    loop {
        let now = shared.clock.now();
        let wait = match shared.store.schedules().await {
            Ok(schedules) => {
                let mut retry_soon = false;
                for schedule in &schedules {
                    let name = &schedule.spec.name;
                    let Some(at) = schedule.due(now, handled.get(name).copied(), up_since) else {
                        continue;
                    };
                    match fire(&shared, schedule, at, now, &config.allow_url_prefixes).await {
                        Ok(_) => {
                            handled.insert(name.clone(), at);
                        }
                        Err(e) => {
                            tracing::warn!(schedule = %name, error = %e, "schedule_fire_failed");
                            retry_soon = true;
                        }
                    }
                }
                handled.retain(|name, _| schedules.iter().any(|s| &s.spec.name == name));
                let next = schedules.iter().filter_map(|s| s.next_after(now)).min();
                let until_next = next.map_or(config.schedules_interval, |t| t.duration_since(now));
                let wait = until_next.min(config.schedules_interval);
                if retry_soon {
                    wait.min(config.poll_interval)
                } else {
                    wait
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "schedules_read_failed");
                config.poll_interval
            }
        };
        tokio::select! {
            () = stop.cancelled() => break,
            () = shared.schedules_changed.notified() => {}
            () = tokio::time::sleep(wait.max(Duration::from_millis(1))) => {}
        }
    }
    Ok(ShutdownReport::default())
}
