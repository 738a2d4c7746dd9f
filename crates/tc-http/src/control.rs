use std::future::Future;

use tc_model::store::StoreError;
use tc_model::{Task, TaskId, Timestamp};

/// What the HTTP layer needs from the worker: a port owned by this crate,
/// implemented by whoever wires the service (tc-server, over tc-worker).
pub trait Control: Send + Sync + 'static {
    /// A task was submitted: wake the worker now (no poll delay).
    fn task_submitted(&self);

    /// Cancels through the worker so that an in-flight call is dropped.
    /// Returns the task after the cancel (canceled, or its unchanged terminal
    /// state), [`StoreError::NotFound`] for an unknown id.
    fn cancel(&self, id: TaskId) -> impl Future<Output = Result<Task, StoreError>> + Send;

    /// The worker's clock (paused in tests), used for `created_at` and the like.
    fn now(&self) -> Timestamp;
}
