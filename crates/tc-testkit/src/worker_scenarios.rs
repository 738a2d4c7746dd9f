//! The worker's scenarios, written once against the ports: every one runs
//! for any store adapter × any downstream that plays a [`Script`] (the
//! in-process fake, or the real client against [`tc_downstream::fake::FakeServer`]).
//!
//! Each scenario spawns the workers it needs with [`Rig::config`] (small
//! backoffs, so a real-time run stays quick), waits on the worker's attempt
//! events, never on sleeps, and returns a readable error on failure.

use std::sync::Arc;
use std::time::Duration;

use tc_downstream::Downstream;
use tc_model::store::{Cursor, ListQuery, StoreError, TaskFilter, TaskStore};
use tc_model::{Limits, NewTask, State, Task, TaskId, Timestamp};
use tc_worker::{AttemptEnded, Clock, Worker, WorkerConfig, WorkerMetrics};
use tokio::sync::broadcast;

use tc_downstream::fake::{Reply, Script, Step};

/// Fails the scenario with a message unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

// A destination's auth on every try.
mod auth;
mod callback;
// Whose credentials a tenant's try carries.
mod credentials;
mod destinations;
mod due_walk;
mod faults;
// Flow keys: their caps and holds on a worker.
mod flow_keys;
mod outbound;
// Paced by the destination's own signals.
mod pacing;
// Priorities.
mod priority;
// Schedules: a firing per fire time on every store.
mod schedules;
// Tenants: the weighted share of the slots.
mod tenants;
mod topics;
mod trace;

use crate::ClaimDue;
use crate::hooked::{Answer, Call, Hooked, Hooks};
use auth::a_destination_s_auth_reaches_every_try;
use callback::a_callback_delivers_the_parent_s_view;
use credentials::a_tenant_s_task_carries_only_credentials_lent_to_it;
use destinations::{
    breaker_opens_holds_without_attempts_probes_and_closes,
    default_slots_are_shared_fairly_between_hosts, destination_cap_holds_while_other_hosts_run,
    destination_rate_gives_its_rate_after_the_burst,
    held_tasks_cancel_at_once_and_are_never_called, pause_holds_a_destination_until_resumed,
    retry_after_holds_the_whole_destination,
};
use due_walk::a_due_task_runs_past_thousands_of_waiting_destinations;
use faults::{
    claim_errors_back_off, clock_jump_mid_call_delivers_once, outcome_write_retried_until_it_lands,
    panic_in_attempt_ends_it, wake_ups_from_elsewhere_share_claims,
};
use flow_keys::{
    a_flow_key_s_cap_holds_across_hosts, rate_limit_fields_hold_the_task_s_flow_key_too,
};
use outbound::outbound_calls_carry_headers_and_signatures_on_every_try;
use pacing::{
    a_resumed_backlog_runs_past_its_slow_start_without_waiting,
    first_contact_learns_the_window_before_the_backlog_goes,
    rate_limit_fields_hold_the_destination_until_their_reset,
    throttling_without_fields_halves_the_calls_in_flight,
};
use priority::higher_priorities_are_called_first;
use schedules::a_schedule_fires_one_task_per_time_and_records_it;
use tc_model::tenant::Scope;
use tenants::{
    tasks_without_a_tenant_keep_their_share_behind_a_backlog,
    tenants_share_a_destination_by_weight, the_worker_reads_only_the_tenants_weights,
};
use topics::{
    a_subscriber_failing_past_disable_after_is_disabled,
    a_subscriptions_own_secrets_sign_its_calls,
    an_event_reaches_each_matching_subscriber_with_its_id_and_type,
};
use trace::trace_context_reaches_every_try;

/// The longest any single wait in a scenario may take before it fails.
const GUARD: Duration = Duration::from_secs(30);

/// A store, a downstream and the script that downstream plays.
pub struct Rig<S, D> {
    /// The store under test.
    pub store: Arc<S>,
    /// The downstream under test; it plays `script`.
    pub downstream: Arc<D>,
    /// What the downstream answers, and what it saw.
    pub script: Arc<Script>,
    base_url: String,
    other_base_url: Option<String>,
    paused_clock: bool,
    clock: Clock,
}

impl<S: TaskStore, D: Downstream> Rig<S, D> {
    /// A rig whose task urls start with `base_url` (e.g. the loopback
    /// server's address; any http url for the in-process fake).
    pub fn new(
        store: Arc<S>,
        downstream: Arc<D>,
        script: Arc<Script>,
        base_url: impl Into<String>,
    ) -> Self {
        Rig {
            store,
            downstream,
            script,
            base_url: base_url.into(),
            other_base_url: None,
            paused_clock: false,
            clock: Clock::following_tokio(),
        }
    }

    /// The same rig with a second downstream host whose urls start with
    /// `base_url` (another destination: a different `host:port`) and that
    /// plays the same script (scenarios tell the hosts apart by path). The
    /// flow-control scenarios need it and fail without it.
    pub fn with_other_host(mut self, base_url: impl Into<String>) -> Self {
        self.other_base_url = Some(base_url.into());
        self
    }

    /// Says that the scenarios run on tokio's paused clock: long holds
    /// (a 30 s Retry-After, a breaker open for 30 s) take no real time, so
    /// they are played at their real length, and call times are checked
    /// exactly. Without it (real time: the matrix, PostgreSQL) those holds
    /// are shortened to a few seconds and only the bounds that no machine
    /// load can break are checked.
    pub fn on_paused_clock(mut self) -> Self {
        self.paused_clock = true;
        self
    }

