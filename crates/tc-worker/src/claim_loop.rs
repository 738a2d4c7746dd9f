//! The claim loop: takes permits, claims as many due tasks as it holds
//! permits for, starts their attempts, sleeps until something is due, and
//! on stop drains. Each step is a method of [`ClaimLoop`].

use std::sync::Arc;
use std::time::Duration;

use tc_downstream::Downstream;
use tc_model::claim::Claim;
use tc_model::store::{StoreError, TaskStore};
use tc_model::{State, Task, Timestamp};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::attempt::{AttemptContext, run_attempt};
use crate::background;
use crate::config::{ShutdownReport, WorkerConfig, WorkerError};
use crate::shared::AttemptEnded;

/// The longest the claim loop waits after a failed claim.
const CLAIM_BACKOFF_CAP: Duration = Duration::from_secs(5);

/// The least time between the start of a claim and one made for another
/// process's wake-up (several nodes' announcements share one claim).
const REMOTE_WAKE_GAP: Duration = Duration::from_millis(2);

/// How many free permits make a claim worth its fixed cost without waiting
/// longer: a quarter of the pool, at least 16, at most all of it. (At least
/// 16, not 8: a node of three with a third of the slots then claims as many
/// at a time as one node alone, so claims per task stay flat as nodes are
/// added.)
pub(crate) fn useful_claim(concurrency: usize) -> usize {
    (concurrency / 4).max(16).min(concurrency.max(1))
}

/// What the loop does after a step.
enum Next {
    /// Claim again.
    Claim,
    /// Stop claiming and drain.
    Stop,
}

/// The claim loop's state between steps.
struct ClaimLoop<S, D> {
    ctx: Arc<AttemptContext<S, D>>,
    config: WorkerConfig,
    stop: CancellationToken,
    permits: Arc<Semaphore>,
    /// Cancels every attempt's token at once when the grace period ends.
    interrupt_all: CancellationToken,
    attempts: JoinSet<()>,
    /// Doubles from the poll interval after each failed claim, up to
    /// CLAIM_BACKOFF_CAP; reset by the first claim that works.
    claim_backoff: Option<Duration>,
    /// When the last claim began, and how many other processes' wake-ups
    /// had come by then (those the claim saw).
    last_claim: Option<(tokio::time::Instant, u64)>,
    /// The token grants of the claim under way, settled after it.
    grants: Vec<tc_model::cluster::TokenAsk>,
}

/// Claims due tasks while there are permits, runs them, and on stop drains.
pub(crate) async fn claim_loop<S: TaskStore, D: Downstream>(
    ctx: Arc<AttemptContext<S, D>>,
    config: WorkerConfig,
    stop: CancellationToken,
) -> Result<ShutdownReport, WorkerError> {
    let shared = Arc::clone(&ctx.shared);
    // Recover before the first claim, so tasks a crashed run left behind are
    // due again right away.
    let mut background = background::start(&shared, &config, &stop).await;
    let mut this = ClaimLoop {
        permits: Arc::new(Semaphore::new(config.concurrency.max(1))),
        ctx,
        config,
        stop,
        interrupt_all: CancellationToken::new(),
        attempts: JoinSet::new(),
        claim_backoff: None,
        last_claim: None,
        grants: Vec::new(),
    };
    while let Next::Claim = this.round().await {}
    let report = this.drain().await;
    // Heartbeats stop only now: calls in their grace period kept their leases.
    background.shutdown().await;
    Ok(report)
}

impl<S: TaskStore, D: Downstream> ClaimLoop<S, D> {
    /// One round: permits, a claim, its attempts started, and a sleep when
    /// the store rather than the pool was the limit.
    async fn round(&mut self) -> Next {
        let waiting = std::time::Instant::now();
        let Some(mut held) = self.take_permits().await else {
            return Next::Stop;
        };
        let claiming = std::time::Instant::now();
        let metrics = self.ctx.metrics.claims.clone();
        metrics.waited_for_slots(claiming - waiting);
        let wanted = held.len();
        let (claim, now) = match self.claim(wanted).await {
            Ok(claimed) => {
                metrics.claimed(wanted, claimed.0.tasks.len(), claiming.elapsed());
                claimed
            }
            Err(e) => {
                drop(held);
                self.give_back(self.ctx.shared.clock.now()).await;
                return self.claim_failed(&e).await;
            }
        };
        let Claim {
            tasks,
            resume_after,
            cursor,
        } = claim;
        self.ctx.shared.flow.walked(cursor);
        let got = tasks.len();
        self.start(tasks, &mut held);
        drop(held);
        self.give_back(now).await;
        if got == wanted {
            // The pool, not the store, was the limit: go straight back for
            // more as permits free up.
            return Next::Claim;
        }
        self.sleep(resume_after).await
    }

