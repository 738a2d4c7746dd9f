//! The [`Destinations`] part of the store port on [`SqliteStore`]: destinations and their settings.

use crate::destinations;
use tc_model::Timestamp;
use tc_model::destination::{Destination, DestinationSettings, DestinationUpdate};
use tc_model::store::Destinations;
use tc_model::store::StoreError;

use super::SqliteStore;

impl Destinations for SqliteStore {
    async fn destination_settings(&self) -> Result<Vec<(String, DestinationSettings)>, StoreError> {
        let sealer = self.sealer.clone();
        self.readers
            .run(move |conn| destinations::all_settings(conn, &sealer))
            .await
    }

    async fn destinations(&self) -> Result<Vec<Destination>, StoreError> {
        let sealer = self.sealer.clone();
        self.readers
            .run(move |conn| destinations::destinations(conn, &sealer))
            .await
    }

    async fn destination(&self, name: String) -> Result<Destination, StoreError> {
        let sealer = self.sealer.clone();
        self.readers
            .run(move |conn| destinations::destination(conn, &name, &sealer))
            .await
    }

    async fn update_destination(
        &self,
        name: String,
        update: DestinationUpdate,
        now: Timestamp,
    ) -> Result<Destination, StoreError> {
        let sealer = self.sealer.clone();
        self.write(move |conn| destinations::update(conn, &name, &update, now, &sealer))
            .await
    }
}
