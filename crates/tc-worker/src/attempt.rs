//! One try of one task: call downstream, classify, write the outcome back.

use crate::auth::{CallAuth, CallOf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use tc_downstream::{DownError, DownResponse, Downstream};
use tc_model::store::{Completion, Guarded, TaskStore};
use tc_model::{State, Task, Timestamp};
use tc_retry::{Decision, Outcome, RetryAfter};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::WorkerMetrics;
use crate::flow::{Answer, Verdict};
use crate::shared::{AttemptEnded, Shared};
use crate::trace::AttemptSpan;

/// The ids a task's log lines carry: its trace, and the try's span when
/// spans are exported.
#[derive(Clone, Copy)]
struct LogIds<'a> {
    trace_id: Option<&'a str>,
    span_id: Option<&'a str>,
}

/// What an attempt needs besides its task.
pub(crate) struct AttemptContext<S, D> {
    pub(crate) shared: Arc<Shared<S>>,
    pub(crate) downstream: Arc<D>,
    pub(crate) policy: tc_retry::Policy,
    pub(crate) rng: Arc<Mutex<fastrand::Rng>>,
    pub(crate) metrics: WorkerMetrics,
    /// Makes each try's span, when spans are exported.
    pub(crate) tracer: Option<crate::trace::SpanTracer>,
    /// Adds a destination's `auth` to its calls (its tokens kept here).
    pub(crate) auth: CallAuth,
}

/// How the race between the call and the two tokens ended.
enum Race {
    Answered(Result<DownResponse, DownError>),
    Canceled,
    Interrupted,
}

/// The first wait before an outcome write is tried again, and the longest.
const WRITE_RETRY_FIRST: Duration = Duration::from_millis(50);
const WRITE_RETRY_CAP: Duration = Duration::from_secs(5);

/// The error an attempt writes when the worker panicked while running it.
pub(crate) const WORKER_PANIC: &str = "worker_panic";

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
    let mut guard = PanicGuard::new(&ctx, &task);
    let state = run(&ctx, task, &cancel, &interrupt, &mut guard).await;
    guard.disarm();
    if ctx.shared.end_attempt(task_id, attempt) {
        ctx.shared.wake.notify_one();
    }
    if let Some(state) = state {
        ctx.shared.attempt_ended(AttemptEnded {
            task_id,
            attempt,
            state,
        });
    }
}

/// Ends an attempt that never reached its end: the attempt's future was
/// dropped half-way because something in it panicked (tokio catches the panic
/// and drops the future). Without it the task would stay registered here and
/// be heartbeated as running forever, and the in-flight gauge would never
/// fall. It restores the gauge and writes the attempt off as `worker_panic`:
/// back to pending, or failed on its last attempt.
///
/// A worker that is dropped without shutdown drops its attempts too; those
/// are not panics, and their tasks are left to lease recovery like a crash's.
struct PanicGuard<S: TaskStore, D> {
    ctx: Arc<AttemptContext<S, D>>,
    task_id: tc_model::TaskId,
    attempt: u32,
    last_attempt: bool,
    calling: bool,
    armed: bool,
}

impl<S: TaskStore, D> PanicGuard<S, D> {
    fn new(ctx: &Arc<AttemptContext<S, D>>, task: &Task) -> Self {
        PanicGuard {
            ctx: Arc::clone(ctx),
            task_id: task.id,
            attempt: task.attempt,
            last_attempt: !task.can_retry(),
            calling: false,
            armed: true,
        }
    }

    /// The downstream call starts: counted in flight until [`Self::call_ended`].
    fn call_started(&mut self) {
        self.ctx.metrics.in_flight.inc();
        self.calling = true;
    }

    fn call_ended(&mut self) {
        self.ctx.metrics.in_flight.dec();
        self.calling = false;
    }

