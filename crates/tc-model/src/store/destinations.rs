//! Destinations in the store port ([`Destinations`]): their settings and
//! their counts.

use std::future::Future;

use super::StoreError;
use crate::Timestamp;
use crate::destination::{Destination, DestinationSettings, DestinationUpdate};

/// Destinations: the hosts tasks call, with the settings an operator gave
/// them.
pub trait Destinations: Send + Sync + 'static {
    /// Every destination that has settings, with them: what a worker needs
    /// to know (its rates) without counting tasks. A destination keeps its
    /// settings once an update named it, even when they are back to the
    /// defaults (an operator named it, so it stays listed).
    fn destination_settings(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, DestinationSettings)>, StoreError>> + Send;

    /// Every destination that has tasks or settings, in name order, with
    /// its pending and running counts; at most [`DESTINATIONS_LIMIT`].
    ///
    /// [`DESTINATIONS_LIMIT`]: crate::destination::DESTINATIONS_LIMIT
    fn destinations(&self) -> impl Future<Output = Result<Vec<Destination>, StoreError>> + Send;

    /// One destination (`host:port` as [`crate::destination_of`] writes
    /// it), or [`StoreError::NotFound`] when it has neither tasks nor
    /// settings.
    fn destination(
        &self,
        name: String,
    ) -> impl Future<Output = Result<Destination, StoreError>> + Send;

    /// Applies `update` to a destination's settings, durably (a destination
    /// need not have tasks yet), and returns the destination. The caller has
    /// validated the update ([`DestinationUpdate::validate`]).
    fn update_destination(
        &self,
        name: String,
        update: DestinationUpdate,
        now: Timestamp,
    ) -> impl Future<Output = Result<Destination, StoreError>> + Send;
}