    /// The url of `path` on the scripted downstream.
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url, path)
    }

    /// The url of `path` on the second host ([`Rig::with_other_host`]).
    pub fn other_url(&self, path: &str) -> Result<String, String> {
        self.other_base_url
            .as_ref()
            .map(|base| format!("{base}{path}"))
            .ok_or_else(|| "this rig has no second host (Rig::with_other_host)".to_owned())
    }

    /// A worker configuration for scenarios: quick backoff, short polls.
    pub fn config(&self) -> WorkerConfig {
        WorkerConfig {
            concurrency: 4,
            lease: Duration::from_secs(5),
            poll_interval: Duration::from_millis(20),
            shutdown_grace: Duration::from_secs(5),
            recover_interval: Duration::from_millis(50),
            retry: tc_retry::Policy {
                base: Duration::from_millis(20),
                cap: Duration::from_millis(100),
                max_retry_after: Duration::from_secs(3600),
            },
            jitter_seed: Some(7),
            breaker: tc_worker::BreakerPolicy::default(),
            settings_interval: Duration::from_millis(50),
            signing_secrets: Default::default(),
            tracer: None,
            schedules_interval: Duration::from_secs(30),
            allow_url_prefixes: Vec::new(),
            jwt: None,
            priority_aging: tc_model::priority::DEFAULT_AGING,
            claim_gather: tc_worker::DEFAULT_CLAIM_GATHER,
        }
    }

    /// Starts a worker on this rig's store and downstream. Scenarios
    /// subscribe to its events before their next await: on a current-thread
    /// runtime (the tests' and the matrix's) nothing runs before then.
    pub fn spawn_worker(&self, config: WorkerConfig) -> Worker<S> {
        Worker::spawn(
            Arc::clone(&self.store),
            Arc::clone(&self.downstream),
            config,
            self.clock.clone(),
            WorkerMetrics::default(),
        )
    }

    /// Submits a task for `path` with `key`, 3 attempts, a 2 s timeout.
    pub async fn submit(&self, path: &str, key: &str) -> Result<Task, String> {
        self.submit_with(path, key, 3, Duration::from_secs(2)).await
    }

    /// Submits a task with explicit attempts and timeout.
    pub async fn submit_with(
        &self,
        path: &str,
        key: &str,
        max_attempts: u32,
        timeout: Duration,
    ) -> Result<Task, String> {
        self.submit_url(self.url(path), key, max_attempts, timeout)
            .await
    }

    /// Submits a task for a full `url` (on either host).
    pub async fn submit_url(
        &self,
        url: String,
        key: &str,
        max_attempts: u32,
        timeout: Duration,
    ) -> Result<Task, String> {
        let new = NewTask::new(
            url,
            format!("{{\"key\":\"{key}\"}}").into_bytes(),
            key.to_owned(),
            max_attempts,
            timeout,
            &Limits::default(),
        )
        .map_err(|e| format!("invalid task: {e}"))?;
        let submitted = self
            .store
            .submit(new, self.clock.now())
            .await
            .map_err(|e| format!("submit: {e}"))?;
        Ok(submitted.task)
    }

    async fn get(&self, id: TaskId) -> Result<Task, String> {
        self.store
            .get(id, Scope::Admin)
            .await
            .map_err(|e| format!("get {id}: {e}"))
    }
}

/// Every worker scenario, declared once: `$callback! { name, ... }` is called
/// with the list, in the order the matrix prints it. A scenario's name is its
/// function's name, its `cargo test` name and its matrix row.
///
/// ```text
/// macro_rules! tests {
///     ($($name:ident),* $(,)?) => {
///         $(#[tokio::test(start_paused = true)]
///         async fn $name() { check(stringify!($name)).await })*
///     };
/// }
/// tc_testkit::worker_scenarios!(tests);
/// ```
#[macro_export]
macro_rules! worker_scenarios {
    ($callback:ident) => {
        $callback! {
            client_error_not_retried,
            server_errors_retried_to_limit,
            server_error_then_success,
            timeout_retried,
            retry_after_honoured,
            cancel_pending,
            cancel_claimed_not_started,
            cancel_in_flight,
            cancel_caller_gone,
            cancel_during_retry_wait,
            no_result_after_cancel,
            cancel_elsewhere_drops_the_call,
            lost_leases_are_found_without_reading_tasks,
            expired_lease_recovered,
            long_call_keeps_its_lease,
            idempotent_submit,
            idempotent_submit_concurrent,
            same_key_different_payload,
            shutdown_returns_in_flight_to_pending,
            concurrency_bound,
            retry_wait_holds_no_slot,
            one_runner_per_task,
            outcome_write_retried_until_it_lands,
            claim_errors_back_off,
            wake_ups_from_elsewhere_share_claims,
            panic_in_attempt_ends_it,
            clock_jump_mid_call_delivers_once,
            destination_cap_holds_while_other_hosts_run,
            default_slots_are_shared_fairly_between_hosts,
            destination_rate_gives_its_rate_after_the_burst,
            retry_after_holds_the_whole_destination,
            breaker_opens_holds_without_attempts_probes_and_closes,
            pause_holds_a_destination_until_resumed,
            held_tasks_cancel_at_once_and_are_never_called,
            rate_limit_fields_hold_the_destination_until_their_reset,
            throttling_without_fields_halves_the_calls_in_flight,
            first_contact_learns_the_window_before_the_backlog_goes,
            a_resumed_backlog_runs_past_its_slow_start_without_waiting,
            outbound_calls_carry_headers_and_signatures_on_every_try,
            trace_context_reaches_every_try,
            a_due_task_runs_past_thousands_of_waiting_destinations,
            a_callback_delivers_the_parent_s_view,
            a_schedule_fires_one_task_per_time_and_records_it,
            tenants_share_a_destination_by_weight,
            tasks_without_a_tenant_keep_their_share_behind_a_backlog,
            the_worker_reads_only_the_tenants_weights,
            a_tenant_s_task_carries_only_credentials_lent_to_it,
            a_destination_s_auth_reaches_every_try,
            an_event_reaches_each_matching_subscriber_with_its_id_and_type,
            a_subscriptions_own_secrets_sign_its_calls,
            a_subscriber_failing_past_disable_after_is_disabled,
            higher_priorities_are_called_first,
            a_flow_key_s_cap_holds_across_hosts,
            rate_limit_fields_hold_the_task_s_flow_key_too,
        }
    };
}

macro_rules! declare {
    ($($name:ident),* $(,)?) => {
        /// Every scenario's name, in the order the matrix prints them.
        pub const SCENARIOS: &[&str] = &[$(stringify!($name)),*];

        /// Runs the scenario called `name` on `rig`.
        pub async fn run<S: TaskStore, D: Downstream>(
            name: &str,
            rig: &Rig<S, D>,
        ) -> Result<(), String> {
            match name {
                $(stringify!($name) => $name(rig).await,)*
                other => Err(format!("no scenario named {other:?}")),
            }
        }
    };
}

worker_scenarios!(declare);

/// Waits for the attempt of `id` that leaves it in one of `states`.
async fn wait_for(
    events: &mut broadcast::Receiver<AttemptEnded>,
    id: TaskId,
    states: &[State],
) -> Result<AttemptEnded, String> {
    wait_for_within(events, id, states, GUARD).await
}

