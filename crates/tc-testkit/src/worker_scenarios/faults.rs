//! Scenarios where the parts around a call fail: the store refuses writes or
//! claims, the attempt panics, the wall clock steps forward.

use std::sync::Arc;
use std::time::Duration;

use tc_downstream::{Delivery, DownError, DownResponse, Downstream};
use tc_model::State;
use tc_model::store::TaskStore;
use tc_worker::{Worker, WorkerMetrics};

use super::{GatedStore, Rig, guard, stop, wait_terminal};
use tc_downstream::fake::{Reply, Step};

/// A downstream that panics on every call whose path is `path` and passes
/// every other call on: a bug in the code that runs an attempt.
pub(super) struct PanicOn<D> {
    inner: Arc<D>,
    path: String,
}

impl<D> PanicOn<D> {
    /// Panics on calls to `path`, forwards the rest to `inner`.
    pub(super) fn new(inner: Arc<D>, path: &str) -> Self {
        PanicOn {
            inner,
            path: path.to_owned(),
        }
    }
}

impl<D: Downstream> Downstream for PanicOn<D> {
    async fn send(&self, delivery: Delivery) -> Result<DownResponse, DownError> {
        let path = delivery
            .url
            .splitn(4, '/')
            .nth(3)
            .map(|rest| format!("/{rest}"))
            .unwrap_or_default();
        if path == self.path {
            panic!("downstream fake panics on {path} (test)");
        }
        self.inner.send(delivery).await
    }
}

/// Spawns a worker on `store` and the rig's downstream.
fn worker_on<S: TaskStore, D: Downstream, W: TaskStore>(
    rig: &Rig<S, D>,
    store: &Arc<W>,
    metrics: WorkerMetrics,
) -> Worker<W> {
    Worker::spawn(
        Arc::clone(store),
        Arc::clone(&rig.downstream),
        rig.config(),
        rig.clock.clone(),
        metrics,
    )
}

/// The store refuses the first three outcome writes (a full disk): the
/// worker keeps the lease and writes again until it lands. One call, and the
/// downstream's answer is kept.
pub(super) async fn outcome_write_retried_until_it_lands<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let store = Arc::new(GatedStore::new(Arc::clone(&rig.store)));
    store.hooks().fail_completes(3);
    rig.script.plan("/full", [Step::Reply(Reply::status(200))]);
    let worker = worker_on(rig, &store, WorkerMetrics::default());
    let mut events = worker.control().subscribe();
    let task = rig.submit("/full", "k-full").await?;
    worker.control().task_submitted();
    let ended = wait_terminal(&mut events, task.id).await?;
    stop(worker).await?;
    ensure!(ended.state == State::Success, "ended {}", ended.state);
    ensure!(
        store.hooks().completes_failed() == 3,
        "{} completes failed, want 3",
        store.hooks().completes_failed()
    );
    let calls = rig.script.calls("/full").len();
    ensure!(calls == 1, "{calls} calls, want 1");
    let task = rig.get(task.id).await?;
    ensure!(task.state == State::Success, "state {}", task.state);
    ensure!(task.attempt == 1, "attempt {}", task.attempt);
    ensure!(
        task.result.as_deref() == Some(&b"{\"status\":200}"[..]),
        "result {:?}",
        task.result
    );
    Ok(())
}

/// While every claim fails, the claim loop backs off: at most one claim per
/// poll interval, and the task runs once claims work again.
pub(super) async fn claim_errors_back_off<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let store = Arc::new(GatedStore::new(Arc::clone(&rig.store)));
    store.hooks().fail_claims(true);
    rig.script.plan("/later", [Step::Reply(Reply::status(200))]);
    let config = rig.config();
    let worker = worker_on(rig, &store, WorkerMetrics::default());
    let mut events = worker.control().subscribe();
    let task = rig.submit("/later", "k-later").await?;
    // The task is due now and submits keep waking the loop: neither may turn
    // a failing claim into a busy loop.
    let failing_for = Duration::from_secs(1);
    let started = tokio::time::Instant::now();
    for _ in 0..10 {
        worker.control().task_submitted();
        tokio::time::sleep(failing_for / 10).await;
    }
    let elapsed = started.elapsed();
    let claims = store.hooks().claims();
    let bound = elapsed.as_millis() / config.poll_interval.as_millis() + 1;
    ensure!(
        (claims as u128) <= bound,
        "{claims} claims in {elapsed:?} while failing (poll {:?}): at most {bound}",
        config.poll_interval
    );
    ensure!(claims >= 2, "claims were not tried again ({claims})");
    store.hooks().fail_claims(false);
    let ended = wait_terminal(&mut events, task.id).await?;
    stop(worker).await?;
    ensure!(ended.state == State::Success, "ended {}", ended.state);
    Ok(())
}

