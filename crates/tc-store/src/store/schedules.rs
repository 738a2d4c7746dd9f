//! The [`Schedules`] part of the store port on [`SqliteStore`]: schedules and their firing record.

use crate::schedules;
use tc_model::schedule::{Schedule, ScheduleChange, ScheduleSpec};
use tc_model::store::Schedules;
use tc_model::store::StoreError;
use tc_model::{TaskId, Timestamp};

use super::SqliteStore;

impl Schedules for SqliteStore {
    async fn create_schedule(
        &self,
        spec: ScheduleSpec,
        now: Timestamp,
    ) -> Result<Schedule, StoreError> {
        self.write(move |conn| schedules::create(conn, spec, now))
            .await
    }

    async fn update_schedule(
        &self,
        name: String,
        change: ScheduleChange,
        now: Timestamp,
    ) -> Result<Schedule, StoreError> {
        self.write(move |conn| schedules::update(conn, &name, change, now))
            .await
    }

    async fn delete_schedule(&self, name: String) -> Result<(), StoreError> {
        self.write(move |conn| schedules::delete(conn, &name)).await
    }

    async fn schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        self.readers.run(|conn| schedules::all(conn)).await
    }

    async fn schedule(&self, name: String) -> Result<Schedule, StoreError> {
        self.readers
            .run(move |conn| schedules::one(conn, &name))
            .await
    }

    async fn record_firing(
        &self,
        name: String,
        at: Timestamp,
        task: TaskId,
    ) -> Result<bool, StoreError> {
        self.write(move |conn| schedules::record_firing(conn, &name, at, task))
            .await
    }

    async fn record_firing_error(
        &self,
        name: String,
        error: tc_model::schedule::FiringError,
    ) -> Result<bool, StoreError> {
        self.write(move |conn| schedules::record_firing_error(conn, &name, &error))
            .await
    }
}