/// [`wait_for`] with its own limit, for waits longer than [`GUARD`].
async fn wait_for_within(
    events: &mut broadcast::Receiver<AttemptEnded>,
    id: TaskId,
    states: &[State],
    limit: Duration,
) -> Result<AttemptEnded, String> {
    let wait = async {
        loop {
            match events.recv().await {
                Ok(e) if e.task_id == id && states.contains(&e.state) => return Ok(e),
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    return Err(format!("missed {n} worker events"));
                }
                Err(broadcast::error::RecvError::Closed) => {
                    return Err("the worker stopped".to_owned());
                }
            }
        }
    };
    tokio::time::timeout(limit, wait)
        .await
        .map_err(|_| format!("task {id} did not reach {states:?} within {limit:?}"))?
}

async fn wait_terminal(
    events: &mut broadcast::Receiver<AttemptEnded>,
    id: TaskId,
) -> Result<AttemptEnded, String> {
    wait_for(
        events,
        id,
        &[State::Success, State::Failed, State::Canceled],
    )
    .await
}

/// Waits until every task in `ids` is terminal, in whatever order they end.
async fn wait_all_terminal(
    events: &mut broadcast::Receiver<AttemptEnded>,
    ids: &[TaskId],
) -> Result<(), String> {
    wait_all_terminal_within(events, ids, GUARD).await
}

/// [`wait_all_terminal`] with its own limit, for waits longer than [`GUARD`].
async fn wait_all_terminal_within(
    events: &mut broadcast::Receiver<AttemptEnded>,
    ids: &[TaskId],
    limit: Duration,
) -> Result<(), String> {
    let mut left: std::collections::HashSet<TaskId> = ids.iter().copied().collect();
    let wait = async {
        while !left.is_empty() {
            match events.recv().await {
                Ok(e) if e.state.is_terminal() => {
                    left.remove(&e.task_id);
                }
                Ok(_) => {}
                Err(e) => return Err(format!("worker events: {e}")),
            }
        }
        Ok(())
    };
    tokio::time::timeout(limit, wait)
        .await
        .map_err(|_| format!("{} tasks not terminal within {limit:?}", ids.len()))?
}

async fn guard<T>(what: &str, fut: impl Future<Output = T>) -> Result<T, String> {
    tokio::time::timeout(GUARD, fut)
        .await
        .map_err(|_| format!("{what}: not within {GUARD:?}"))
}

async fn stop<S: TaskStore>(worker: Worker<S>) -> Result<(), String> {
    worker
        .shutdown()
        .await
        .map(|_| ())
        .map_err(|e| format!("shutdown: {e}"))
}

/// A task POSTing `{}` to `url`, 3 attempts, 2 s timeout.
fn empty_task(url: String, key: &str) -> Result<NewTask, String> {
    NewTask::new(
        url,
        b"{}".to_vec(),
        key.to_owned(),
        3,
        Duration::from_secs(2),
        &Limits::default(),
    )
    .map_err(|e| format!("invalid task: {e}"))
}

/// Submits a task on `path` whose call never answers, wakes `worker`, and
/// waits until the call is in flight.
async fn hanging_call<S: TaskStore, D: Downstream, W: TaskStore>(
    rig: &Rig<S, D>,
    worker: &Worker<W>,
    path: &str,
) -> Result<Task, String> {
    rig.script.plan(path, [Step::Hang]);
    let task = rig
        .submit_with(path, &format!("k{path}"), 3, Duration::from_secs(60))
        .await?;
    worker.control().task_submitted();
    guard("the call to arrive", rig.script.wait_calls(1)).await?;
    Ok(task)
}

/// Runs one task on `path` with a fresh worker until it is terminal.
async fn run_one<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
    path: &str,
    key: &str,
    max_attempts: u32,
    timeout: Duration,
) -> Result<Task, String> {
    let worker = rig.spawn_worker(rig.config());
    let mut events = worker.control().subscribe();
    let task = rig.submit_with(path, key, max_attempts, timeout).await?;
    worker.control().task_submitted();
    wait_terminal(&mut events, task.id).await?;
    stop(worker).await?;
    rig.get(task.id).await
}

async fn client_error_not_retried<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    rig.script.plan("/bad", [Step::Reply(Reply::status(400))]);
    let task = run_one(rig, "/bad", "k-400", 3, Duration::from_secs(2)).await?;
    ensure!(task.state == State::Failed, "state {}", task.state);
    ensure!(
        task.error.as_deref() == Some("http_400"),
        "error {:?}",
        task.error
    );
    ensure!(
        rig.script.calls("/bad").len() == 1,
        "{} calls, want 1",
        rig.script.calls("/bad").len()
    );
    Ok(())
}

async fn server_errors_retried_to_limit<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    rig.script
        .plan("/down", (0..3).map(|_| Step::Reply(Reply::status(503))));
    let task = run_one(rig, "/down", "k-503", 3, Duration::from_secs(2)).await?;
    ensure!(task.state == State::Failed, "state {}", task.state);
    ensure!(
        task.error.as_deref() == Some("http_503"),
        "error {:?}",
        task.error
    );
    ensure!(task.attempt == 3, "attempt {}", task.attempt);
    ensure!(
        rig.script.calls("/down").len() == 3,
        "{} calls, want 3",
        rig.script.calls("/down").len()
    );
    ensure!(
        task.attempts.len() == 3,
        "{} attempt records",
        task.attempts.len()
    );
    ensure!(
        task.attempts
            .iter()
            .all(|a| a.http_status == Some(503) && a.error.as_deref() == Some("http_503")),
        "attempt records {:?}",
        task.attempts
    );
    Ok(())
}

async fn server_error_then_success<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    rig.script.plan(
        "/flaky",
        [
            Step::Reply(Reply::status(503)),
            Step::Reply(Reply::status(200)),
        ],
    );
    let task = run_one(rig, "/flaky", "k-flaky", 3, Duration::from_secs(2)).await?;
    ensure!(task.state == State::Success, "state {}", task.state);
    ensure!(task.attempt == 2, "attempt {}", task.attempt);
    ensure!(
        task.http_status == Some(200),
        "http_status {:?}",
        task.http_status
    );
    ensure!(
        task.result.as_deref() == Some(&b"{\"status\":200}"[..]),
        "result {:?}",
        task.result
    );
    ensure!(
        rig.script.calls("/flaky").len() == 2,
        "{} calls",
        rig.script.calls("/flaky").len()
    );
    let keys: Vec<_> = rig
        .script
        .calls("/flaky")
        .into_iter()
        .map(|c| (c.idempotency_key, c.attempt))
        .collect();
    ensure!(
        keys == [
            (Some("k-flaky".to_owned()), Some(1)),
            (Some("k-flaky".to_owned()), Some(2))
        ],
        "every try carries the key and its attempt: {keys:?}"
    );
    Ok(())
}