/// An attempt that panics ends: the task goes back to pending, then fails on
/// its last attempt with `worker_panic`; nothing stays in flight.
pub(super) async fn panic_in_attempt_ends_it<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let metrics = WorkerMetrics::default();
    let downstream = Arc::new(PanicOn::new(Arc::clone(&rig.downstream), "/panic"));
    let worker = Worker::spawn(
        Arc::clone(&rig.store),
        downstream,
        rig.config(),
        rig.clock.clone(),
        metrics.clone(),
    );
    let mut events = worker.control().subscribe();
    let task = rig
        .submit_with("/panic", "k-panic", 2, Duration::from_secs(2))
        .await?;
    worker.control().task_submitted();
    let ended = wait_terminal(&mut events, task.id).await?;
    let in_flight_here = worker.control().in_flight();
    stop(worker).await?;
    ensure!(ended.state == State::Failed, "ended {}", ended.state);
    let task = rig.get(task.id).await?;
    ensure!(task.state == State::Failed, "state {}", task.state);
    ensure!(task.attempt == 2, "attempt {}", task.attempt);
    ensure!(
        task.error.as_deref() == Some("worker_panic"),
        "error {:?}",
        task.error
    );
    ensure!(
        task.attempts
            .iter()
            .all(|a| a.error.as_deref() == Some("worker_panic")),
        "attempts {:?}",
        task.attempts
    );
    ensure!(
        in_flight_here == 0,
        "{in_flight_here} attempts still registered"
    );
    ensure!(
        metrics.in_flight_calls() == 0,
        "in-flight gauge {}",
        metrics.in_flight_calls()
    );
    Ok(())
}

/// The wall clock steps an hour forward while a call is in flight: this
/// worker's lease recovery must not take back its own call. One delivery,
/// and it succeeds.
pub(super) async fn clock_jump_mid_call_delivers_once<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let store = Arc::new(GatedStore::new(Arc::clone(&rig.store)));
    rig.script.plan(
        "/jump",
        [
            Step::Gate(Reply::status(200)),
            Step::Reply(Reply::status(200)),
        ],
    );
    let worker = worker_on(rig, &store, WorkerMetrics::default());
    let mut events = worker.control().subscribe();
    let task = rig.submit("/jump", "k-jump").await?;
    worker.control().task_submitted();
    guard("the call to arrive", rig.script.wait_calls(1)).await?;
    ensure!(
        rig.clock.jump(Duration::from_secs(3600)),
        "the rig's clock cannot jump"
    );
    // Two full recovery rounds after the jump.
    let seen = store.hooks().recoveries();
    guard(
        "lease recovery to run",
        store.hooks().wait_recoveries(seen + 2),
    )
    .await?;
    rig.script.open_gate();
    let ended = wait_terminal(&mut events, task.id).await?;
    stop(worker).await?;
    ensure!(ended.state == State::Success, "ended {}", ended.state);
    let calls = rig.script.calls("/jump").len();
    ensure!(calls == 1, "{calls} deliveries, want 1");
    let task = rig.get(task.id).await?;
    ensure!(task.attempt == 1, "attempt {}", task.attempt);
    Ok(())
}

/// Other processes' wake-ups (PostgreSQL's NOTIFY of another node's
/// submits) wake an idle claim loop, which never polls here: the task they
/// announce runs. A burst of them costs a claim or two, not one each
/// (a wake-up the last claim already covered costs
/// nothing).
pub(super) async fn wake_ups_from_elsewhere_share_claims<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let store = Arc::new(GatedStore::new(Arc::clone(&rig.store)));
    rig.script
        .plan("/elsewhere", [Step::Reply(Reply::status(200))]);
    let worker = Worker::spawn(
        Arc::clone(&store),
        Arc::clone(&rig.downstream),
        tc_worker::WorkerConfig {
            poll_interval: Duration::from_secs(3600),
            ..rig.config()
        },
        rig.clock.clone(),
        WorkerMetrics::default(),
    );
    let mut events = worker.control().subscribe();
    // The first claim, at start, finds nothing; then the loop sleeps.
    for _ in 0..1_000 {
        if store.hooks().claims() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    ensure!(store.hooks().claims() > 0, "the worker never claimed");
    let before = store.hooks().claims();
    // Submitted through the store alone: only the wake-ups tell the worker.
    let task = rig.submit("/elsewhere", "k-elsewhere").await?;
    for _ in 0..20 {
        worker.control().woken_elsewhere();
    }
    let ended = wait_terminal(&mut events, task.id).await?;
    let claims = store.hooks().claims() - before;
    stop(worker).await?;
    ensure!(ended.state == State::Success, "ended {}", ended.state);
    ensure!(claims <= 3, "{claims} claims for 20 wake-ups");
    Ok(())
}
