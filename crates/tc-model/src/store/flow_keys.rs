//! Flow keys in the store port ([`FlowKeys`]): a tenant's keys' settings
//! and their counts.

use std::future::Future;

use super::StoreError;
use crate::Timestamp;
use crate::flow_key::{FlowKey, FlowKeyUpdate};

/// Flow keys: the limits a task's `flow_key` shares with every task of
/// that key, each tenant's keys its own.
pub trait FlowKeys: Send + Sync + 'static {
    /// Applies `update` to the settings of `tenant`'s flow key `key`
    /// (`None`: the admin's keys; another tenant's key of the same name is
    /// another key), creating them, and answers the key with its counts.
    /// The caller has validated the update ([`FlowKeyUpdate::validate`]).
    fn put_flow_key(
        &self,
        tenant: Option<String>,
        key: String,
        update: FlowKeyUpdate,
        now: Timestamp,
    ) -> impl Future<Output = Result<FlowKey, StoreError>> + Send;

    /// `tenant`'s flow key `key` with its settings (the defaults when it
    /// has none) and its running and pending tasks, or
    /// [`StoreError::NotFound`] when it has neither settings nor tasks.
    fn flow_key(
        &self,
        tenant: Option<String>,
        key: String,
    ) -> impl Future<Output = Result<FlowKey, StoreError>> + Send;

    /// `tenant`'s flow keys that have settings, in name order, with their
    /// counts; at most [`crate::flow_key::FLOW_KEYS_LIMIT`].
    fn flow_keys(
        &self,
        tenant: Option<String>,
    ) -> impl Future<Output = Result<Vec<FlowKey>, StoreError>> + Send;

    /// Removes the settings of `tenant`'s flow key `key` (its tasks stay,
    /// unlimited), or [`StoreError::NotFound`] when it has none.
    fn delete_flow_key(
        &self,
        tenant: Option<String>,
        key: String,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}
