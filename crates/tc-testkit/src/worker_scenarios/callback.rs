//! Callbacks through the worker: a task with a `callback_url`
//! succeeds, and the callback task the store made with its end is claimed
//! and delivered like any task: a POST of the parent's view as JSON, keyed
//! `callback:{id}`.

use std::time::Duration;

use tc_downstream::Downstream;
use tc_downstream::fake::{Reply, Step};
use tc_model::callback::{Callback, CallbackOn};
use tc_model::store::TaskStore;
use tc_model::{Limits, NewTask, State};
use tc_worker::WorkerConfig;

use super::{Rig, stop, wait_terminal};

/// The parent answers 200 with a JSON body; its callback then reaches the
/// callback url with the parent's view, and ends in success itself.
pub(super) async fn a_callback_delivers_the_parent_s_view<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    rig.script.plan(
        "/cb-parent",
        [Step::Reply(Reply::json(200, r#"{"done":true}"#))],
    );
    rig.script
        .plan("/cb-done", [Step::Reply(Reply::status(204))]);
    let callback = Callback::new(rig.url("/cb-done"), CallbackOn::default())
        .map_err(|e| format!("fixture: {e}"))?;
    let new = NewTask::new(
        rig.url("/cb-parent"),
        b"{}".to_vec(),
        "k-cb-parent".to_owned(),
        2,
        Duration::from_secs(2),
        &Limits::default(),
    )
    .map_err(|e| format!("fixture: {e}"))?
    .with_callback(callback);
    // Polling would find the callback only after an hour: the end that
    // makes it must wake the claim loop itself.
    let worker = rig.spawn_worker(WorkerConfig {
        poll_interval: Duration::from_secs(3600),
        ..rig.config()
    });
    let mut events = worker.control().subscribe();
    let parent = rig
        .store
        .submit(new, rig.clock.now())
        .await
        .map_err(|e| format!("submit: {e}"))?
        .task;
    worker.control().task_submitted();
    wait_terminal(&mut events, parent.id).await?;
    let parent = rig.get(parent.id).await?;
    ensure!(parent.state == State::Success, "parent {}", parent.state);
    let callback_id = parent
        .callback_task_id
        .ok_or("the parent's end made no callback")?;
    // The callback is due at once, and nothing but the parent's end says so.
    wait_terminal(&mut events, callback_id).await?;
    stop(worker).await?;
    let callback = rig.get(callback_id).await?;
    ensure!(
        callback.state == State::Success,
        "callback {}",
        callback.state
    );
    ensure!(
        callback.callback_of == Some(parent.id),
        "callback_of {:?}",
        callback.callback_of
    );
    let calls = rig.script.calls("/cb-done");
    ensure!(
        calls.len() == 1,
        "{} calls to the callback url",
        calls.len()
    );
    let call = &calls[0];
    let key = format!("callback:{}", parent.id);
    ensure!(
        call.idempotency_key.as_deref() == Some(key.as_str()),
        "key {:?}",
        call.idempotency_key
    );
    ensure!(call.method == "POST", "method {}", call.method);
    let view: serde_json::Value =
        serde_json::from_slice(&call.body).map_err(|e| format!("body not JSON: {e}"))?;
    ensure!(
        view["id"] == parent.id.to_string()
            && view["state"] == "success"
            && view["result"] == r#"{"done":true}"#
            && view["result_truncated"] == false
            && view["callback_task_id"] == callback_id.to_string(),
        "the body is the parent's view: {view}"
    );
    Ok(())
}
