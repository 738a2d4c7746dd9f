//! The [`Destinations`] part of the store port on [`PgStore`]: destinations and their settings.

use crate::destinations;
use tc_model::Timestamp;
use tc_model::destination::{Destination, DestinationSettings, DestinationUpdate};
use tc_model::store::Destinations;
use tc_model::store::StoreError;

use super::PgStore;

impl Destinations for PgStore {
    async fn destination_settings(&self) -> Result<Vec<(String, DestinationSettings)>, StoreError> {
        destinations::all_settings(&self.client().await?, &self.sealer).await
    }

    async fn destinations(&self) -> Result<Vec<Destination>, StoreError> {
        destinations::destinations(&self.client().await?, &self.sealer).await
    }

    async fn destination(&self, name: String) -> Result<Destination, StoreError> {
        destinations::destination(&self.client().await?, name, &self.sealer).await
    }

    async fn update_destination(
        &self,
        name: String,
        update: DestinationUpdate,
        now: Timestamp,
    ) -> Result<Destination, StoreError> {
        let updated = self
            .write(async |tx| destinations::update(tx, name, &update, now, &self.sealer).await)
            .await?;
        // A resumed or widened destination's due tasks are claimable now:
        // idle nodes that sleep until their next due time must look.
        self.submitted.notify_one();
        Ok(updated)
    }
}
