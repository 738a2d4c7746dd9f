//! Retention: finished tasks older than their state's retention are deleted
//! in small batches, so the database stops growing under a steady load.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tc_model::State;
use tc_model::store::TaskStore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::Clock;

/// The most tasks one prune transaction deletes: small enough that the
/// writer is never held long enough to delay a submit noticeably.
pub const PRUNE_BATCH: usize = 1000;

/// How long finished tasks are kept, per terminal state; `None` keeps them
/// for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// `success` tasks (default 7 days).
    pub success: Option<Duration>,
    /// `failed` tasks (default 30 days): failures are kept longest, to be
    /// found and retried.
    pub failed: Option<Duration>,
    /// `canceled` tasks (default 7 days).
    pub canceled: Option<Duration>,
}

impl Default for Retention {
    fn default() -> Self {
        const DAY: Duration = Duration::from_secs(24 * 3600);
        Retention {
            success: Some(7 * DAY),
            failed: Some(30 * DAY),
            canceled: Some(7 * DAY),
        }
    }
}

impl Retention {
    fn per_state(&self) -> [(State, Option<Duration>); 3] {
        [
            (State::Success, self.success),
            (State::Failed, self.failed),
            (State::Canceled, self.canceled),
        ]
    }

    /// How often a pruning round runs: a quarter of the shortest retention,
    /// between 100 ms and a minute; `None` when everything is kept.
    pub fn round_interval(&self) -> Option<Duration> {
        self.per_state()
            .iter()
            .filter_map(|(_, keep)| *keep)
            .min()
            .map(|shortest| {
                (shortest / 4).clamp(Duration::from_millis(100), Duration::from_secs(60))
            })
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

/// `taskcenter_pruned_total{state}`. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct PrunerMetrics {
    pruned: Family<StateLabel, Counter>,
}

impl PrunerMetrics {
    /// Adds the counter to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "taskcenter_pruned",
            "Finished tasks deleted by retention, by state",
            self.pruned.clone(),
        );
    }

    /// How many `state` tasks were pruned so far.
    pub fn pruned(&self, state: State) -> u64 {
        self.pruned
            .get_or_create(&StateLabel {
                state: state.as_str(),
            })
            .get()
    }
}

/// A running pruner; [`Pruner::stop`] ends it between batches.
pub struct Pruner {
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Pruner {
    /// Starts pruning `store` by `retention` on the current runtime, on
    /// the rounds when the store says this process leads upkeep
    /// ([`Work::leads_upkeep`](tc_model::store::Work::leads_upkeep)). With every state kept for good,
    /// nothing runs.
    pub fn spawn<S: TaskStore>(
        store: Arc<S>,
        retention: Retention,
        clock: Clock,
        metrics: PrunerMetrics,
    ) -> Pruner {
        let stop = CancellationToken::new();
        let task = retention.round_interval().map(|every| {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tick.tick() => {}
                    }
                    // Of several nodes on one store, the upkeep leader
                    // prunes for all.
                    if store.leads_upkeep() {
                        prune_round(&*store, &retention, &clock, &metrics, &stop).await;
                    }
                }
            })
        });
        Pruner { stop, task }
    }

    /// Stops after the batch in progress, if any.
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take()
            && let Err(e) = task.await
        {
            tracing::error!(error = %e, "pruner_failed");
        }
    }
}

/// One round: for each state with a retention, batches until one comes back
/// short. Logs `tasks_pruned` with the counts when anything went.
pub async fn prune_round<S: TaskStore>(
    store: &S,
    retention: &Retention,
    clock: &Clock,
    metrics: &PrunerMetrics,
    stop: &CancellationToken,
) {
    let mut counts = [0u64; 3];
    for (slot, (state, keep)) in retention.per_state().into_iter().enumerate() {
        let Some(keep) = keep else { continue };
        while !stop.is_cancelled() {
            match store.prune(state, keep, clock.now(), PRUNE_BATCH).await {
                Ok(n) => {
                    counts[slot] += n as u64;
                    metrics
                        .pruned
                        .get_or_create(&StateLabel {
                            state: state.as_str(),
                        })
                        .inc_by(n as u64);
                    if n < PRUNE_BATCH {
                        break;
                    }
                    // Let submits in between the batches.
                    tokio::task::yield_now().await;
                }
                Err(e) => {
                    tracing::warn!(state = %state, error = %e, "prune_failed");
                    break;
                }
            }
        }
    }
    if counts.iter().any(|&n| n > 0) {
        tracing::info!(
            success = counts[0],
            failed = counts[1],
            canceled = counts[2],
            "tasks_pruned"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_run_at_a_quarter_of_the_shortest_retention_within_bounds() {
        let keep = |s: u64, f: u64, c: u64| Retention {
            success: Some(Duration::from_secs(s)),
            failed: Some(Duration::from_secs(f)),
            canceled: Some(Duration::from_secs(c)),
        };
        let cases = [
            (keep(40, 400, 400), Some(Duration::from_secs(10))),
            (keep(1, 400, 400), Some(Duration::from_millis(250))),
            (keep(0, 0, 0), Some(Duration::from_millis(100))),
            (Retention::default(), Some(Duration::from_secs(60))),
            (
                Retention {
                    success: None,
                    failed: None,
                    canceled: None,
                },
                None,
            ),
        ];
        for (retention, want) in cases {
            assert_eq!(retention.round_interval(), want, "{retention:?}");
        }
    }
}