    /// The attempt ended normally: nothing to clean up.
    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl<S: TaskStore, D> Drop for PanicGuard<S, D> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if self.calling {
            self.ctx.metrics.in_flight.dec();
        }
        let shared = Arc::clone(&self.ctx.shared);
        let (task_id, attempt) = (self.task_id, self.attempt);
        let runtime = tokio::runtime::Handle::try_current();
        if shared.is_aborted() || runtime.is_err() {
            shared.end_attempt(task_id, attempt);
            return;
        }
        tracing::error!(task_id = %task_id, attempt, "task_panicked");
        self.ctx.metrics.count("panicked");
        let now = shared.clock.now();
        let completion = if self.last_attempt {
            Completion::Failed {
                reason: WORKER_PANIC.to_owned(),
                http_status: None,
            }
        } else {
            Completion::Retry {
                next_run_at: now,
                reason: WORKER_PANIC.to_owned(),
                http_status: None,
            }
        };
        if let Ok(runtime) = runtime {
            // The write outlives this drop: the task stays registered (and
            // heartbeated) until it lands.
            runtime.spawn(async move {
                let never = CancellationToken::new();
                let written =
                    write_outcome(&shared, task_id, attempt, completion, now, &never, &never).await;
                shared.end_attempt(task_id, attempt);
                let state = match written {
                    Ok(Guarded::Applied(state)) => state,
                    Ok(Guarded::Lost(state)) => state,
                    Err(_) => return,
                };
                tracing::info!(task_id = %task_id, state = %state, attempt, error = WORKER_PANIC, "task_done");
                shared.wake.notify_one();
                shared.attempt_ended(AttemptEnded {
                    task_id,
                    attempt,
                    state,
                });
            });
        }
    }
}

/// Why an outcome write stopped being retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteAbandoned {
    /// The attempt's cancel token fired: the task was canceled or taken away,
    /// so the outcome can no longer be written anyway.
    Canceled,
    /// Shutdown's grace period ended.
    Interrupted,
}

/// Writes an attempt's outcome with the guarded complete, and keeps trying
/// while the store fails (busy, disk full, a failed commit): the call was
/// made, and losing its outcome would mean calling again. Waits start at
/// 50 ms and double up to 5 s. The attempt stays registered meanwhile, so its
/// heartbeats keep the lease.
pub(crate) async fn write_outcome<S: TaskStore>(
    shared: &Shared<S>,
    task_id: tc_model::TaskId,
    attempt: u32,
    completion: Completion,
    now: tc_model::Timestamp,
    cancel: &CancellationToken,
    interrupt: &CancellationToken,
) -> Result<Guarded, WriteAbandoned> {
    let mut wait = WRITE_RETRY_FIRST;
    loop {
        match shared
            .store
            .complete(task_id, attempt, completion.clone(), now)
            .await
        {
            Ok(written) => return Ok(written),
            Err(e) => {
                tracing::warn!(
                    task_id = %task_id,
                    attempt,
                    error = %e,
                    retry_in_ms = millis(wait),
                    "task_complete_failed"
                );
            }
        }
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(WriteAbandoned::Canceled),
            _ = interrupt.cancelled() => return Err(WriteAbandoned::Interrupted),
            _ = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(WRITE_RETRY_CAP);
    }
}

async fn run<S: TaskStore, D: Downstream>(
    ctx: &AttemptContext<S, D>,
    task: Task,
    cancel: &CancellationToken,
    interrupt: &CancellationToken,
    guard: &mut PanicGuard<S, D>,
) -> Option<State> {
    let task_id = task.id;
    if cancel.is_cancelled() {
        // Canceled after the claim, before the call: the store already says
        // canceled, so there is nothing to write.
        let trace_id = task
            .trace
            .as_ref()
            .map(tc_model::TraceContext::trace_id_hex);
        tracing::info!(task_id = %task_id, trace_id, "task_skip_canceled");
        ctx.metrics.count("canceled");
        return Some(State::Canceled);
    }
    // Origin and path only: a query string often carries a secret.
    let (origin, path) = tc_model::origin_and_path(&task.url);
    // No header value is logged: they may be credentials.
    let mut span = AttemptSpan::start(ctx.tracer.as_ref(), &task);
    let (trace_id, span_id) = (
        span.trace_id().map(str::to_owned),
        span.span_id().map(str::to_owned),
    );
    let ids = LogIds {
        trace_id: trace_id.as_deref(),
        span_id: span_id.as_deref(),
    };
    tracing::info!(task_id = %task_id, attempt = task.attempt, method = task.method.as_str(), origin, path, trace_id = ids.trace_id, span_id = ids.span_id, "task_start");
    let now = ctx.shared.clock.now();
    let (delivery, auth) = ctx.shared.outbound.call(&task, now, span.context());
    let task_id_text = task_id.to_string();
    let call = CallOf {
        destination: &task.destination,
        tenant: task.tenant.as_deref(),
        task_id: &task_id_text,
        attempt: task.attempt,
        now_s: now.as_millis().div_euclid(1000),
    };
    let send = ctx
        .auth
        .send(ctx.downstream.as_ref(), auth.as_ref(), delivery, &call);

    let started = Instant::now();
    guard.call_started();
    // The call future lives only inside this select: when a token wins, it is
    // dropped here, and with it the connection. Outcomes are written after
    // the race, never inside the cancellable future.
    let race = tokio::select! {
        biased;
        _ = cancel.cancelled() => Race::Canceled,
        _ = interrupt.cancelled() => Race::Interrupted,
        answer = send => Race::Answered(answer),
    };
    guard.call_ended();
    let duration = started.elapsed();
    let duration_ms = millis(duration);
    ctx.metrics.call_duration.observe(duration.as_secs_f64());

    mark_span(ctx, &task, &race, &mut span);
    match race {
        Race::Canceled => canceled(ctx, &task, duration_ms, &ids),
        Race::Interrupted => release(ctx, &task, duration_ms, &ids).await,
        Race::Answered(answer) => {
            finish(ctx, &task, answer, duration_ms, cancel, interrupt, &ids).await
        }
    }
}

