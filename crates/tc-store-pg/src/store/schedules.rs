//! The [`Schedules`] part of the store port on [`PgStore`]: schedules and their firing record.

use crate::schedules;
use tc_model::schedule::{Schedule, ScheduleChange, ScheduleSpec};
use tc_model::store::Schedules;
use tc_model::store::StoreError;
use tc_model::{TaskId, Timestamp};

use super::PgStore;

impl Schedules for PgStore {
    async fn create_schedule(
        &self,
        spec: ScheduleSpec,
        now: Timestamp,
    ) -> Result<Schedule, StoreError> {
        schedules::create(&self.client().await?, spec, now).await
    }

    async fn update_schedule(
        &self,
        name: String,
        change: ScheduleChange,
        now: Timestamp,
    ) -> Result<Schedule, StoreError> {
        self.write(async |tx| schedules::update(tx, &name, change, now).await)
            .await
    }

    async fn delete_schedule(&self, name: String) -> Result<(), StoreError> {
        schedules::delete(&self.client().await?, &name).await
    }

    async fn schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        schedules::all(&self.client().await?).await
    }

    async fn schedule(&self, name: String) -> Result<Schedule, StoreError> {
        schedules::one(&self.client().await?, &name, false).await
    }

    async fn record_firing(
        &self,
        name: String,
        at: Timestamp,
        task: TaskId,
    ) -> Result<bool, StoreError> {
        schedules::record_firing(&self.client().await?, &name, at, task).await
    }

    async fn record_firing_error(
        &self,
        name: String,
        error: tc_model::schedule::FiringError,
    ) -> Result<bool, StoreError> {
        schedules::record_firing_error(&self.client().await?, &name, &error).await
    }
}
