//! taskcenter's worker: the loop that turns registered tasks into downstream
//! calls.
//!
//! - **Bounded**: at most `concurrency` calls in flight. A permit is taken
//!   before claiming and held until the outcome is written; a task waiting for
//!   its retry holds nothing (it is written back as pending, due later).
//! - **Claim loop**: wakes when a task is submitted ([`WorkerControl::task_submitted`]),
//!   at the earliest due retry, or every `poll_interval`; claims at most as
//!   many tasks as it has free permits.
//! - **Cancel** ([`WorkerControl::cancel`]) reaches a task wherever it is, and
//!   drops an in-flight call's future, which closes its connection.
//! - **Leases**: claimed tasks are heartbeated while they run; expired leases
//!   (a crashed worker) are recovered at start and periodically.
//! - **Shutdown** ([`Worker::shutdown`]): stop claiming, let calls finish
//!   within a grace period, put the rest back to pending without using up an
//!   attempt.
//!
//! The worker knows the store and the downstream only through their ports.

mod attempt;
mod clock;
mod control;
mod flow;
mod metrics;
mod outbound;
mod pruner;
mod trace;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tc_downstream::Downstream;
use tc_model::State;
use tc_model::claim::Claim;
use tc_model::store::{LeaseLost, TaskStore};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::attempt::{AttemptContext, run_attempt};
pub use crate::clock::Clock;
use crate::control::Shared;
pub use crate::control::{AttemptEnded, WorkerControl};
use crate::flow::Flow;
pub use crate::flow::{BreakerPolicy, BreakerState, DestinationState};
pub use crate::metrics::{DESTINATION_LABELS_LIMIT, OTHER_DESTINATIONS, WorkerMetrics};
use crate::outbound::Outbound;
pub use crate::pruner::{PRUNE_BATCH, Pruner, PrunerMetrics, Retention, prune_round};
pub use crate::trace::SpanTracer;

/// How the worker runs.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The most downstream calls in flight at once (at least 1).
    pub concurrency: usize,
    /// How long a claim holds a task before another worker may recover it.
    pub lease: Duration,
    /// The longest the claim loop sleeps without being woken when it found
    /// less than it asked for (it sleeps until the earliest task not yet
    /// due, [`tc_model::claim::Claim::resume_after`], when that is sooner);
    /// also the first wait after a failed claim.
    pub poll_interval: Duration,
    /// How long shutdown waits for in-flight calls before interrupting them.
    pub shutdown_grace: Duration,
    /// How often expired leases are recovered.
    pub recover_interval: Duration,
    /// Backoff and Retry-After bounds.
    pub retry: tc_retry::Policy,
    /// Seed for the backoff jitter; `None` seeds from the OS.
    pub jitter_seed: Option<u64>,
    /// When a destination's circuit breaker opens.
    pub breaker: BreakerPolicy,
    /// How often destination settings are read from the store (a change
    /// through this process is seen at once).
    pub settings_interval: Duration,
    /// The Standard Webhooks secrets that sign calls to destinations with
    /// none of their own (`--signing-secret`); none: those are not signed.
    pub signing_secrets: tc_model::signing::SigningSecrets,
    /// Makes one OpenTelemetry span per try (`--otlp-endpoint`); `None`:
    /// no spans, and each call's `traceparent` names the task's stored
    /// parent.
    pub tracer: Option<SpanTracer>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            concurrency: 8,
            lease: Duration::from_secs(30),
            poll_interval: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(10),
            recover_interval: Duration::from_secs(15),
            retry: tc_retry::Policy::default(),
            jitter_seed: None,
            breaker: BreakerPolicy::default(),
            settings_interval: Duration::from_secs(1),
            signing_secrets: tc_model::signing::SigningSecrets::default(),
            tracer: None,
        }
    }
}

/// What a shutdown did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShutdownReport {
    /// Calls still in flight when the grace period ended, put back to pending.
    pub interrupted: usize,
}

/// Why the worker stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A worker task panicked or was aborted.
    #[error("worker task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// A running worker. Dropping it without [`Worker::shutdown`] aborts its tasks.
pub struct Worker<S> {
    control: WorkerControl<S>,
    stop: CancellationToken,
    tasks: JoinSet<Result<ShutdownReport, WorkerError>>,
}