async fn timeout_retried<S: TaskStore, D: Downstream>(rig: &Rig<S, D>) -> Result<(), String> {
    rig.script
        .plan("/slow", [Step::Hang, Step::Reply(Reply::status(200))]);
    let task = run_one(rig, "/slow", "k-slow", 3, Duration::from_millis(200)).await?;
    ensure!(task.state == State::Success, "state {}", task.state);
    ensure!(task.attempt == 2, "attempt {}", task.attempt);
    ensure!(
        task.attempts.first().and_then(|a| a.error.as_deref()) == Some("timeout"),
        "first attempt {:?}",
        task.attempts.first()
    );
    Ok(())
}

async fn retry_after_honoured<S: TaskStore, D: Downstream>(rig: &Rig<S, D>) -> Result<(), String> {
    rig.script.plan(
        "/busy",
        [
            Step::Reply(Reply::status(429).retry_after("1")),
            Step::Reply(Reply::status(200)),
        ],
    );
    let task = run_one(rig, "/busy", "k-429", 3, Duration::from_secs(2)).await?;
    ensure!(task.state == State::Success, "state {}", task.state);
    let calls = rig.script.calls("/busy");
    ensure!(calls.len() == 2, "{} calls", calls.len());
    let gap = calls[1].at.duration_since(calls[0].at);
    // The policy's own backoff is at most 150 ms here: only Retry-After
    // explains a second's wait. Due times are stored in whole milliseconds,
    // so the retry may come up to 1 ms before a second after the first call.
    ensure!(
        gap >= Duration::from_millis(999),
        "second try {gap:?} after the first, want >= 1 s"
    );
    Ok(())
}

async fn cancel_pending<S: TaskStore, D: Downstream>(rig: &Rig<S, D>) -> Result<(), String> {
    let doomed = rig.submit("/doomed", "k-doomed").await?;
    let after = rig.submit("/after", "k-after").await?;
    // Canceled while pending and before any worker could claim it (the
    // worker's cancel does exactly this store write for a pending task).
    let canceled = rig
        .store
        .cancel(doomed.id, Scope::Admin, rig.clock.now())
        .await
        .map_err(|e| format!("cancel: {e}"))?;
    ensure!(
        canceled.state == State::Canceled,
        "cancel returned {}",
        canceled.state
    );
    let worker = rig.spawn_worker(WorkerConfig {
        concurrency: 1,
        ..rig.config()
    });
    let mut events = worker.control().subscribe();
    worker.control().task_submitted();
    // Claims go oldest first: once the later task is done, the canceled one was passed over.
    wait_terminal(&mut events, after.id).await?;
    stop(worker).await?;
    ensure!(
        rig.script.calls("/doomed").is_empty(),
        "a canceled pending task was called"
    );
    let doomed = rig.get(doomed.id).await?;
    ensure!(
        doomed.state == State::Canceled && doomed.attempt == 0,
        "{} attempt {}",
        doomed.state,
        doomed.attempt
    );
    Ok(())
}

async fn cancel_claimed_not_started<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    // A store whose claims stop between the database and the worker, so the
    // cancel lands exactly after the claim and before the call.
    let gated = Arc::new(GatedStore::new(Arc::clone(&rig.store)));
    let worker = Worker::spawn(
        Arc::clone(&gated),
        Arc::clone(&rig.downstream),
        rig.config(),
        rig.clock.clone(),
        WorkerMetrics::default(),
    );
    let control = worker.control();
    let mut events = control.subscribe();
    // Armed before the task exists, so its first claim is the one held.
    gated.hooks().arm_claim();
    let task = rig.submit("/claimed", "k-claimed").await?;
    control.task_submitted();
    guard("claim", gated.hooks().held()).await?;
    let canceled = control
        .cancel(task.id, Scope::Admin)
        .await
        .map_err(|e| format!("cancel: {e}"))?;
    ensure!(
        canceled.state == State::Canceled,
        "cancel returned {}",
        canceled.state
    );
    gated.hooks().release();
    let ended = wait_terminal(&mut events, task.id).await?;
    stop(worker).await?;
    ensure!(
        ended.state == State::Canceled,
        "attempt ended {}",
        ended.state
    );
    ensure!(
        rig.script.calls("/claimed").is_empty(),
        "a claimed-then-canceled task was called"
    );
    Ok(())
}

async fn cancel_in_flight<S: TaskStore, D: Downstream>(rig: &Rig<S, D>) -> Result<(), String> {
    let worker = rig.spawn_worker(rig.config());
    let mut events = worker.control().subscribe();
    let task = hanging_call(rig, &worker, "/hang").await?;
    let abandoned_before = rig.script.abandoned();
    let canceled = worker
        .control()
        .cancel(task.id, Scope::Admin)
        .await
        .map_err(|e| format!("cancel: {e}"))?;
    ensure!(
        canceled.state == State::Canceled,
        "cancel returned {}",
        canceled.state
    );
    // The downstream sees the call go away (for the real client: the connection closes).
    guard(
        "the call to be dropped",
        rig.script.wait_abandoned(abandoned_before + 1),
    )
    .await?;
    let ended = wait_terminal(&mut events, task.id).await?;
    stop(worker).await?;
    ensure!(
        ended.state == State::Canceled,
        "attempt ended {}",
        ended.state
    );
    let task = rig.get(task.id).await?;
    ensure!(
        task.state == State::Canceled && task.result.is_none(),
        "{} {:?}",
        task.state,
        task.result
    );
    ensure!(
        rig.script.calls("/hang").len() == 1,
        "called again after cancel"
    );
    Ok(())
}

