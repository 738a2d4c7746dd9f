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
mod config;
mod delivery_inputs;
mod flow;
mod metrics;
mod pacing;
mod pruner;
mod registry;
mod scheduler;
mod shared;
mod tenant_share;
mod topic_health;
mod trace;

use std::sync::{Arc, Mutex};

use tc_downstream::Downstream;
use tc_model::store::TaskStore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::attempt::AttemptContext;
pub use crate::auth::JwtSigner;
use crate::claim_loop::claim_loop;
pub use crate::clock::Clock;
pub use crate::config::{
    DEFAULT_CLAIM_GATHER, SHARED_CLAIM_GATHER, ShutdownReport, WorkerConfig, WorkerError,
};
use crate::delivery_inputs::Outbound;
use crate::flow::Flow;
pub use crate::flow::{BreakerPolicy, BreakerState, DestinationState};
pub use crate::metrics::{DESTINATION_LABELS_LIMIT, OTHER_DESTINATIONS, WorkerMetrics};
pub use crate::pruner::{PRUNE_BATCH, Pruner, PrunerMetrics, Retention, prune_round};
use crate::shared::Shared;
pub use crate::shared::{AttemptEnded, WorkerControl};
pub use crate::trace::SpanTracer;

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