/// How the try's span ends: answered (its status, or why it failed), or
/// abandoned because the task was canceled or the try interrupted.
fn mark_span<S: TaskStore, D: Downstream>(
    ctx: &AttemptContext<S, D>,
    task: &Task,
    race: &Race,
    span: &mut AttemptSpan,
) {
    match race {
        Race::Answered(answer) => {
            let status = answer.as_ref().ok().map(|r| r.status);
            let error_type = match answer {
                Ok(r) if r.status < 400 => None,
                Ok(r) => Some(r.status.to_string()),
                Err(_) => Some(outcome_of(answer, ctx.shared.clock.now()).reason()),
            };
            span.answered(status, error_type.as_deref());
        }
        Race::Canceled if ctx.shared.taken_away(task.id, task.attempt).is_none() => {
            span.abandoned("canceled");
        }
        Race::Canceled | Race::Interrupted => span.abandoned("interrupted"),
    }
}

/// A call dropped by its cancel token: canceled, unless another claim or
/// process owns the task now, and then this try was interrupted.
fn canceled<S: TaskStore, D: Downstream>(
    ctx: &AttemptContext<S, D>,
    task: &Task,
    duration_ms: u64,
    ids: &LogIds<'_>,
) -> Option<State> {
    let task_id = task.id;
    match ctx.shared.taken_away(task_id, task.attempt) {
        Some(state) => {
            tracing::info!(task_id = %task_id, state = %state, attempt = task.attempt, duration_ms, reason = "taken_away", trace_id = ids.trace_id, span_id = ids.span_id, "task_interrupted");
            ctx.metrics.count("lost");
            Some(state)
        }
        None => {
            tracing::info!(task_id = %task_id, state = "canceled", attempt = task.attempt, duration_ms, error = "canceled", trace_id = ids.trace_id, span_id = ids.span_id, "task_done");
            ctx.metrics.count("canceled");
            Some(State::Canceled)
        }
    }
}

/// What an answered call is to become: the completion to write, and what
/// the log line says of it.
struct Planned {
    completion: Completion,
    /// The retry's delay, for a retry.
    delay: Option<Duration>,
    /// The error reason, for a retry or a failure.
    reason: Option<String>,
}

impl Planned {
    /// The completion `decision` asks for, answered with `answer` at `now`.
    fn of(
        decision: Decision,
        answer: Result<DownResponse, DownError>,
        http_status: Option<u16>,
        now: tc_model::Timestamp,
    ) -> Planned {
        match decision {
            Decision::Success => {
                let (result, content_type) = match answer {
                    Ok(response) => (response.body.to_vec(), response.content_type),
                    // classify only says Success for an answered 2xx.
                    Err(_) => (Vec::new(), None),
                };
                Planned {
                    completion: Completion::Success {
                        http_status: http_status.unwrap_or(200),
                        result,
                        content_type,
                    },
                    delay: None,
                    reason: None,
                }
            }
            Decision::Retry { delay, reason } => Planned {
                reason: Some(reason.clone()),
                completion: Completion::Retry {
                    next_run_at: now.saturating_add(delay),
                    reason,
                    http_status,
                },
                delay: Some(delay),
            },
            Decision::Fail { reason } => Planned {
                reason: Some(reason.clone()),
                completion: Completion::Failed {
                    reason,
                    http_status,
                },
                delay: None,
            },
        }
    }
}

/// What every log line about one answered attempt carries.
struct Report<'a> {
    task: &'a Task,
    duration_ms: u64,
    http_status: Option<u16>,
    ids: &'a LogIds<'a>,
}