async fn cancel_caller_gone<S: TaskStore, D: Downstream>(rig: &Rig<S, D>) -> Result<(), String> {
    // The caller of cancel goes away (an HTTP client hanging up) after the
    // store has the cancel and before the worker was told: the call must
    // still be dropped.
    let gated = Arc::new(GatedStore::new(Arc::clone(&rig.store)));
    let worker = Worker::spawn(
        Arc::clone(&gated),
        Arc::clone(&rig.downstream),
        // A lease so long that no heartbeat falls within the guard: only the
        // cancel itself can drop the call here.
        WorkerConfig {
            lease: Duration::from_secs(600),
            ..rig.config()
        },
        rig.clock.clone(),
        WorkerMetrics::default(),
    );
    let mut events = worker.control().subscribe();
    let task = hanging_call(rig, &worker, "/gone").await?;
    gated.hooks().arm_cancel();
    let control = worker.control();
    let caller = tokio::spawn(async move { control.cancel(task.id, Scope::Admin).await });
    guard("the cancel to be written", gated.hooks().held()).await?;
    caller.abort();
    gated.hooks().release();
    guard("the call to be dropped", rig.script.wait_abandoned(1)).await?;
    let ended = wait_terminal(&mut events, task.id).await?;
    stop(worker).await?;
    ensure!(
        ended.state == State::Canceled,
        "attempt ended {}",
        ended.state
    );
    Ok(())
}

async fn cancel_during_retry_wait<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    rig.script.plan("/later", [Step::Reply(Reply::status(503))]);
    let mut config = rig.config();
    config.retry.base = Duration::from_secs(60);
    config.retry.cap = Duration::from_secs(60);
    let worker = rig.spawn_worker(config);
    let mut events = worker.control().subscribe();
    let task = rig.submit("/later", "k-later").await?;
    worker.control().task_submitted();
    wait_for(&mut events, task.id, &[State::Pending]).await?;
    let waiting = rig.get(task.id).await?;
    ensure!(
        waiting.state == State::Pending && waiting.next_run_at.is_some(),
        "not waiting for a retry: {}",
        waiting.state
    );
    let canceled = worker
        .control()
        .cancel(task.id, Scope::Admin)
        .await
        .map_err(|e| format!("cancel: {e}"))?;
    ensure!(
        canceled.state == State::Canceled,
        "cancel returned {}",
        canceled.state
    );
    stop(worker).await?;
    // Nothing is left to claim, ever: the canceled task is no longer due.
    let due = rig.store.next_due().await.map_err(|e| e.to_string())?;
    ensure!(due.is_none(), "a canceled task is still due at {due:?}");
    let claimed = rig
        .store
        .claim_due(
            10,
            Timestamp::from_millis(i64::MAX / 2),
            Duration::from_secs(1),
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        claimed.is_empty(),
        "claimed {} tasks far in the future",
        claimed.len()
    );
    ensure!(
        rig.script.calls("/later").len() == 1,
        "{} calls",
        rig.script.calls("/later").len()
    );
    Ok(())
}

async fn no_result_after_cancel<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    // The answer arrives after the store already says canceled (a cancel that
    // raced the response): the guarded write must lose.
    rig.script.plan("/race", [Step::Gate(Reply::status(200))]);
    let worker = rig.spawn_worker(rig.config());
    let mut events = worker.control().subscribe();
    let task = rig.submit("/race", "k-race").await?;
    worker.control().task_submitted();
    guard("the call to arrive", rig.script.wait_calls(1)).await?;
    // Straight to the store, so the worker's in-flight call is not interrupted.
    rig.store
        .cancel(task.id, Scope::Admin, rig.clock.now())
        .await
        .map_err(|e| e.to_string())?;
    rig.script.open_gate();
    let ended = wait_terminal(&mut events, task.id).await?;
    stop(worker).await?;
    ensure!(
        ended.state == State::Canceled,
        "attempt ended {}",
        ended.state
    );
    let task = rig.get(task.id).await?;
    ensure!(task.state == State::Canceled, "state {}", task.state);
    ensure!(
        task.result.is_none() && task.http_status.is_none(),
        "a result was written: {:?} {:?}",
        task.http_status,
        task.result
    );
    Ok(())
}

async fn cancel_elsewhere_drops_the_call<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    // Canceled in the store by someone else (another server process on the
    // same database): the worker learns it at its next heartbeat, when the
    // lease is not extended, and drops the call.
    let worker = rig.spawn_worker(WorkerConfig {
        lease: Duration::from_millis(300),
        ..rig.config()
    });
    let mut events = worker.control().subscribe();
    let task = hanging_call(rig, &worker, "/elsewhere").await?;
    rig.store
        .cancel(task.id, Scope::Admin, rig.clock.now())
        .await
        .map_err(|e| e.to_string())?;
    guard("the call to be dropped", rig.script.wait_abandoned(1)).await?;
    let ended = wait_terminal(&mut events, task.id).await?;
    stop(worker).await?;
    ensure!(
        ended.state == State::Canceled,
        "attempt ended {}",
        ended.state
    );
    ensure!(
        worker_in_flight_is_zero(rig).await?,
        "a task is still running"
    );
    Ok(())
}

async fn lost_leases_are_found_without_reading_tasks<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    // Two of three running tasks are canceled elsewhere: the heartbeat that
    // finds their leases lost says what became of them, so the worker drops
    // both calls without reading a task (a read per running task, on every
    // tick that lost one, would cost O(running) reads).
    let gated = Arc::new(GatedStore::new(Arc::clone(&rig.store)));
    let worker = Worker::spawn(
        Arc::clone(&gated),
        Arc::clone(&rig.downstream),
        WorkerConfig {
            lease: Duration::from_millis(300),
            ..rig.config()
        },
        rig.clock.clone(),
        WorkerMetrics::default(),
    );
    let mut events = worker.control().subscribe();
    let mut tasks = Vec::new();
    for i in 0..3 {
        let path = format!("/lost-{i}");
        rig.script.plan(&path, [Step::Hang]);
        tasks.push(
            rig.submit_with(&path, &format!("k-lost-{i}"), 3, Duration::from_secs(60))
                .await?,
        );
    }
    worker.control().task_submitted();
    guard("three calls", rig.script.wait_calls(3)).await?;
    for task in &tasks[..2] {
        rig.store
            .cancel(task.id, Scope::Admin, rig.clock.now())
            .await
            .map_err(|e| e.to_string())?;
    }
    let canceled: Vec<TaskId> = tasks[..2].iter().map(|t| t.id).collect();
    wait_all_terminal(&mut events, &canceled).await?;
    guard("both calls dropped", rig.script.wait_abandoned(2)).await?;
    let reads = gated.hooks().gets();
    let kept = rig.get(tasks[2].id).await?;
    stop(worker).await?;
    ensure!(
        reads == 0,
        "the worker read {reads} tasks to learn which leases it lost"
    );
    ensure!(
        kept.state == State::Running,
        "the third task is {}",
        kept.state
    );
    Ok(())
}

