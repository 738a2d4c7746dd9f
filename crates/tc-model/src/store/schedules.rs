//! Schedules in the store port ([`Schedules`]): the cron resource and its
//! firing record.

use std::future::Future;

use super::StoreError;
use crate::schedule::{FiringError, Schedule, ScheduleChange, ScheduleSpec};
use crate::{TaskId, Timestamp};

/// Schedules and the guarded writes that record their firings.
pub trait Schedules: Send + Sync + 'static {
    /// Stores a new schedule (never fired, created and updated at `now`),
    /// or [`StoreError::Exists`] when its name is taken.
    fn create_schedule(
        &self,
        spec: ScheduleSpec,
        now: Timestamp,
    ) -> impl Future<Output = Result<Schedule, StoreError>> + Send;

    /// Applies `change` to the schedule `name` ([`Schedule::changed`]:
    /// its firing record stays, `updated_at` becomes `now`), or
    /// [`StoreError::NotFound`].
    fn update_schedule(
        &self,
        name: String,
        change: ScheduleChange,
        now: Timestamp,
    ) -> impl Future<Output = Result<Schedule, StoreError>> + Send;

    /// Deletes the schedule `name` (its tasks stay), or
    /// [`StoreError::NotFound`].
    fn delete_schedule(&self, name: String) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Every schedule, in name order: the firing loop reads them all (a
    /// schedule left out would never fire), so there is no page.
    fn schedules(&self) -> impl Future<Output = Result<Vec<Schedule>, StoreError>> + Send;

    /// The schedule `name`, or [`StoreError::NotFound`].
    fn schedule(&self, name: String) -> impl Future<Output = Result<Schedule, StoreError>> + Send;

    /// Records a firing of `name` at `at` that submitted `task`: a guarded
    /// write that applies only when `at` is later than the schedule's
    /// `last_run_at` (or it has none), so the record never moves backwards
    /// whatever order nodes write in. When it applies it clears a
    /// `last_error` of a fire time at or before `at` (a later refusal
    /// stays). Answers whether it applied (`false` too when the schedule
    /// is gone).
    fn record_firing(
        &self,
        name: String,
        at: Timestamp,
        task: TaskId,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Records that the firing of `name` at `error.at` created no task, as
    /// the schedule's `last_error` (its `last_run_at` and `last_task_id`
    /// stay): a guarded write like [`Schedules::record_firing`], applied
    /// only when `error.at` is later than `last_run_at` (or there is none)
    /// and not earlier than a recorded error's. Answers whether it applied
    /// (`false` too when the schedule is gone).
    fn record_firing_error(
        &self,
        name: String,
        error: FiringError,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}
