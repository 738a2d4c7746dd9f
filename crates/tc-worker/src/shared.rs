//! What the claim loop, the attempts and the HTTP layer share: the claimed
//! attempts (one [`Registry`] record each, entered and left together with
//! the destination's flow), the wake-ups, and [`WorkerControl`], the handle
//! the API holds.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tc_model::store::{StoreError, TaskStore};
use tc_model::tenant::Scope;
use tc_model::{State, Task, TaskId, Timestamp};
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;

use crate::Clock;
use crate::delivery_inputs::Outbound;
use crate::flow::{DestinationState, Flow};
use crate::registry::Registry;
use crate::tenant_share::TenantShare;

/// How one attempt ended, as [`WorkerControl::subscribe`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptEnded {
    /// The task.
    pub task_id: TaskId,
    /// The attempt counter of the try that ended.
    pub attempt: u32,
    /// The task's state after this attempt: `pending` for a retry or an
    /// interrupted call, the terminal state otherwise.
    pub state: State,
}

/// What the claim loop, the attempts and the control handle share.
pub(crate) struct Shared<S> {
    pub(crate) store: Arc<S>,
    pub(crate) clock: Clock,
    pub(crate) wake: Notify,
    /// Another process announced a submit ([`WorkerControl::woken_elsewhere`]).
    pub(crate) remote_wake: Notify,
    /// How many such announcements came so far: the claim loop answers only
    /// those that came after its last claim began (the claim saw the rest).
    pub(crate) remote_wakes: AtomicU64,
    /// Per-destination holds of this worker.
    pub(crate) flow: Flow,
    /// The tenants' weights and this node's calls in flight by tenant.
    pub(crate) tenants: TenantShare,
    /// Destination settings changed: read them again now.
    pub(crate) settings_changed: Notify,
    /// A schedule was created, changed or deleted through this process:
    /// the firing loop reads them again now.
    pub(crate) schedules_changed: Notify,
    /// The destinations' headers and secrets, what each try sends.
    pub(crate) outbound: Outbound,
    /// The attempts claimed here and not yet ended.
    registry: Mutex<Registry>,
    events: broadcast::Sender<AttemptEnded>,
    /// Every state a task reaches through this worker: attempt endings and
    /// cancels. What waiting HTTP requests listen to.
    changes: broadcast::Sender<(TaskId, State)>,
    /// Set when the worker is dropped without a shutdown: its attempts are
    /// being dropped, which is not a panic.
    aborted: AtomicBool,
}

impl<S> Shared<S> {
    pub(crate) fn new(store: Arc<S>, clock: Clock, flow: Flow, outbound: Outbound) -> Shared<S> {
        let (events, _) = broadcast::channel(4096);
        let (changes, _) = broadcast::channel(4096);
        Shared {
            store,
            clock,
            wake: Notify::new(),
            remote_wake: Notify::new(),
            remote_wakes: AtomicU64::new(0),
            flow,
            tenants: TenantShare::default(),
            settings_changed: Notify::new(),
            schedules_changed: Notify::new(),
            outbound,
            registry: Mutex::new(Registry::default()),
            events,
            changes,
            aborted: AtomicBool::new(false),
        }
    }

    /// Tells subscribers an attempt ended (no subscriber is fine).
    pub(crate) fn attempt_ended(&self, event: AttemptEnded) {
        let _ = self.changes.send((event.task_id, event.state));
        let _ = self.events.send(event);
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        // The lock guards plain inserts and removes; a panic while holding it
        // leaves the map consistent, so a poisoned lock is still usable.
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks the start of a claim: cancels from now on are remembered.
    pub(crate) fn begin_claim(&self) {
        self.registry().begin_claim();
    }

    /// A claim failed: nothing to register.
    pub(crate) fn claim_failed(&self) {
        self.registry().end_claim();
    }

    /// Registers the attempts a claim made and ends the claim: the
    /// one place an attempt enters, in the registry and in its
    /// destination's flow together. Returns, for each task, its cancel
    /// token, or `None` when it was canceled while being claimed (its
    /// attempt must still end through [`Self::end_attempt`]).
    pub(crate) fn register(&self, tasks: &[Task]) -> Vec<Option<CancellationToken>> {
        self.flow.started(tasks, self.clock.now());
        self.tenants.started(tasks);
        let mut registry = self.registry();
        let tokens = tasks.iter().map(|task| registry.insert(task)).collect();
        registry.end_claim();
        tokens
    }

    /// Forgets an attempt that has ended, however it ended (and only that
    /// attempt: a newer claim of the same task keeps its record): the one
    /// exit every attempt takes, which removes its record and tells its
    /// destination's flow. Returns whether the claim loop should look again
    /// now (see [`Flow::ended`]).
    pub(crate) fn end_attempt(&self, id: TaskId, attempt: u32) -> bool {
        let ended = self.registry().remove((id, attempt));
        ended.is_some_and(|ended| {
            self.tenants.ended(&ended.tenant);
            self.flow
                .ended(&ended.destination, (id, attempt), self.clock.now())
        })
    }

    /// The store's state of a task whose `attempt` was stopped here because
    /// the task is no longer this attempt's; `None` if it was not.
    pub(crate) fn taken_away(&self, id: TaskId, attempt: u32) -> Option<State> {
        self.registry().taken_away((id, attempt))
    }

    /// Marks the worker as dropped without shutdown.
    pub(crate) fn abort(&self) {
        self.aborted.store(true, Ordering::SeqCst);
    }

    /// Whether the worker was dropped without shutdown.
    pub(crate) fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }

