//! The HTTP layer's [`tc_http::Control`] port, implemented over the worker's
//! handle: tc-http and tc-worker never see each other.

use tc_model::store::{StoreError, TaskStore};
use tc_model::tenant::Scope;
use tc_model::{State, Task, TaskId, Timestamp};
use tc_worker::WorkerControl;

/// Hands tc-http's wake-ups, cancels and clock reads to the worker.
pub(crate) struct WorkerPort<S>(pub(crate) WorkerControl<S>);

impl<S: TaskStore> tc_http::Control for WorkerPort<S> {
    fn task_submitted(&self) {
        self.0.task_submitted();
    }

    async fn cancel(&self, id: TaskId, scope: Scope) -> Result<Task, StoreError> {
        self.0.cancel(id, scope).await
    }

    fn canceled_in_store(&self, id: TaskId) {
        self.0.canceled_elsewhere(id);
    }

    fn now(&self) -> Timestamp {
        self.0.now()
    }

    fn changes(&self) -> tokio::sync::broadcast::Receiver<(TaskId, State)> {
        self.0.changes()
    }

    fn destinations_changed(&self) {
        self.0.destinations_changed();
    }

    fn schedules_changed(&self) {
        self.0.schedules_changed();
    }

    fn destination_state(&self, destination: &str) -> tc_http::DestinationRuntime {
        let state = self.0.destination_state(destination);
        tc_http::DestinationRuntime {
            breaker: state.breaker.as_str(),
            backoff_until: state.backoff_until,
            last_error: state.last_error,
            last_status: state.last_status,
            effective_max_in_flight: state.effective_max_in_flight,
            ratelimit_remaining: state.ratelimit_remaining,
            ratelimit_reset_at: state.ratelimit_reset_at,
        }
    }
}
