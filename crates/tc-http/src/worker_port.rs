//! The worker port as the HTTP layer sees it ([`Control`]): cancel, wake,
//! destination runtime state; implemented by whoever wires the service.

use std::future::Future;

use tc_model::store::StoreError;
use tc_model::tenant::Scope;
use tc_model::{State, Task, TaskId, Timestamp};

/// What the HTTP layer needs from the worker: a port owned by this crate,
/// implemented by whoever wires the service (tc-server, over tc-worker).
pub trait Control: Send + Sync + 'static {
    /// A task was submitted: wake the worker now (no poll delay).
    fn task_submitted(&self);

    /// Cancels through the worker so that an in-flight call is dropped.
    /// Returns the task after the cancel (canceled, or its unchanged terminal
    /// state), [`StoreError::NotFound`] for an unknown id and for a task
    /// `scope` does not see (the store checks it).
    fn cancel(
        &self,
        id: TaskId,
        scope: Scope,
    ) -> impl Future<Output = Result<Task, StoreError>> + Send;

    /// The store already holds this running task's cancel (a bulk cancel
    /// wrote it): drop its in-flight call if this worker runs it, as
    /// [`Control::cancel`] would.
    fn canceled_in_store(&self, id: TaskId);

    /// The worker's clock (paused in tests), used for `created_at` and the like.
    fn now(&self) -> Timestamp;

    /// Every state a task reaches through this process's worker or cancels,
    /// from now on: what `GET /tasks/{id}?wait_ms=` waits on instead of
    /// polling the store. Changes made by another process (another node on
    /// a shared database) are not in it; a waiter then answers at its
    /// deadline with the task as it is.
    fn changes(&self) -> tokio::sync::broadcast::Receiver<(TaskId, State)>;

    /// A destination's settings changed in the store: the worker should
    /// read them again now.
    fn destinations_changed(&self);

    /// A tenant was created, changed or deleted: the worker should read
    /// the tenants' settings (weights, signing secrets) again now. The
    /// worker reads them with the destinations' settings, so by default
    /// this is [`Control::destinations_changed`].
    fn tenants_changed(&self) {
        self.destinations_changed();
    }

    /// A schedule was created, changed or deleted: the worker's firing
    /// loop should read the schedules again now.
    fn schedules_changed(&self);

    /// What the worker knows of a destination beyond the store: its
    /// breaker, its Retry-After backoff, its last answer.
    fn destination_state(&self, destination: &str) -> DestinationRuntime;
}

/// The worker's view of one destination, as `GET /destinations` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestinationRuntime {
    /// `closed`, `open` or `half_open`.
    pub breaker: &'static str,
    /// Until when the destination backs off after a Retry-After.
    pub backoff_until: Option<Timestamp>,
    /// The error reason of its last failed or retried attempt.
    pub last_error: Option<String>,
    /// The HTTP status of its last answered attempt.
    pub last_status: Option<u16>,
    /// The calls its pacing allows in flight now, when pacing bounds them.
    pub effective_max_in_flight: Option<u32>,
    /// Calls left in its window, as its last rate-limit fields said.
    pub ratelimit_remaining: Option<u64>,
    /// When that window resets.
    pub ratelimit_reset_at: Option<Timestamp>,
}

impl DestinationRuntime {
    /// This node's view with the cluster's holds over it: a breaker another
    /// node opened shows open here, and the later
    /// backoff and rate-limit reset show, before this node adopts them.
    pub fn with_cluster(
        mut self,
        holds: Option<&tc_model::cluster::DestinationHolds>,
        now: Timestamp,
    ) -> DestinationRuntime {
        let Some(holds) = holds.and_then(|h| h.current(now)) else {
            return self;
        };
        if holds.breaker_open_until.is_some() {
            self.breaker = "open";
        }
        let later = |a: Option<Timestamp>, b: Option<Timestamp>| match (a, b) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.backoff_until = later(self.backoff_until, holds.backoff_until);
        self.ratelimit_reset_at = later(self.ratelimit_reset_at, holds.ratelimit_until);
        self
    }
}

impl Default for DestinationRuntime {
    fn default() -> Self {
        DestinationRuntime {
            breaker: "closed",
            backoff_until: None,
            last_error: None,
            last_status: None,
            effective_max_in_flight: None,
            ratelimit_remaining: None,
            ratelimit_reset_at: None,
        }
    }
}
