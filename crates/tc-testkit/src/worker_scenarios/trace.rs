//! A task's W3C trace context on every try: the store keeps it, the claim
//! hands it back, and each call carries it (with no tracer, the stored
//! parent), retries included.

use std::time::Duration;

use tc_downstream::Downstream;
use tc_downstream::fake::{Reply, Step};
use tc_model::store::TaskStore;
use tc_model::{Limits, NewTask, State, TraceContext};

use super::{Rig, stop, wait_terminal};

const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const STATE: &str = "congo=t61rcWkgMzE";

/// A task submitted in a caller's trace fails once with 503, then
/// succeeds: both calls carry the caller's `traceparent` and `tracestate`.
pub(super) async fn trace_context_reaches_every_try<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    rig.script.plan(
        "/traced",
        [
            Step::Reply(Reply::status(503)),
            Step::Reply(Reply::status(200)),
        ],
    );
    let context = TraceContext::from_headers(Some(PARENT), Some(STATE))
        .ok_or("fixture: invalid traceparent")?;
    let new = NewTask::new(
        rig.url("/traced"),
        b"{}".to_vec(),
        "k-traced".to_owned(),
        3,
        Duration::from_secs(2),
        &Limits::default(),
    )
    .map_err(|e| format!("fixture: {e}"))?
    .with_trace(context);
    let worker = rig.spawn_worker(rig.config());
    let mut events = worker.control().subscribe();
    let task = rig
        .store
        .submit(new, rig.clock.now())
        .await
        .map_err(|e| format!("submit: {e}"))?
        .task;
    worker.control().task_submitted();
    wait_terminal(&mut events, task.id).await?;
    stop(worker).await?;
    let done = rig.get(task.id).await?;
    ensure!(done.state == State::Success, "state {}", done.state);
    let sent: Vec<_> = rig
        .script
        .calls("/traced")
        .iter()
        .map(|c| {
            (
                c.header("traceparent").map(str::to_owned),
                c.header("tracestate").map(str::to_owned),
            )
        })
        .collect();
    let expected = (Some(PARENT.to_owned()), Some(STATE.to_owned()));
    ensure!(
        sent == [expected.clone(), expected],
        "every try carries the stored context: {sent:?}"
    );
    Ok(())
}