/// Classifies an answered call and writes the outcome with the guarded
/// complete: classify, tell the destination's flow, write, report.
async fn finish<S: TaskStore, D>(
    ctx: &AttemptContext<S, D>,
    task: &Task,
    answer: Result<DownResponse, DownError>,
    duration_ms: u64,
    cancel: &CancellationToken,
    interrupt: &CancellationToken,
    ids: &LogIds<'_>,
) -> Option<State> {
    let now = ctx.shared.clock.now();
    let outcome = outcome_of(&answer, now);
    let decision = decide(ctx, task, &outcome);
    let http_status = answer.as_ref().ok().map(|r| r.status);
    ctx.shared.flow.answered(
        Answer {
            destination: &task.destination,
            task: (task.id, task.attempt),
            verdict: verdict_of(&outcome),
            status: http_status,
            error: decision.reason(),
            backoff: destination_backoff(&outcome, &ctx.policy),
            rate_limit: answer
                .as_ref()
                .ok()
                .and_then(|response| rate_limit_of(response, now)),
            flow_key: task
                .flow_key
                .as_deref()
                .map(|key| tc_model::flow_key::KeyRef::new(task.tenant.as_deref(), key)),
        },
        now,
    );
    let planned = Planned::of(decision, answer, http_status, now);
    let written = write_outcome(
        &ctx.shared,
        task.id,
        task.attempt,
        planned.completion.clone(),
        now,
        cancel,
        interrupt,
    )
    .await;
    if let (Ok(Guarded::Applied(state)), Some(link)) = (&written, &task.topic) {
        crate::topic_health::try_ended(&ctx.shared, link, *state, now).await;
    }
    let report = Report {
        task,
        duration_ms,
        http_status,
        ids,
    };
    match written {
        Ok(Guarded::Applied(State::Pending)) => Some(retried(ctx, &report, &planned)),
        Ok(Guarded::Applied(state)) => Some(ended(ctx, &report, state, planned.reason.as_deref())),
        // Canceled or recovered meanwhile: the store kept its state.
        Ok(Guarded::Lost(state)) => Some(lost(ctx, &report, state)),
        Err(WriteAbandoned::Canceled) => {
            // Canceled or taken away while the store refused the write: the
            // store has the task's state, and it is not ours to write.
            let state = ctx
                .shared
                .taken_away(task.id, task.attempt)
                .unwrap_or(State::Canceled);
            Some(lost(ctx, &report, state))
        }
        Err(WriteAbandoned::Interrupted) => {
            // Shutdown's grace ended before the store took the outcome: put
            // the task back, as for a call still in flight.
            release(ctx, task, duration_ms, ids).await
        }
    }
}

/// The try ended the task in `state` (written): log it, count it, and wake
/// the claim loop when the end made a callback task, due now.
fn ended<S, D>(
    ctx: &AttemptContext<S, D>,
    report: &Report<'_>,
    state: State,
    reason: Option<&str>,
) -> State {
    log_done(report, state, reason);
    if report
        .task
        .callback
        .as_ref()
        .is_some_and(|c| c.on().includes(state))
    {
        // This end made a callback task, due now: claim it without
        // waiting for the next poll.
        ctx.shared.wake.notify_one();
    }
    ctx.metrics.count(if state == State::Success {
        "success"
    } else {
        "failed"
    });
    state
}

/// What tc-retry decides for this answer of this attempt.
fn decide<S, D>(ctx: &AttemptContext<S, D>, task: &Task, outcome: &Outcome) -> Decision {
    let mut rng = ctx.rng.lock().unwrap_or_else(PoisonError::into_inner);
    tc_retry::classify(
        outcome,
        task.attempt_in_round(),
        task.max_attempts,
        &ctx.policy,
        &mut rng,
    )
}

/// The retry was written: log it and wake the claim loop, which sleeps until
/// the earliest due time and must learn of a new one.
fn retried<S, D>(ctx: &AttemptContext<S, D>, report: &Report<'_>, planned: &Planned) -> State {
    let delay_ms = planned.delay.map(millis).unwrap_or(0);
    tracing::info!(
        task_id = %report.task.id,
        state = "pending",
        reason = planned.reason.as_deref().unwrap_or(""),
        delay_ms,
        attempt = report.task.attempt,
        duration_ms = report.duration_ms,
        http_status = report.http_status,
        trace_id = report.ids.trace_id,
        span_id = report.ids.span_id,
        "task_retry"
    );
    ctx.metrics.count("retry");
    ctx.shared.wake.notify_one();
    State::Pending
}

/// The outcome lost the race to another writer, which left `state`.
fn lost<S, D>(ctx: &AttemptContext<S, D>, report: &Report<'_>, state: State) -> State {
    log_done(report, state, Some("lost_race"));
    ctx.metrics.count("lost");
    state
}

