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
//! - **Schedules**: a second loop fires the schedules on their cron
//!   (scheduler.rs), woken by [`WorkerControl::schedules_changed`].
//! - **Shutdown** ([`Worker::shutdown`]): stop claiming, let calls finish
//!   within a grace period, put the rest back to pending without using up an
//!   attempt.
//!
//! The worker knows the store and the downstream only through their ports.

mod attempt;
mod auth;
mod background;
mod claim_loop;
mod clock;
mod cluster;
mod control;
mod flow;
mod metrics;
mod outbound;
mod pacing;
mod pruner;
mod registry;
mod scheduler;
mod tenant_share;
mod trace;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tc_downstream::Downstream;
use tc_model::store::TaskStore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::attempt::AttemptContext;
pub use crate::auth::JwtSigner;
use crate::claim_loop::claim_loop;
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
    /// How often destination and tenant settings are read from the store
    /// (a change through this process is seen at once).
    pub settings_interval: Duration,
    /// The Standard Webhooks secrets that sign the calls of tasks without a
    /// tenant to destinations with none of their own (`--signing-secret`);
    /// none: those are not signed. Never a tenant's task
    /// ([`tc_model::outbound`]).
    pub signing_secrets: tc_model::signing::SigningSecrets,
    /// Makes one OpenTelemetry span per try (`--otlp-endpoint`); `None`:
    /// no spans, and each call's `traceparent` names the task's stored
    /// parent.
    pub tracer: Option<SpanTracer>,
    /// The longest the schedules' firing loop sleeps before it reads the
    /// schedules again (a change through this process wakes it at once;
    /// one made on another node is seen within this).
    pub schedules_interval: Duration,
    /// The allow-list (`--allow-url-prefix`; empty: every url): a
    /// schedule's firing whose task's `url` or `callback_url` is under no
    /// prefix creates no task and is recorded as the schedule's
    /// `last_error` ([`tc_model::urls_allowed`]).
    pub allow_url_prefixes: Vec<String>,
    /// What signs the JWTs of destinations whose `auth` is `jwt` (issue
    /// 41: `--issuer` and the server's keys); `None`: such a call fails
    /// with `auth_failed`.
    pub jwt: Option<JwtSigner>,
    /// How long a due task waits to count one priority level higher in
    /// its destination's claim order (`--priority-aging-ms`, issue 40 item
    /// 4; [`tc_model::priority`]).
    pub priority_aging: Duration,
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
            schedules_interval: Duration::from_secs(30),
            allow_url_prefixes: Vec::new(),
            jwt: None,
            priority_aging: tc_model::priority::DEFAULT_AGING,
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
        let flow = Flow::new(
            config.breaker,
            metrics.destinations.clone(),
            config.concurrency,
        );
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
            auth: crate::auth::CallAuth::new(config.jwt.clone()),
        });
        let stop = CancellationToken::new();
        let mut tasks = JoinSet::new();
        tasks.spawn(crate::scheduler::schedule_loop(
            Arc::clone(&shared),
            config.clone(),
            stop.clone(),
        ));
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