async fn worker_in_flight_is_zero<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<bool, String> {
    let counts = rig
        .store
        .count_by_state()
        .await
        .map_err(|e| e.to_string())?;
    Ok(counts.get(State::Running) == 0)
}

async fn expired_lease_recovered<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let lease = Duration::from_millis(300);
    let first = rig.spawn_worker(WorkerConfig {
        lease,
        ..rig.config()
    });
    let task = hanging_call(rig, &first, "/crash").await?;
    // Killed: no shutdown, no release. The task stays running under a lease
    // nobody renews.
    drop(first);
    let running = rig.get(task.id).await?;
    ensure!(
        running.state == State::Running,
        "state after the crash {}",
        running.state
    );
    let second = rig.spawn_worker(WorkerConfig {
        lease,
        ..rig.config()
    });
    let mut events = second.control().subscribe();
    let ended = wait_terminal(&mut events, task.id).await?;
    stop(second).await?;
    ensure!(
        ended.state == State::Success,
        "recovered task ended {}",
        ended.state
    );
    let task = rig.get(task.id).await?;
    ensure!(task.attempt == 2, "attempt {}", task.attempt);
    ensure!(
        task.attempts.first().and_then(|a| a.error.as_deref()) == Some("interrupted"),
        "first try {:?}",
        task.attempts.first()
    );
    Ok(())
}

async fn long_call_keeps_its_lease<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    // The call outlives the lease several times over while recovery runs
    // every 50 ms: the heartbeat must keep the task this worker's.
    let lease = Duration::from_millis(300);
    rig.script.plan(
        "/long-call",
        [Step::ReplyAfter(
            Duration::from_millis(1200),
            Reply::status(200),
        )],
    );
    let worker = rig.spawn_worker(WorkerConfig {
        lease,
        ..rig.config()
    });
    let mut events = worker.control().subscribe();
    let task = rig.submit("/long-call", "k-long-call").await?;
    worker.control().task_submitted();
    let ended = wait_terminal(&mut events, task.id).await?;
    stop(worker).await?;
    ensure!(ended.state == State::Success, "ended {}", ended.state);
    let task = rig.get(task.id).await?;
    ensure!(
        task.attempt == 1 && task.attempts.len() == 1,
        "recovered under a live worker: {:?}",
        task.attempts
    );
    ensure!(
        rig.script.calls("/long-call").len() == 1,
        "{} calls",
        rig.script.calls("/long-call").len()
    );
    Ok(())
}

async fn idempotent_submit<S: TaskStore, D: Downstream>(rig: &Rig<S, D>) -> Result<(), String> {
    let task = run_one(rig, "/once", "k-once", 3, Duration::from_secs(2)).await?;
    ensure!(task.state == State::Success, "state {}", task.state);
    let again = rig
        .submit_with("/once", "k-once", 3, Duration::from_secs(2))
        .await?;
    ensure!(
        again.id == task.id && again.state == State::Success,
        "resubmit gave {} {}",
        again.id,
        again.state
    );
    // A worker that runs a later task has passed over the finished one.
    run_one(rig, "/marker", "k-marker", 3, Duration::from_secs(2)).await?;
    ensure!(
        rig.script.calls("/once").len() == 1,
        "the downstream was hit {} times",
        rig.script.calls("/once").len()
    );
    Ok(())
}

async fn idempotent_submit_concurrent<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let worker = rig.spawn_worker(rig.config());
    let mut events = worker.control().subscribe();
    let submits: Vec<_> = (0..50)
        .map(|_| {
            let store = Arc::clone(&rig.store);
            let url = rig.url("/same");
            let now = rig.clock.now();
            tokio::spawn(async move {
                let new = empty_task(url, "k-same")?;
                store.submit(new, now).await.map_err(|e| e.to_string())
            })
        })
        .collect();
    let mut ids = Vec::new();
    let mut created = 0;
    for submit in submits {
        let submitted = submit.await.map_err(|e| e.to_string())??;
        created += usize::from(submitted.created);
        ids.push(submitted.task.id);
    }
    ids.dedup();
    ensure!(
        ids.len() == 1 && created == 1,
        "{} ids, {created} created",
        ids.len()
    );
    worker.control().task_submitted();
    wait_terminal(&mut events, ids[0]).await?;
    stop(worker).await?;
    ensure!(
        rig.script.calls("/same").len() == 1,
        "{} downstream calls",
        rig.script.calls("/same").len()
    );
    Ok(())
}

async fn same_key_different_payload<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    rig.submit("/one", "k-conflict").await?;
    let other = empty_task(rig.url("/two"), "k-conflict")?;
    let got = rig.store.submit(other, rig.clock.now()).await;
    ensure!(
        got == Err(StoreError::IdempotencyConflict {
            fields: vec!["url", "json"]
        }),
        "got {got:?}"
    );
    let page = rig
        .store
        .list(
            ListQuery {
                filter: TaskFilter::state(None),
                limit: 100,
                after: None::<Cursor>,
                max_result_bytes: None,
                ..ListQuery::default()
            },
            Scope::Admin,
        )
        .await
        .map_err(|e| e.to_string())?;
    let with_key = page
        .tasks
        .iter()
        .filter(|t| t.idempotency_key == "k-conflict")
        .count();
    ensure!(with_key == 1, "{with_key} tasks with the key");
    Ok(())
}