/// Puts an interrupted attempt's task back to pending without using up the
/// attempt (shutdown).
async fn release<S: TaskStore, D>(
    ctx: &AttemptContext<S, D>,
    task: &Task,
    duration_ms: u64,
    ids: &LogIds<'_>,
) -> Option<State> {
    let task_id = task.id;
    let now = ctx.shared.clock.now();
    match ctx.shared.store.release(task_id, task.attempt, now).await {
        Ok(Guarded::Applied(_)) => {
            tracing::info!(task_id = %task_id, state = "pending", duration_ms, reason = "shutdown", trace_id = ids.trace_id, span_id = ids.span_id, "task_interrupted");
            ctx.metrics.count("interrupted");
            Some(State::Pending)
        }
        Ok(Guarded::Lost(state)) => {
            tracing::info!(task_id = %task_id, state = %state, duration_ms, reason = "shutdown", trace_id = ids.trace_id, span_id = ids.span_id, "task_interrupted");
            ctx.metrics.count("lost");
            Some(state)
        }
        Err(e) => {
            tracing::error!(task_id = %task_id, error = %e, "task_release_failed");
            None
        }
    }
}

fn log_done(report: &Report<'_>, state: State, error: Option<&str>) {
    let Report {
        task,
        duration_ms,
        http_status,
        ids,
    } = report;
    let LogIds { trace_id, span_id } = **ids;
    match (*http_status, error) {
        (Some(status), _) if state == State::Success => {
            tracing::info!(task_id = %task.id, state = %state, attempt = task.attempt, duration_ms, http_status = status, trace_id, span_id, "task_done");
        }
        (http_status, error) => {
            tracing::info!(task_id = %task.id, state = %state, attempt = task.attempt, duration_ms, http_status, error, trace_id, span_id, "task_done");
        }
    }
}

/// Maps the downstream's answer, received at `now` by the worker's clock,
/// onto tc-retry's outcomes, one to one. A Retry-After is parsed here, once:
/// the task's retry and the destination's backoff read the same wait.
pub(crate) fn outcome_of(
    answer: &Result<DownResponse, DownError>,
    now: tc_model::Timestamp,
) -> Outcome {
    match answer {
        Ok(response) => Outcome::Status {
            code: response.status,
            retry_after: response
                .retry_after
                .as_deref()
                .map(|value| RetryAfter::parse(value, system_time(now))),
        },
        Err(DownError::Timeout) => Outcome::Timeout,
        Err(DownError::Connect(_)) => Outcome::Connect,
        Err(DownError::ResponseTooLarge { .. }) => Outcome::ResponseTooLarge,
        Err(DownError::DestinationDenied(_)) => Outcome::DestinationDenied,
        Err(DownError::AuthFailed(_)) => Outcome::AuthFailed,
        Err(DownError::Other(_)) => Outcome::Other,
    }
}

/// What an answer's rate-limit fields say, read as they arrived.
fn rate_limit_of(response: &DownResponse, now: Timestamp) -> Option<tc_retry::RateLimit> {
    let field = |name: &str| {
        response
            .rate_limit
            .iter()
            .find(|(field, _)| *field == name)
            .map(|(_, value)| value.as_str())
    };
    tc_retry::parse_rate_limit(field, system_time(now))
}

/// How an answer counts for the destination's circuit breaker: connect
/// errors, timeouts and 5xx mean the destination is failing; any other
/// answer means it is up.
fn verdict_of(outcome: &Outcome) -> Verdict {
    match outcome {
        Outcome::Status { code, .. } if (500..=599).contains(code) => Verdict::Failure,
        Outcome::Status { .. } => Verdict::Healthy,
        Outcome::Timeout | Outcome::Connect => Verdict::Failure,
        // A failing token endpoint is another host: it says nothing of this one.
        Outcome::ResponseTooLarge
        | Outcome::DestinationDenied
        | Outcome::AuthFailed
        | Outcome::Other => Verdict::Neutral,
    }
}

/// A 429 or 503 with a Retry-After makes the whole destination wait, not
/// only this task: the delay it asked for, within the retry policy's bound.
fn destination_backoff(outcome: &Outcome, policy: &tc_retry::Policy) -> Option<Duration> {
    match outcome {
        Outcome::Status {
            code: 429 | 503,
            retry_after: Some(RetryAfter { wait }),
        } => wait
            .map(|wait| wait.min(policy.max_retry_after))
            .filter(|wait| !wait.is_zero()),
        _ => None,
    }
}

/// `at` as the standard library's time, for an HTTP-date's arithmetic.
fn system_time(at: tc_model::Timestamp) -> SystemTime {
    let ms = u64::try_from(at.as_millis()).unwrap_or(0);
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