impl<S: TaskStore> Worker<S> {
    /// Starts the worker on the current tokio runtime: recovers expired
    /// leases, then claims and runs due tasks until [`Worker::shutdown`].
    pub fn spawn<D: Downstream>(
        store: Arc<S>,
        downstream: Arc<D>,
        config: WorkerConfig,
        clock: Clock,
        metrics: WorkerMetrics,
    ) -> Worker<S> {
        let flow = Flow::new(config.breaker, metrics.destinations.clone());
        let outbound = Outbound::new(config.signing_secrets.clone());
        let shared = Arc::new(Shared::new(store, clock, flow, outbound));
        let rng = match config.jitter_seed {
            Some(seed) => fastrand::Rng::with_seed(seed),
            None => fastrand::Rng::new(),
        };
        let ctx = Arc::new(AttemptContext {
            shared: Arc::clone(&shared),
            downstream,
            policy: config.retry,
            rng: Arc::new(Mutex::new(rng)),
            metrics,
            tracer: config.tracer.clone(),
        });
        let stop = CancellationToken::new();
        let mut tasks = JoinSet::new();
        tasks.spawn(claim_loop(ctx, config, stop.clone()));
        Worker {
            control: WorkerControl { shared },
            stop,
            tasks,
        }
    }

    /// The handle for submit wake-ups and cancels.
    pub fn control(&self) -> WorkerControl<S> {
        self.control.clone()
    }

    /// Stops claiming, waits up to the grace period for in-flight calls, then
    /// interrupts what is left and puts it back to pending. When this returns,
    /// this worker has no task running in the store.
    pub async fn shutdown(mut self) -> Result<ShutdownReport, WorkerError> {
        self.stop.cancel();
        let mut report = ShutdownReport::default();
        while let Some(joined) = self.tasks.join_next().await {
            report.interrupted += joined??.interrupted;
        }
        Ok(report)
    }
}

impl<S> Drop for Worker<S> {
    fn drop(&mut self) {
        // After a shutdown nothing runs any more; without one, the tasks are
        // aborted right after this, and their attempts must not mistake that
        // for a panic.
        self.control.shared.abort();
    }
}

/// The longest the claim loop waits after a failed claim.
const CLAIM_BACKOFF_CAP: Duration = Duration::from_secs(5);

