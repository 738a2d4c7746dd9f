//! Test doubles for the [`Downstream`] port, for other crates' tests (enable
//! the `fakes` feature from `[dev-dependencies]`).
//!
//! Every wait uses tokio's clock, so they run on a paused clock
//! (`#[tokio::test(start_paused = true)]`): a hung call times out at exactly
//! its request's timeout, instantly in real time.
//!
//! - [`ScriptedDownstream`] answers from a queue of [`Step`]s and keeps
//!   score: calls, requests, calls in flight and their peak.
//! - [`BlockingDownstream`] holds every call until the test releases it, and
//!   notices calls dropped in flight (a canceled task).
//! - [`FnDownstream`] answers with a closure.
//!
//! The fakes are used behind an `Arc` (the worker takes `Arc<D>`), so the
//! test keeps a clone to inspect them.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;

use crate::{DownError, DownRequest, DownResponse, Downstream};

/// A response with `status` and `body`, and no `Retry-After` or
/// `Content-Type`.
pub fn response(status: u16, body: impl Into<Bytes>) -> DownResponse {
    DownResponse {
        status,
        retry_after: None,
        content_type: None,
        body: body.into(),
    }
}

/// What one call of a [`ScriptedDownstream`] does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Answer at once.
    Respond(DownResponse),
    /// Fail at once.
    Fail(DownError),
    /// Wait this long, then do the inner step. A wait longer than the
    /// request's timeout ends in [`DownError::Timeout`] at the timeout, as
    /// the real adapter would.
    Delay(Duration, Box<Step>),
    /// Never answer: [`DownError::Timeout`] at the request's timeout.
    Hang,
}

impl Step {
    /// Answer `status` with an empty body.
    pub fn status(status: u16) -> Step {
        Step::Respond(response(status, Bytes::new()))
    }

    /// Answer `status` with a JSON `body`.
    pub fn json(status: u16, body: impl Into<Bytes>) -> Step {
        Step::Respond(DownResponse {
            content_type: Some("application/json".to_owned()),
            ..response(status, body)
        })
    }

    /// Answer `status` (typically 429 or 503) with a `Retry-After` header.
    pub fn retry_after(status: u16, retry_after: impl Into<String>) -> Step {
        Step::Respond(DownResponse {
            retry_after: Some(retry_after.into()),
            ..response(status, Bytes::new())
        })
    }

    /// This step, after waiting `delay`.
    pub fn after(self, delay: Duration) -> Step {
        Step::Delay(delay, Box::new(self))
    }

    /// The total wait, and the outcome (`None`: never).
    fn settle(self) -> (Duration, Option<Result<DownResponse, DownError>>) {
        match self {
            Step::Respond(response) => (Duration::ZERO, Some(Ok(response))),
            Step::Fail(error) => (Duration::ZERO, Some(Err(error))),
            Step::Hang => (Duration::ZERO, None),
            Step::Delay(delay, inner) => {
                let (rest, outcome) = inner.settle();
                (delay.saturating_add(rest), outcome)
            }
        }
    }

    /// Plays the step under the request's timeout, on tokio's clock.
    async fn play(self, timeout: Duration) -> Result<DownResponse, DownError> {
        let (delay, outcome) = self.settle();
        let answer = async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            match outcome {
                Some(outcome) => outcome,
                None => std::future::pending().await,
            }
        };
        tokio::time::timeout(timeout, answer)
            .await
            .unwrap_or(Err(DownError::Timeout))
    }
}

/// Call counters shared by the fakes, watched so tests can wait on them.
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    calls: usize,
    in_flight: usize,
    peak_in_flight: usize,
    dropped: usize,
}

/// Counts a call in flight from creation to drop, and notes whether it was
/// dropped before it finished.
struct InFlight<'a> {
    counters: &'a watch::Sender<Counters>,
    finished: bool,
}

