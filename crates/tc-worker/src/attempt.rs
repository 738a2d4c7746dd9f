//! One try of one task: call downstream, classify, write the outcome back.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use tc_downstream::{DownError, DownRequest, DownResponse, Downstream};
use tc_model::store::{Completion, Guarded, TaskStore};
use tc_model::{State, Task};
use tc_retry::{Decision, Outcome, RetryAfter};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::WorkerMetrics;
use crate::control::{AttemptEnded, Shared};

/// What an attempt needs besides its task.
pub(crate) struct AttemptContext<S, D> {
    pub(crate) shared: Arc<Shared<S>>,
    pub(crate) downstream: Arc<D>,
    pub(crate) policy: tc_retry::Policy,
    pub(crate) rng: Arc<Mutex<fastrand::Rng>>,
    pub(crate) metrics: WorkerMetrics,
}

/// How the race between the call and the two tokens ended.
enum Race {
    Answered(Result<DownResponse, DownError>),
    Canceled,
    Interrupted,
}

/// Runs one claimed task to the end of its attempt. The permit is held until
/// the outcome is written, so in-flight work never exceeds the bound.
pub(crate) async fn run_attempt<S: TaskStore, D: Downstream>(
    ctx: Arc<AttemptContext<S, D>>,
    task: Task,
    cancel: CancellationToken,
    interrupt: CancellationToken,
    _permit: OwnedSemaphorePermit,
) {
    let (task_id, attempt) = (task.id, task.attempt);
    let state = run(&ctx, task, &cancel, &interrupt).await;
    ctx.shared.finish_attempt(task_id, attempt);
    if let Some(state) = state {
        ctx.shared.attempt_ended(AttemptEnded {
            task_id,
            attempt,
            state,
        });
    }
}

async fn run<S: TaskStore, D: Downstream>(
    ctx: &AttemptContext<S, D>,
    task: Task,
    cancel: &CancellationToken,
    interrupt: &CancellationToken,
) -> Option<State> {
    let task_id = task.id;
    if cancel.is_cancelled() {
        // Canceled after the claim, before the call: the store already says
        // canceled, so there is nothing to write.
        tracing::info!(task_id = %task_id, "task_skip_canceled");
        ctx.metrics.count("canceled");
        return Some(State::Canceled);
    }
    tracing::info!(task_id = %task_id, attempt = task.attempt, url = %task.url, "task_start");
    let request = DownRequest {
        url: task.url.clone(),
        body: bytes::Bytes::from(task.body.clone()),
        timeout: task.timeout,
        idempotency_key: task.idempotency_key.clone(),
        task_id: task_id.to_string(),
        attempt: task.attempt,
    };

    let started = Instant::now();
    ctx.metrics.in_flight.inc();
    // The call future lives only inside this select: when a token wins, it is
    // dropped here, and with it the connection. Outcomes are written after
    // the race, never inside the cancellable future.
    let race = tokio::select! {
        biased;
        _ = cancel.cancelled() => Race::Canceled,
        _ = interrupt.cancelled() => Race::Interrupted,
        answer = ctx.downstream.post(request) => Race::Answered(answer),
    };
    ctx.metrics.in_flight.dec();
    let duration = started.elapsed();
    let duration_ms = millis(duration);
    ctx.metrics.call_duration.observe(duration.as_secs_f64());

    match race {
        Race::Canceled => {
            tracing::info!(task_id = %task_id, state = "canceled", retry = task.attempt, duration_ms, error = "canceled", "task_done");
            ctx.metrics.count("canceled");
            Some(State::Canceled)
        }
        Race::Interrupted => {
            let now = ctx.shared.clock.now();
            match ctx.shared.store.release(task_id, task.attempt, now).await {
                Ok(Guarded::Applied(_)) => {
                    tracing::info!(task_id = %task_id, state = "pending", duration_ms, "task_interrupted");
                    ctx.metrics.count("interrupted");
                    Some(State::Pending)
                }
                Ok(Guarded::Lost(state)) => {
                    tracing::info!(task_id = %task_id, state = %state, duration_ms, "task_interrupted");
                    ctx.metrics.count("lost");
                    Some(state)
                }
                Err(e) => {
                    tracing::error!(task_id = %task_id, error = %e, "task_release_failed");
                    None
                }
            }
        }
        Race::Answered(answer) => finish(ctx, &task, answer, duration_ms).await,
    }
}