/// Claims due tasks while there are permits, runs them, and on stop drains.
async fn claim_loop<S: TaskStore, D: Downstream>(
    ctx: Arc<AttemptContext<S, D>>,
    config: WorkerConfig,
    stop: CancellationToken,
) -> Result<ShutdownReport, WorkerError> {
    let shared = Arc::clone(&ctx.shared);
    let permits = Arc::new(Semaphore::new(config.concurrency.max(1)));
    // Cancels every attempt's token at once when the grace period ends.
    let interrupt_all = CancellationToken::new();
    let mut attempts = JoinSet::new();
    let mut background = JoinSet::new();
    // Recover before the first claim, so tasks a crashed run left behind are
    // due again right away.
    recover_once(&shared, config.lease).await;
    read_settings(&shared).await;
    background.spawn(heartbeat_loop(Arc::clone(&shared), config.lease));
    background.spawn(settings_loop(
        Arc::clone(&shared),
        config.settings_interval,
        stop.clone(),
    ));
    background.spawn(recover_loop(
        Arc::clone(&shared),
        config.recover_interval,
        config.lease,
        stop.clone(),
    ));

    // Doubles from the poll interval after each failed claim, up to
    // CLAIM_BACKOFF_CAP; reset by the first claim that works.
    let mut claim_backoff: Option<Duration> = None;
    'claiming: loop {
        // Wait for one permit: never claim more than can run.
        let first = tokio::select! {
            biased;
            _ = stop.cancelled() => break 'claiming,
            permit = Arc::clone(&permits).acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break 'claiming,
            },
            Some(joined) = attempts.join_next(), if !attempts.is_empty() => {
                log_join(joined);
                continue 'claiming;
            }
        };
        // A JoinSet keeps each finished task until it is joined, and under a
        // steady backlog this loop goes from claim to claim without reaching
        // a wait that joins: finished attempts piled up (about 3 KiB each;
        // 18,000 of them, 50 MiB, within the bench's ten-second RSS window).
        while let Some(joined) = attempts.try_join_next() {
            log_join(joined);
        }
        let mut held = vec![first];
        while let Ok(p) = Arc::clone(&permits).try_acquire_owned() {
            held.push(p);
        }

        let wanted = held.len();
        if shared.outbound.stale() {
            // Settings changed through this process since the copy was
            // read: a task claimed now must send the new headers.
            read_settings(&shared).await;
        }
        shared.begin_claim();
        let now = shared.clock.now();
        let gate = shared.flow.gate(now);
        let claim = match shared.store.claim(wanted, now, config.lease, gate).await {
            Ok(claim) => {
                if claim_backoff.take().is_some() {
                    tracing::info!("claims_resumed");
                }
                claim
            }
            Err(e) => {
                // A failing store must not be hammered: wait, longer each
                // time, without waking for submits (they fail alike).
                shared.finish_claim(&[]);
                drop(held);
                let wait = claim_backoff
                    .map_or(config.poll_interval, |w| w * 2)
                    .min(CLAIM_BACKOFF_CAP)
                    .max(Duration::from_millis(1));
                claim_backoff = Some(wait);
                tracing::error!(error = %e, retry_in_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX), "claim_failed");
                let until = tokio::time::Instant::now() + wait;
                loop {
                    tokio::select! {
                        biased;
                        _ = stop.cancelled() => break 'claiming,
                        _ = tokio::time::sleep_until(until) => continue 'claiming,
                        Some(joined) = attempts.join_next(), if !attempts.is_empty() => log_join(joined),
                    }
                }
            }
        };
        let Claim {
            tasks: claimed,
            resume_after,
            cursor,
        } = claim;
        shared.flow.claimed(&claimed, cursor, now);
        let ids: Vec<_> = claimed.iter().map(|t| (t.id, t.attempt)).collect();
        let tokens = shared.finish_claim(&ids);
        let got = claimed.len();
        for (task, token) in claimed.into_iter().zip(tokens) {
            let Some(permit) = held.pop() else { break };
            match token {
                Some(cancel) => {
                    attempts.spawn(run_attempt(
                        Arc::clone(&ctx),
                        task,
                        cancel,
                        interrupt_all.clone(),
                        permit,
                    ));
                }
                None => {
                    // Canceled while the claim was on its way: never called.
                    tracing::info!(task_id = %task.id, "task_skip_canceled");
                    ctx.metrics.count("canceled");
                    shared
                        .flow
                        .ended(&task.destination, (task.id, task.attempt));
                    shared.attempt_ended(AttemptEnded {
                        task_id: task.id,
                        attempt: task.attempt,
                        state: State::Canceled,
                    });
                }
            }
        }
        drop(held);
        if got == wanted {
            // The pool, not the store, was the limit: go straight back for
            // more as permits free up.
            continue;
        }

        // Nothing more is due now: sleep until woken, the poll interval, or
        // the earliest task not yet due (the claim said when), whichever
        // comes first. A task due already but held (its destination paused,
        // at its cap, out of tokens, backing off) does not wake the loop:
        // it would spin. What ends a hold wakes it, or the poll interval.
        let mut wake_at = tokio::time::Instant::now() + config.poll_interval;
        let now = shared.clock.now();
        if let Some(due) = resume_after.filter(|due| *due > now) {
            wake_at = wake_at.min(shared.clock.instant_of(due));
        }
        if let Some(release) = shared.flow.next_release(now) {
            wake_at = wake_at.min(shared.clock.instant_of(release));
        }
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => break 'claiming,
                _ = shared.wake.notified() => break,
                _ = tokio::time::sleep_until(wake_at) => break,
                Some(joined) = attempts.join_next(), if !attempts.is_empty() => log_join(joined),
            }
        }
    }

    // Shutdown: no more claims. Let in-flight calls finish within the grace
    // period, then interrupt the rest; each interrupted attempt releases its
    // task back to pending itself.
    let in_flight = attempts.len();
    let drained = tokio::time::timeout(config.shutdown_grace, async {
        while let Some(joined) = attempts.join_next().await {
            log_join(joined);
        }
    })
    .await;
    let mut report = ShutdownReport::default();
    if drained.is_err() {
        report.interrupted = attempts.len();
        tracing::info!(
            in_flight,
            interrupted = report.interrupted,
            "shutdown_interrupting"
        );
        interrupt_all.cancel();
        while let Some(joined) = attempts.join_next().await {
            log_join(joined);
        }
    }
    // Heartbeats stop only now: calls in their grace period kept their leases.
    background.shutdown().await;
    Ok(report)
}

/// Reads the destination settings into the worker's flow control.
async fn read_settings<S: TaskStore>(shared: &Shared<S>) {
    let read = shared.outbound.read_begins();
    match shared.store.destination_settings().await {
        Ok(settings) => {
            shared.outbound.set(&settings, read);
            shared.flow.set_settings(settings, shared.clock.now());
        }
        Err(e) => tracing::error!(error = %e, "destination_settings_failed"),
    }
}