    /// The attempts running here.
    pub(crate) fn running(&self) -> Vec<(TaskId, u32)> {
        self.registry().running()
    }

    /// Drops the call of `attempt` of `id` if it still runs here: the store
    /// says the task has moved on (canceled elsewhere, recovered, claimed
    /// again), so its answer could not be written anyway. Whether it ran.
    pub(crate) fn stop_attempt(&self, id: TaskId, attempt: u32, now_in: State) -> bool {
        self.registry().stop((id, attempt), now_in)
    }

    /// Interrupts the attempt of `id` if it runs here, or makes sure a claim in
    /// progress will not start it.
    fn interrupt_for_cancel(&self, id: TaskId) {
        self.registry().interrupt_for_cancel(id);
    }
}

/// The handle the HTTP layer uses to talk to a running worker. Cheap to clone.
pub struct WorkerControl<S> {
    pub(crate) shared: Arc<Shared<S>>,
}

impl<S> Clone for WorkerControl<S> {
    fn clone(&self) -> Self {
        WorkerControl {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: TaskStore> WorkerControl<S> {
    /// Wakes the claim loop now: a task was submitted.
    pub fn task_submitted(&self) {
        self.shared.wake.notify_one();
    }

    /// Another process sharing the store announced a submit (PostgreSQL's
    /// NOTIFY). Cheaper than [`Self::task_submitted`] for the store: the
    /// claim loop ignores it when its last claim began after it (that claim
    /// saw the task), and answers it no sooner than a short gap after its
    /// last claim began, so announcements from many nodes cost a few
    /// claims, not one each.
    pub fn woken_elsewhere(&self) {
        self.shared.remote_wakes.fetch_add(1, Ordering::SeqCst);
        self.shared.remote_wake.notify_one();
    }

    /// Wakes the schedules' firing loop: a schedule was created, changed
    /// or deleted.
    pub fn schedules_changed(&self) {
        self.shared.schedules_changed.notify_one();
    }

    /// The worker's clock: the time to stamp on anything written for it.
    pub fn now(&self) -> Timestamp {
        self.shared.clock.now()
    }

    /// Cancels a task in all three places it can be:
    /// pending (or waiting for a retry) — it is never claimed;
    /// claimed but not yet called — it is not called;
    /// in flight — the call's future is dropped, which closes the connection.
    ///
    /// The store's cancel comes first, so any outcome the attempt writes
    /// afterwards loses the guarded write: a canceled task never becomes
    /// success. Returns the task: canceled, or its unchanged terminal state.
    ///
    /// The store write and the interrupt run as one spawned task: a caller
    /// that goes away (an HTTP client hanging up) cannot leave a task
    /// canceled in the store with its call still running here.
    pub async fn cancel(&self, id: TaskId, scope: Scope) -> Result<Task, StoreError> {
        let shared = Arc::clone(&self.shared);
        let cancel = tokio::spawn(async move {
            let task = shared.store.cancel(id, scope, shared.clock.now()).await?;
            if task.state == State::Canceled {
                shared.interrupt_for_cancel(id);
                let _ = shared.changes.send((id, State::Canceled));
                if task.callback_task_id.is_some() {
                    // The cancel made a callback task, due now.
                    shared.wake.notify_one();
                }
            }
            Ok(task)
        });
        cancel
            .await
            .map_err(|e| StoreError::Unavailable(format!("cancel did not finish: {e}")))?
    }

    /// The store announced that `id` was canceled through another process
    /// (another node on a shared database): drops its call here at once if it
    /// runs here, as a cancel through this worker would. The store already
    /// holds the cancel, so nothing is written. Without the announcement the
    /// heartbeat finds it, within a third of a lease.
    pub fn canceled_elsewhere(&self, id: TaskId) {
        self.shared.interrupt_for_cancel(id);
    }

    /// A stream of attempt endings, from now on: what tests and tools wait on
    /// instead of polling the store.
    pub fn subscribe(&self) -> broadcast::Receiver<AttemptEnded> {
        self.shared.events.subscribe()
    }

    /// Every state a task reaches through this worker from now on (attempt
    /// endings, cancels): what requests waiting for a task listen to.
    pub fn changes(&self) -> broadcast::Receiver<(TaskId, State)> {
        self.shared.changes.subscribe()
    }

    /// A destination's, a tenant's or a topic subscription's settings
    /// changed in the store: the worker reads them again at once (otherwise within a second) and
    /// claims again. A claim that starts after this returned sends the new
    /// headers and secrets.
    pub fn destinations_changed(&self) {
        self.shared.outbound.changed();
        self.shared.settings_changed.notify_one();
    }

    /// This worker's view of a destination: its breaker, its backoff, its
    /// last answer. Per process (see the crate's flow control notes).
    pub fn destination_state(&self, destination: &str) -> DestinationState {
        self.shared
            .flow
            .state_of(destination, self.shared.clock.now())
    }

    /// How many claimed tasks this worker is running now.
    pub fn in_flight(&self) -> usize {
        self.shared.registry().in_flight()
    }
}