/// Classifies an answered call and writes the outcome with the guarded complete.
async fn finish<S: TaskStore, D>(
    ctx: &AttemptContext<S, D>,
    task: &Task,
    answer: Result<DownResponse, DownError>,
    duration_ms: u64,
) -> Option<State> {
    let task_id = task.id;
    let outcome = outcome_of(&answer);
    let decision = {
        let mut rng = ctx.rng.lock().unwrap_or_else(PoisonError::into_inner);
        tc_retry::classify(
            &outcome,
            task.attempt,
            task.max_attempts,
            &ctx.policy,
            &mut rng,
        )
    };
    let http_status = answer.as_ref().ok().map(|r| r.status);
    let now = ctx.shared.clock.now();
    let (completion, delay) = match decision {
        Decision::Success => {
            let (result, content_type) = match answer {
                Ok(response) => (response.body.to_vec(), response.content_type),
                // classify only says Success for an answered 2xx.
                Err(_) => (Vec::new(), None),
            };
            (
                Completion::Success {
                    http_status: http_status.unwrap_or(200),
                    result,
                    content_type,
                },
                None,
            )
        }
        Decision::Retry { delay, reason } => (
            Completion::Retry {
                next_run_at: now.saturating_add(delay),
                reason,
                http_status,
            },
            Some(delay),
        ),
        Decision::Fail { reason } => (
            Completion::Failed {
                reason,
                http_status,
            },
            None,
        ),
    };
    let reason = match &completion {
        Completion::Retry { reason, .. } | Completion::Failed { reason, .. } => {
            Some(reason.clone())
        }
        Completion::Success { .. } => None,
    };

    match ctx
        .shared
        .store
        .complete(task_id, task.attempt, completion, now)
        .await
    {
        Ok(Guarded::Applied(written)) => match written.state {
            State::Pending => {
                let delay_ms = delay.map(millis).unwrap_or(0);
                tracing::info!(
                    task_id = %task_id,
                    state = "pending",
                    reason = reason.as_deref().unwrap_or(""),
                    delay_ms,
                    retry = task.attempt,
                    duration_ms,
                    http_status,
                    "task_retry"
                );
                ctx.metrics.count("retry");
                // The retry is due later; the claim loop sleeps until the
                // earliest due time, so tell it there is a new one.
                ctx.shared.wake.notify_one();
                Some(State::Pending)
            }
            state => {
                log_done(task, state, duration_ms, http_status, reason.as_deref());
                ctx.metrics.count(if state == State::Success {
                    "success"
                } else {
                    "failed"
                });
                Some(state)
            }
        },
        Ok(Guarded::Lost(state)) => {
            // Canceled or recovered meanwhile: the store kept its state.
            log_done(task, state, duration_ms, http_status, Some("lost_race"));
            ctx.metrics.count("lost");
            Some(state)
        }
        Err(e) => {
            // The task stays running under our lease; once the lease expires,
            // recovery makes it due again.
            tracing::error!(task_id = %task_id, error = %e, duration_ms, "task_complete_failed");
            None
        }
    }
}

fn log_done(
    task: &Task,
    state: State,
    duration_ms: u64,
    http_status: Option<u16>,
    error: Option<&str>,
) {
    match (http_status, error) {
        (Some(status), _) if state == State::Success => {
            tracing::info!(task_id = %task.id, state = %state, retry = task.attempt, duration_ms, http_status = status, "task_done");
        }
        (http_status, error) => {
            tracing::info!(task_id = %task.id, state = %state, retry = task.attempt, duration_ms, http_status, error, "task_done");
        }
    }
}

/// Maps the downstream's answer onto tc-retry's outcomes, one to one.
pub(crate) fn outcome_of(answer: &Result<DownResponse, DownError>) -> Outcome {
    match answer {
        Ok(response) => Outcome::Status {
            code: response.status,
            retry_after: response.retry_after.as_ref().map(|value| RetryAfter {
                value: value.clone(),
                received_at: SystemTime::now(),
            }),
        },
        Err(DownError::Timeout) => Outcome::Timeout,
        Err(DownError::Connect(_)) => Outcome::Connect,
        Err(DownError::ResponseTooLarge { .. }) => Outcome::ResponseTooLarge,
        Err(DownError::Other(_)) => Outcome::Other,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