/// How many settings reads pass between two updates of the held gauges
/// (those count tasks per destination, which costs more).
const HELD_METRICS_EVERY: u32 = 5;

/// Reads destination settings every `every`, and at once when told they
/// changed; now and then sets the `held` gauges.
async fn settings_loop<S: TaskStore>(
    shared: Arc<Shared<S>>,
    every: Duration,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(every.max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut round = 0u32;
    loop {
        let told = tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => false,
            _ = shared.settings_changed.notified() => true,
        };
        read_settings(&shared).await;
        if told {
            shared.wake.notify_one();
        }
        round = round.wrapping_add(1);
        if round.is_multiple_of(HELD_METRICS_EVERY) {
            update_held_metrics(&shared).await;
        }
    }
}

async fn update_held_metrics<S: TaskStore>(shared: &Shared<S>) {
    let destinations = match shared.store.destinations().await {
        Ok(destinations) => destinations,
        Err(e) => {
            tracing::error!(error = %e, "destination_counts_failed");
            return;
        }
    };
    let now = shared.clock.now();
    let held: Vec<(String, &'static str, u64)> = destinations
        .into_iter()
        .filter(|d| d.pending > 0)
        .filter_map(|d| {
            let reason = shared
                .flow
                .hold_reason(&d.name, &d.settings, d.running, now)?;
            Some((d.name, reason.as_str(), d.pending))
        })
        .collect();
    shared.flow.metrics().set_held(&held);
}

/// Extends the leases of every task this worker runs, at a third of the lease.
///
/// It runs until the claim loop aborts it after draining, not on stop: calls
/// in their grace period still need their leases.
async fn heartbeat_loop<S: TaskStore>(shared: Arc<Shared<S>>, lease: Duration) {
    let mut tick = tokio::time::interval((lease / 3).max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let running = shared.running();
        if running.is_empty() {
            continue;
        }
        match shared
            .store
            .heartbeat(running, shared.clock.now(), lease)
            .await
        {
            Ok(lost) => stop_taken_away(&shared, &lost),
            Err(e) => tracing::error!(error = %e, "heartbeat_failed"),
        }
    }
}

/// Some leases were not extended: those tasks are no longer this worker's
/// (canceled through another process, or recovered after a stall). Their
/// calls are dropped, as a cancel through this worker would; the heartbeat
/// said what became of each, so nothing is read. An attempt that ended
/// here meanwhile is no longer running and is left alone.
fn stop_taken_away<S: TaskStore>(shared: &Shared<S>, lost: &[LeaseLost]) {
    for lost in lost {
        let (id, attempt) = (lost.id, lost.attempt);
        // A task gone from the store was finished and deleted: its call's
        // answer has nowhere to land, as for a cancel.
        let state = lost.state.unwrap_or(State::Canceled);
        if shared.stop_attempt(id, attempt, state) {
            tracing::info!(task_id = %id, attempt, state = %state, "task_taken_away");
        }
    }
}

/// Recovers expired leases every `every` (the first run is at start, by the
/// claim loop).
async fn recover_loop<S: TaskStore>(
    shared: Arc<Shared<S>>,
    every: Duration,
    lease: Duration,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(every.max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => recover_once(&shared, lease).await,
        }
    }
}

/// Recovers expired leases, never this worker's own: its running attempts
/// are heartbeated first, at the same `now`. A forward jump of the wall clock
/// larger than the lease would otherwise make this very worker take back (and
/// call again) tasks it is still running.
async fn recover_once<S: TaskStore>(shared: &Shared<S>, lease: Duration) {
    let now = shared.clock.now();
    let running = shared.running();
    if !running.is_empty()
        && let Err(e) = shared.store.heartbeat(running, now, lease).await
    {
        // Recovering now could take back our own calls: skip this round.
        tracing::error!(error = %e, "heartbeat_failed");
        return;
    }
    match shared.store.recover_expired(now).await {
        Ok(0) => {}
        Ok(recovered) => {
            tracing::info!(recovered, "leases_recovered");
            shared.wake.notify_one();
        }
        Err(e) => tracing::error!(error = %e, "recover_failed"),
    }
}

fn log_join(joined: Result<(), tokio::task::JoinError>) {
    if let Err(e) = joined {
        tracing::error!(error = %e, "attempt_task_failed");
    }
}
