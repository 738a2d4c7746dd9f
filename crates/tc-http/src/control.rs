use std::future::Future;

use tc_model::store::StoreError;
use tc_model::{State, Task, TaskId, Timestamp};

/// What the HTTP layer needs from the worker: a port owned by this crate,
/// implemented by whoever wires the service (tc-server, over tc-worker).
pub trait Control: Send + Sync + 'static {
    /// A task was submitted: wake the worker now (no poll delay).
    fn task_submitted(&self);

    /// Cancels through the worker so that an in-flight call is dropped.
    /// Returns the task after the cancel (canceled, or its unchanged terminal
    /// state), [`StoreError::NotFound`] for an unknown id.
    fn cancel(&self, id: TaskId) -> impl Future<Output = Result<Task, StoreError>> + Send;

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
}