    /// Waits for one permit, then takes every free one: never claim more
    /// than can run. `None` on stop.
    async fn take_permits(&mut self) -> Option<Vec<OwnedSemaphorePermit>> {
        let first = loop {
            tokio::select! {
                biased;
                _ = self.stop.cancelled() => return None,
                permit = Arc::clone(&self.permits).acquire_owned() => break permit.ok()?,
                Some(joined) = self.attempts.join_next(), if !self.attempts.is_empty() => {
                    log_join(joined);
                }
            }
        };
        // A JoinSet keeps each finished task until it is joined, and under a
        // steady backlog this loop goes from claim to claim without reaching
        // a wait that joins: finished attempts piled up (about 3 KiB each;
        // 18,000 of them, 50 MiB, within the bench's ten-second RSS window).
        while let Some(joined) = self.attempts.try_join_next() {
            log_join(joined);
        }
        let mut held = vec![first];
        while let Ok(p) = Arc::clone(&self.permits).try_acquire_owned() {
            held.push(p);
        }
        // A few permits: wait a moment for more to free (attempts ending).
        let useful = useful_claim(self.config.concurrency);
        if held.len() < useful {
            let until = tokio::time::Instant::now() + self.config.claim_gather;
            while held.len() < useful {
                tokio::select! {
                    biased;
                    _ = self.stop.cancelled() => return None,
                    permit = Arc::clone(&self.permits).acquire_owned() => match permit {
                        Ok(permit) => held.push(permit),
                        Err(_) => break,
                    },
                    () = tokio::time::sleep_until(until) => break,
                }
            }
            while let Ok(p) = Arc::clone(&self.permits).try_acquire_owned() {
                held.push(p);
            }
        }
        Some(held)
    }

    /// Claims up to `wanted` due tasks through this worker's gate; with the
    /// time the claim was made at.
    async fn claim(&mut self, wanted: usize) -> Result<(Claim, Timestamp), StoreError> {
        let shared = &self.ctx.shared;
        if shared.outbound.stale() {
            // Settings changed through this process since the copy was
            // read: a task claimed now must send the new headers.
            background::read_settings(shared).await;
        }
        shared.begin_claim();
        self.last_claim = Some((
            tokio::time::Instant::now(),
            shared
                .remote_wakes
                .load(std::sync::atomic::Ordering::SeqCst),
        ));
        let now = shared.clock.now();
        crate::cluster::publish_learned(shared, now).await;
        self.grants = crate::cluster::take_grants(shared, now, wanted).await;
        let mut gate = shared.flow.gate(now);
        gate.tenants = shared.tenants.gate();
        gate.priority_aging = Some(self.config.priority_aging);
        let claim = shared
            .store
            .claim(wanted, now, self.config.lease, gate)
            .await;
        if claim.is_ok() && self.claim_backoff.take().is_some() {
            tracing::info!("claims_resumed");
        }
        claim.map(|claim| (claim, now))
    }

    /// Gives back what the claim's grants did not use.
    async fn give_back(&mut self, now: Timestamp) {
        let asks = std::mem::take(&mut self.grants);
        if !asks.is_empty() {
            crate::cluster::give_back(&self.ctx.shared, &asks, now).await;
        }
    }