async fn shutdown_returns_in_flight_to_pending<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let worker = rig.spawn_worker(WorkerConfig {
        shutdown_grace: Duration::from_millis(100),
        ..rig.config()
    });
    let task = hanging_call(rig, &worker, "/long").await?;
    let report = worker.shutdown().await.map_err(|e| e.to_string())?;
    ensure!(
        report.interrupted == 1,
        "interrupted {}",
        report.interrupted
    );
    let back = rig.get(task.id).await?;
    ensure!(
        back.state == State::Pending,
        "state after shutdown {}",
        back.state
    );
    ensure!(
        back.attempt == 0,
        "the interrupted try used up an attempt: {}",
        back.attempt
    );
    ensure!(
        back.attempts.len() == 1 && back.attempts[0].error.as_deref() == Some("interrupted"),
        "history {:?}",
        back.attempts
    );
    let running = rig
        .store
        .count_by_state()
        .await
        .map_err(|e| e.to_string())?
        .get(State::Running);
    ensure!(
        running == 0,
        "{running} tasks left running after a clean stop"
    );
    // A restart finishes it.
    let worker = rig.spawn_worker(rig.config());
    let mut events = worker.control().subscribe();
    worker.control().task_submitted();
    let ended = wait_terminal(&mut events, task.id).await?;
    stop(worker).await?;
    ensure!(
        ended.state == State::Success,
        "after restart {}",
        ended.state
    );
    Ok(())
}

async fn concurrency_bound<S: TaskStore, D: Downstream>(rig: &Rig<S, D>) -> Result<(), String> {
    const N: usize = 3;
    let mut ids = Vec::new();
    for i in 0..12 {
        let path = format!("/bound/{i}");
        rig.script.plan(
            &path,
            [Step::ReplyAfter(
                Duration::from_millis(30),
                Reply::status(200),
            )],
        );
        ids.push(rig.submit(&path, &format!("k-bound-{i}")).await?.id);
    }
    let worker = rig.spawn_worker(WorkerConfig {
        concurrency: N,
        ..rig.config()
    });
    let mut events = worker.control().subscribe();
    worker.control().task_submitted();
    wait_all_terminal(&mut events, &ids).await?;
    stop(worker).await?;
    let peak = rig.script.peak_in_flight();
    ensure!(peak == N, "peak in flight {peak}, want exactly {N}");
    Ok(())
}

async fn retry_wait_holds_no_slot<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    rig.script.plan("/waits", [Step::Reply(Reply::status(503))]);
    let mut config = WorkerConfig {
        concurrency: 1,
        ..rig.config()
    };
    config.retry.base = Duration::from_secs(60);
    config.retry.cap = Duration::from_secs(60);
    let worker = rig.spawn_worker(config);
    let mut events = worker.control().subscribe();
    let waiting = rig.submit("/waits", "k-waits").await?;
    worker.control().task_submitted();
    wait_for(&mut events, waiting.id, &[State::Pending]).await?;
    let other = rig.submit("/quick", "k-quick").await?;
    worker.control().task_submitted();
    wait_terminal(&mut events, other.id).await?;
    stop(worker).await?;
    let waiting = rig.get(waiting.id).await?;
    let other = rig.get(other.id).await?;
    let (Some(due), Some(done)) = (waiting.next_run_at, other.finished_at) else {
        return Err(format!(
            "missing times: {:?} {:?}",
            waiting.next_run_at, other.finished_at
        ));
    };
    ensure!(other.state == State::Success, "other task {}", other.state);
    ensure!(
        done < due,
        "the other task finished at {done:?}, not before the retry due at {due:?}"
    );
    Ok(())
}

async fn one_runner_per_task<S: TaskStore, D: Downstream>(rig: &Rig<S, D>) -> Result<(), String> {
    let mut ids = Vec::new();
    for i in 0..40 {
        let path = format!("/shared/{i}");
        rig.script.plan(
            &path,
            [Step::ReplyAfter(
                Duration::from_millis(5),
                Reply::status(200),
            )],
        );
        ids.push(rig.submit(&path, &format!("k-shared-{i}")).await?.id);
    }
    let a = rig.spawn_worker(rig.config());
    let b = rig.spawn_worker(rig.config());
    // Every task ends on exactly one of the two workers: merge their events.
    let (mut events_a, mut events_b) = (a.control().subscribe(), b.control().subscribe());
    a.control().task_submitted();
    b.control().task_submitted();
    let mut left: std::collections::HashSet<TaskId> = ids.iter().copied().collect();
    let everything_done = async {
        while !left.is_empty() {
            let event = tokio::select! {
                e = events_a.recv() => e,
                e = events_b.recv() => e,
            };
            match event {
                Ok(e) if e.state.is_terminal() => {
                    left.remove(&e.task_id);
                }
                Ok(_) => {}
                Err(e) => return Err(format!("worker events: {e}")),
            }
        }
        Ok(())
    };
    guard("all tasks done", everything_done).await??;
    stop(a).await?;
    stop(b).await?;
    for (i, id) in ids.iter().enumerate() {
        let calls = rig.script.calls(&format!("/shared/{i}"));
        ensure!(
            calls.len() == 1,
            "task {id} was called {} times",
            calls.len()
        );
        let task = rig.get(*id).await?;
        ensure!(
            task.state == State::Success && task.attempt == 1,
            "task {id}: {} attempt {}",
            task.state,
            task.attempt
        );
    }
    Ok(())
}

/// Claims after which [`GatedStore`] stops failing them (see its `claim`).
const SPIN_GUARD_CLAIMS: usize = 10_000;

/// A store that, once armed, holds the next claim (between the database and
/// the worker: the window of "claimed, not yet called") or the next cancel
/// (after its write, before its caller hears back) until released; and that
/// fails on request, as a full disk or a busy database would: the next K
/// completes, or every claim while claims are set to fail. It counts claims,
/// lease recoveries and the tenants' reads so that scenarios can wait on
/// them.
pub type GatedStore<S> = Hooked<S, Gates>;

impl<S> GatedStore<S> {
    /// Wraps `inner`; everything passes straight through until armed.
    pub fn new(inner: Arc<S>) -> GatedStore<S> {
        Hooked::with_hooks(inner, Gates::new())
    }
}

/// The hooks of a [`GatedStore`]: what is armed, what fails, what was counted.
pub struct Gates {
    claim_armed: std::sync::atomic::AtomicBool,
    cancel_armed: std::sync::atomic::AtomicBool,
    settings_armed: std::sync::atomic::AtomicBool,
    /// The task that claims (the worker's claim loop), from its last claim:
    /// its reads of the settings are never held ([`Gates::arm_settings`]).
    claimer: std::sync::Mutex<Option<tokio::task::Id>>,
    held: tokio::sync::Notify,
    released: tokio::sync::Notify,
    completes_to_fail: std::sync::atomic::AtomicUsize,
    completes_failed: std::sync::atomic::AtomicUsize,
    claims_fail: std::sync::atomic::AtomicBool,
    claims: std::sync::atomic::AtomicUsize,
    gets: std::sync::atomic::AtomicUsize,
    tenant_details: std::sync::atomic::AtomicUsize,
    weight_reads: tokio::sync::watch::Sender<usize>,
    recoveries: tokio::sync::watch::Sender<usize>,
}