impl<'a> InFlight<'a> {
    fn enter(counters: &'a watch::Sender<Counters>) -> Self {
        counters.send_modify(|counters| {
            counters.calls += 1;
            counters.in_flight += 1;
            counters.peak_in_flight = counters.peak_in_flight.max(counters.in_flight);
        });
        InFlight {
            counters,
            finished: false,
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let dropped = !self.finished;
        self.counters.send_modify(|counters| {
            counters.in_flight -= 1;
            if dropped {
                counters.dropped += 1;
            }
        });
    }
}

/// Waits until `counters` satisfy `ready`.
async fn wait_until(counters: &watch::Sender<Counters>, ready: impl FnMut(&Counters) -> bool) {
    // The sender lives as long as the fake we borrow, so the wait cannot fail.
    let _ = counters.subscribe().wait_for(ready).await;
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A test that panicked while holding the lock has failed already; its
    // data is still the best account of what happened.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A downstream that plays a script: each call takes the next [`Step`] from
/// the queue, or the default step once the queue is empty (200 with an empty
/// body unless set otherwise).
///
/// ```
/// # use std::time::Duration;
/// # use tc_downstream::fakes::{ScriptedDownstream, Step};
/// # use tc_downstream::DownError;
/// let downstream = ScriptedDownstream::new([
///     Step::retry_after(503, "2"),
///     Step::Fail(DownError::Connect("reset".into())),
///     Step::Hang,
///     Step::json(200, r#"{"ok":true}"#).after(Duration::from_millis(50)),
/// ]);
/// ```
#[derive(Debug)]
pub struct ScriptedDownstream {
    script: Mutex<Script>,
    counters: watch::Sender<Counters>,
}

#[derive(Debug)]
struct Script {
    steps: VecDeque<Step>,
    default: Step,
    requests: Vec<DownRequest>,
}

impl ScriptedDownstream {
    /// Plays `steps` in order, then answers 200 with an empty body.
    pub fn new(steps: impl IntoIterator<Item = Step>) -> Self {
        Self::with_default(steps, Step::status(200))
    }

    /// Plays `steps` in order, then `default` for every further call.
    pub fn with_default(steps: impl IntoIterator<Item = Step>, default: Step) -> Self {
        Self {
            script: Mutex::new(Script {
                steps: steps.into_iter().collect(),
                default,
                requests: Vec::new(),
            }),
            counters: watch::Sender::new(Counters::default()),
        }
    }

    /// Appends a step to the queue.
    pub fn push(&self, step: Step) {
        lock(&self.script).steps.push_back(step);
    }

    /// Replaces the step played once the queue is empty.
    pub fn set_default(&self, step: Step) {
        lock(&self.script).default = step;
    }

    /// Steps still queued.
    pub fn remaining(&self) -> usize {
        lock(&self.script).steps.len()
    }

    /// Calls made so far, finished or not.
    pub fn calls(&self) -> usize {
        self.counters.borrow().calls
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<DownRequest> {
        lock(&self.script).requests.clone()
    }

    /// Calls in flight now (dropped calls are not).
    pub fn in_flight(&self) -> usize {
        self.counters.borrow().in_flight
    }

    /// The most calls that were ever in flight at once.
    pub fn peak_in_flight(&self) -> usize {
        self.counters.borrow().peak_in_flight
    }

    /// Calls dropped before they finished.
    pub fn dropped(&self) -> usize {
        self.counters.borrow().dropped
    }

    /// Waits until at least `calls` calls were made.
    pub async fn called(&self, calls: usize) {
        wait_until(&self.counters, |counters| counters.calls >= calls).await;
    }

    /// Waits until exactly `calls` calls are in flight.
    pub async fn in_flight_reaches(&self, calls: usize) {
        wait_until(&self.counters, |counters| counters.in_flight == calls).await;
    }
}

impl Default for ScriptedDownstream {
    fn default() -> Self {
        Self::new([])
    }
}

impl Downstream for ScriptedDownstream {
    async fn post(&self, request: DownRequest) -> Result<DownResponse, DownError> {
        let timeout = request.timeout;
        let step = {
            let mut script = lock(&self.script);
            script.requests.push(request);
            match script.steps.pop_front() {
                Some(step) => step,
                None => script.default.clone(),
            }
        };
        let mut in_flight = InFlight::enter(&self.counters);
        let result = step.play(timeout).await;
        in_flight.finished = true;
        result
    }
}

/// A downstream that holds every call until the test releases it, and
/// records calls dropped in flight — what a canceled task does to its call.
///
/// Calls ignore their request's timeout: they end only by
/// [`release`](Self::release), [`fail`](Self::fail) or being dropped.
///
/// ```
/// # use std::sync::Arc;
/// # use tc_downstream::fakes::{BlockingDownstream, response};
/// # async fn demo(downstream: Arc<BlockingDownstream>) {
/// let request = downstream.entered().await; // a call is in flight
/// assert_eq!(request.attempt, 1);
/// downstream.release(response(200, "done")); // it returns this
/// # }
/// ```
#[derive(Debug)]
pub struct BlockingDownstream {
    gate: watch::Sender<Gate>,
    counters: watch::Sender<Counters>,
}

#[derive(Debug, Default)]
struct Gate {
    /// Requests of calls that entered, not yet handed out by `entered()`.
    entered: VecDeque<DownRequest>,
    /// Outcomes released, not yet taken by a call.
    released: VecDeque<Result<DownResponse, DownError>>,
    requests: Vec<DownRequest>,
}

impl BlockingDownstream {
    /// A downstream with no call in flight and nothing released.
    pub fn new() -> Self {
        Self {
            gate: watch::Sender::new(Gate::default()),
            counters: watch::Sender::new(Counters::default()),
        }
    }

    /// Waits for the next call to enter and returns its request. Calls are
    /// handed out in the order they entered, each once.
    pub async fn entered(&self) -> DownRequest {
        self.take(|gate| gate.entered.pop_front()).await
    }

    /// Ends one held call (the longest waiting one, or else the next to
    /// enter) with `response`.
    pub fn release(&self, response: DownResponse) {
        self.gate
            .send_modify(|gate| gate.released.push_back(Ok(response)));
    }

    /// Ends one held call (as [`release`](Self::release)) with `error`.
    pub fn fail(&self, error: DownError) {
        self.gate
            .send_modify(|gate| gate.released.push_back(Err(error)));
    }

    /// Waits until a call has been dropped before it was released; returns
    /// at once if one already was.
    pub async fn dropped(&self) {
        self.dropped_at_least(1).await;
    }

    /// Waits until at least `calls` calls have been dropped unreleased.
    pub async fn dropped_at_least(&self, calls: usize) {
        wait_until(&self.counters, |counters| counters.dropped >= calls).await;
    }

    /// Calls dropped before they were released.
    pub fn dropped_count(&self) -> usize {
        self.counters.borrow().dropped
    }

    /// Calls made so far.
    pub fn calls(&self) -> usize {
        self.counters.borrow().calls
    }

    /// Calls held now.
    pub fn in_flight(&self) -> usize {
        self.counters.borrow().in_flight
    }

    /// The most calls that were ever held at once.
    pub fn peak_in_flight(&self) -> usize {
        self.counters.borrow().peak_in_flight
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<DownRequest> {
        self.gate.borrow().requests.clone()
    }

    /// Takes something from the gate once there is something to take.
    async fn take<T>(&self, mut take: impl FnMut(&mut Gate) -> Option<T>) -> T {
        // Subscribing before looking means no change between the look and
        // the wait is missed.
        let mut changes = self.gate.subscribe();
        loop {
            let mut taken = None;
            self.gate.send_if_modified(|gate| {
                taken = take(gate);
                taken.is_some()
            });
            if let Some(taken) = taken {
                return taken;
            }
            if changes.changed().await.is_err() {
                // Unreachable while `self` is borrowed: the sender is ours.
                std::future::pending::<()>().await;
            }
        }
    }
}

impl Default for BlockingDownstream {
    fn default() -> Self {
        Self::new()
    }
}

impl Downstream for BlockingDownstream {
    async fn post(&self, request: DownRequest) -> Result<DownResponse, DownError> {
        let mut in_flight = InFlight::enter(&self.counters);
        self.gate.send_modify(|gate| {
            gate.requests.push(request.clone());
            gate.entered.push_back(request);
        });
        let outcome = self.take(|gate| gate.released.pop_front()).await;
        in_flight.finished = true;
        outcome
    }
}

/// A downstream that answers with a closure: for behaviour a script cannot
/// express (answers depending on the request, calls into other test state).
///
/// ```
/// # use tc_downstream::fakes::{FnDownstream, response};
/// let echo = FnDownstream::new(|request: tc_downstream::DownRequest| async move {
///     Ok(response(200, request.body))
/// });
/// ```
pub struct FnDownstream<F> {
    answer: F,
}

impl<F, Fut> FnDownstream<F>
where
    F: Fn(DownRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<DownResponse, DownError>> + Send,
{
    /// Answers every call with `answer(request)`.
    pub fn new(answer: F) -> Self {
        Self { answer }
    }
}

impl<F> std::fmt::Debug for FnDownstream<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnDownstream").finish_non_exhaustive()
    }
}

impl<F, Fut> Downstream for FnDownstream<F>
where
    F: Fn(DownRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<DownResponse, DownError>> + Send,
{
    fn post(
        &self,
        request: DownRequest,
    ) -> impl Future<Output = Result<DownResponse, DownError>> + Send {
        (self.answer)(request)
    }
}

#[cfg(test)]
mod tests;