    /// A failing store must not be hammered: wait, longer each time, without
    /// waking for submits (they fail alike).
    async fn claim_failed(&mut self, e: &StoreError) -> Next {
        self.ctx.shared.claim_failed();
        let wait = self
            .claim_backoff
            .map_or(self.config.poll_interval, |w| w * 2)
            .min(CLAIM_BACKOFF_CAP)
            .max(Duration::from_millis(1));
        self.claim_backoff = Some(wait);
        tracing::error!(error = %e, retry_in_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX), "claim_failed");
        let until = tokio::time::Instant::now() + wait;
        loop {
            tokio::select! {
                biased;
                _ = self.stop.cancelled() => return Next::Stop,
                _ = tokio::time::sleep_until(until) => return Next::Claim,
                Some(joined) = self.attempts.join_next(), if !self.attempts.is_empty() => log_join(joined),
            }
        }
    }

    /// Registers the tasks claimed and starts an attempt for each,
    /// one permit each; a task canceled while the claim was on its way ends
    /// here, never called.
    fn start(&mut self, tasks: Vec<Task>, held: &mut Vec<OwnedSemaphorePermit>) {
        let shared = &self.ctx.shared;
        let tokens = shared.register(&tasks);
        for (task, token) in tasks.into_iter().zip(tokens) {
            let Some(permit) = held.pop() else { break };
            match token {
                Some(cancel) => {
                    self.attempts.spawn(run_attempt(
                        Arc::clone(&self.ctx),
                        task,
                        cancel,
                        self.interrupt_all.clone(),
                        permit,
                    ));
                }
                None => {
                    tracing::info!(task_id = %task.id, "task_skip_canceled");
                    self.ctx.metrics.count("canceled");
                    shared.end_attempt(task.id, task.attempt);
                    shared.attempt_ended(AttemptEnded {
                        task_id: task.id,
                        attempt: task.attempt,
                        state: State::Canceled,
                    });
                }
            }
        }
    }

    /// Nothing more is due now: sleeps until woken, the poll interval, or the
    /// earliest task not yet due (the claim said when), whichever comes
    /// first. A task due already but held (its destination paused, at its
    /// cap, out of tokens, backing off) does not wake the loop: it would
    /// spin. What ends a hold wakes it, or the poll interval.
    async fn sleep(&mut self, resume_after: Option<Timestamp>) -> Next {
        let shared = &self.ctx.shared;
        // Whatever wakes the loop, tasks may be due anywhere again.
        shared.flow.forget_empty();
        let mut wake_at = tokio::time::Instant::now() + self.config.poll_interval;
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
                _ = self.stop.cancelled() => return Next::Stop,
                _ = shared.wake.notified() => return Next::Claim,
                _ = tokio::time::sleep_until(wake_at) => return Next::Claim,
                _ = shared.remote_wake.notified() => {
                    if let Some(soonest) = self.remote_wake_claim_at() {
                        wake_at = wake_at.min(soonest);
                    }
                }
                Some(joined) = self.attempts.join_next(), if !self.attempts.is_empty() => log_join(joined),
            }
        }
    }

    /// Another process's wake-up: when to claim for it, or `None` when the
    /// last claim began after it came (that claim saw its task). Never
    /// sooner than [`REMOTE_WAKE_GAP`] after the last claim began.
    fn remote_wake_claim_at(&self) -> Option<tokio::time::Instant> {
        let wakes = self
            .ctx
            .shared
            .remote_wakes
            .load(std::sync::atomic::Ordering::SeqCst);
        match self.last_claim {
            Some((_, seen)) if wakes <= seen => None,
            Some((began, _)) => Some(began + REMOTE_WAKE_GAP),
            None => Some(tokio::time::Instant::now()),
        }
    }

    /// Shutdown: no more claims. Lets in-flight calls finish within the grace
    /// period, then interrupts the rest; each interrupted attempt releases
    /// its task back to pending itself.
    async fn drain(mut self) -> ShutdownReport {
        let in_flight = self.attempts.len();
        // What an operator who pressed Ctrl-C waits for, and how long at most.
        tracing::info!(
            in_flight,
            grace_ms = u64::try_from(self.config.shutdown_grace.as_millis()).unwrap_or(u64::MAX),
            "shutdown_draining"
        );
        let attempts = &mut self.attempts;
        let drained = tokio::time::timeout(self.config.shutdown_grace, async {
            while let Some(joined) = attempts.join_next().await {
                log_join(joined);
            }
        })
        .await;
        let mut report = ShutdownReport::default();
        if drained.is_err() {
            report.interrupted = self.attempts.len();
            tracing::info!(
                in_flight,
                interrupted = report.interrupted,
                "shutdown_interrupting"
            );
            self.interrupt_all.cancel();
            while let Some(joined) = self.attempts.join_next().await {
                log_join(joined);
            }
        }
        report
    }
}

fn log_join(joined: Result<(), tokio::task::JoinError>) {
    if let Err(e) = joined {
        tracing::error!(error = %e, "attempt_task_failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_waits_for_a_quarter_of_the_pool_at_least_sixteen_at_most_all() {
        let check = |concurrency: usize, want: usize| {
            assert_eq!(useful_claim(concurrency), want, "concurrency {concurrency}");
        };
        check(0, 1);
        check(1, 1);
        check(8, 8);
        check(16, 16);
        check(21, 16);
        check(64, 16);
        check(256, 64);
    }
}