impl Gates {
    fn new() -> Gates {
        Gates {
            claim_armed: std::sync::atomic::AtomicBool::new(false),
            cancel_armed: std::sync::atomic::AtomicBool::new(false),
            settings_armed: std::sync::atomic::AtomicBool::new(false),
            claimer: std::sync::Mutex::new(None),
            held: tokio::sync::Notify::new(),
            released: tokio::sync::Notify::new(),
            completes_to_fail: std::sync::atomic::AtomicUsize::new(0),
            completes_failed: std::sync::atomic::AtomicUsize::new(0),
            claims_fail: std::sync::atomic::AtomicBool::new(false),
            claims: std::sync::atomic::AtomicUsize::new(0),
            gets: std::sync::atomic::AtomicUsize::new(0),
            tenant_details: std::sync::atomic::AtomicUsize::new(0),
            weight_reads: tokio::sync::watch::Sender::new(0),
            recoveries: tokio::sync::watch::Sender::new(0),
        }
    }

    /// How many tasks were read through this store (`get`).
    pub fn gets(&self) -> usize {
        self.gets.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How many times the tenants were read with their counts and keys
    /// (`tenants`).
    pub fn tenant_details(&self) -> usize {
        self.tenant_details
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until the tenants' weights have been read `n` times in all
    /// (`tenant_settings`).
    pub async fn wait_weight_reads(&self, n: usize) {
        let mut seen = self.weight_reads.subscribe();
        // The sender lives in self, so the channel cannot close here.
        let _ = seen.wait_for(|done| *done >= n).await;
    }

    /// Fails the next `k` completes with [`StoreError::Unavailable`].
    pub fn fail_completes(&self, k: usize) {
        self.completes_to_fail
            .store(k, std::sync::atomic::Ordering::SeqCst);
    }

    /// How many completes failed on request.
    pub fn completes_failed(&self) -> usize {
        self.completes_failed
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Makes every claim fail (`true`) or pass through (`false`).
    pub fn fail_claims(&self, fail: bool) {
        self.claims_fail
            .store(fail, std::sync::atomic::Ordering::SeqCst);
    }

    /// How many claims were asked for, failed or not.
    pub fn claims(&self) -> usize {
        self.claims.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until lease recovery has run `n` times in all.
    pub async fn wait_recoveries(&self, n: usize) {
        let mut seen = self.recoveries.subscribe();
        // The sender lives in self, so the channel cannot close here.
        let _ = seen.wait_for(|done| *done >= n).await;
    }

    /// How many times lease recovery has run.
    pub fn recoveries(&self) -> usize {
        *self.recoveries.borrow()
    }

    /// Holds the next claim that returns at least one task.
    pub fn arm_claim(&self) {
        self.claim_armed
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Holds the next cancel once it is written.
    pub fn arm_cancel(&self) {
        self.cancel_armed
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Holds the next read of the destination settings (before it reads)
    /// made by a task other than the one that claims: the settings loop's.
    /// The claim loop reads them itself before a claim while a change it
    /// was told of is unread; held, it would never claim again, and a
    /// scenario waiting on its tasks would wait for good (the matrix's
    /// `outbound_calls_carry_headers_and_signatures_on_every_try`, about 1
    /// run in 100 on a real clock, when a claim round began just as the
    /// change was announced).
    pub fn arm_settings(&self) {
        self.settings_armed
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Waits until a claim, a cancel or a settings read is held.
    pub async fn held(&self) {
        self.held.notified().await;
    }

    /// Lets the held operation return.
    pub fn release(&self) {
        self.released.notify_one();
    }

    /// Whether the call under way is made by the task that claims.
    fn by_claimer(&self) -> bool {
        let claimer = *self
            .claimer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        claimer.is_some() && claimer == tokio::task::try_id()
    }

    async fn hold_if(&self, armed: &std::sync::atomic::AtomicBool) {
        if armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
            // notify_one stores a permit, so the test may start waiting late.
            self.held.notify_one();
            self.released.notified().await;
        }
    }
}

impl Hooks for Gates {
    async fn before(&self, call: Call) -> Result<(), StoreError> {
        match call {
            Call::Get => {
                self.gets.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            Call::Tenants => {
                self.tenant_details
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            Call::DestinationSettings if !self.by_claimer() => {
                self.hold_if(&self.settings_armed).await;
            }
            Call::Claim => {
                if let Some(task) = tokio::task::try_id() {
                    *self
                        .claimer
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(task);
                }
                let claims = self
                    .claims
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                // A claim loop that spins on errors would never let a paused
                // clock move: past this many claims the failure stops, so
                // such a loop ends its scenario (failed, by the claim count)
                // instead of hanging it.
                if claims >= SPIN_GUARD_CLAIMS {
                    self.fail_claims(false);
                }
                if self.claims_fail.load(std::sync::atomic::Ordering::SeqCst) {
                    return Err(StoreError::Unavailable("claims fail (test)".to_owned()));
                }
            }
            Call::Complete => {
                let fail = self
                    .completes_to_fail
                    .fetch_update(
                        std::sync::atomic::Ordering::SeqCst,
                        std::sync::atomic::Ordering::SeqCst,
                        |left| left.checked_sub(1),
                    )
                    .is_ok();
                if fail {
                    self.completes_failed
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    return Err(StoreError::Unavailable(
                        "database or disk is full (test)".to_owned(),
                    ));
                }
            }
            _ => {}
        }
        Ok(())
    }

    async fn after(&self, call: Call, answer: Answer<'_>) {
        match call {
            Call::Claim => {
                let took = answer
                    .ok()
                    .and_then(|a| a.downcast_ref::<tc_model::claim::Claim>())
                    .is_some_and(|claim| !claim.tasks.is_empty());
                if took {
                    self.hold_if(&self.claim_armed).await;
                }
            }
            Call::Cancel if answer.is_ok() => self.hold_if(&self.cancel_armed).await,
            Call::RecoverExpired => self.recoveries.send_modify(|done| *done += 1),
            Call::TenantSettings => self.weight_reads.send_modify(|n| *n += 1),
            _ => {}
        }
    }
}
