//! Tenants and keys in the store port ([`Tenants`]): tenants with their
//! settings, their API keys, and the server's own keys.

use std::collections::BTreeMap;
use std::future::Future;

use super::StoreError;
use crate::Timestamp;
use crate::tenant::key::{ApiKey, KeyHash, KeyOwner};
use crate::tenant::{Tenant, TenantDetail, TenantSettings, TenantUpdate};

/// Tenants, their API keys, and the server's own keys.
pub trait Tenants: Send + Sync + 'static {
    /// Stores a new tenant `name` with the defaults and `settings` applied
    /// (validated by the caller), or [`StoreError::Exists`].
    fn create_tenant(
        &self,
        name: String,
        settings: TenantUpdate,
        now: Timestamp,
    ) -> impl Future<Output = Result<Tenant, StoreError>> + Send;

    /// Applies `update` to the tenant `name`, or [`StoreError::NotFound`].
    fn update_tenant(
        &self,
        name: String,
        update: TenantUpdate,
        now: Timestamp,
    ) -> impl Future<Output = Result<Tenant, StoreError>> + Send;

    /// Deletes the tenant `name` with its keys; [`StoreError::NotEmpty`]
    /// while any task (terminal or not) is its, [`StoreError::NotFound`]
    /// when there is no such tenant.
    fn delete_tenant(&self, name: String) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Every tenant, in name order, with its counts and keys (the API's
    /// list and the metrics read them all).
    fn tenants(&self) -> impl Future<Output = Result<Vec<TenantDetail>, StoreError>> + Send;

    /// Every stored tenant's settings by name (its weight for the claim's
    /// share, its signing secrets for its calls), and nothing else: the
    /// worker reads it every second on every node, so it is one read of the
    /// tenants and must not count tasks or list keys as
    /// [`Tenants::tenants`] does. Empty while no tenant is stored.
    fn tenant_settings(
        &self,
    ) -> impl Future<Output = Result<BTreeMap<String, TenantSettings>, StoreError>> + Send;

    /// The tenant `name` with its counts and keys, or
    /// [`StoreError::NotFound`].
    fn tenant(&self, name: String)
    -> impl Future<Output = Result<TenantDetail, StoreError>> + Send;

    /// Stores a new key of `tenant` (its hash only), or
    /// [`StoreError::NotFound`] when there is no such tenant.
    fn create_api_key(
        &self,
        tenant: String,
        id: String,
        hash: KeyHash,
        now: Timestamp,
    ) -> impl Future<Output = Result<ApiKey, StoreError>> + Send;

    /// Deletes the key `id` of `tenant`: it stops working at once, on every
    /// node (nothing caches it). [`StoreError::NotFound`] when `tenant` has
    /// no such key.
    fn revoke_api_key(
        &self,
        tenant: String,
        id: String,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The live key whose hash is `hash`, with its tenant as stored now
    /// (its settings current on every node), or `None`.
    fn api_key(
        &self,
        hash: KeyHash,
    ) -> impl Future<Output = Result<Option<KeyOwner>, StoreError>> + Send;

    /// Records that the key `id` was used at `at` (a write callers make
    /// at most once a minute per key); never moves `last_used_at` backwards.
    fn touch_api_key(
        &self,
        id: String,
        at: Timestamp,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The server's own key called `name` ([`JWT_KEY`](super::JWT_KEY), the key
    /// JWTs are signed with when none is given): the one stored, or else
    /// `candidate`, stored now. Insert-if-absent, never replaced: the first
    /// node to ask decides for every node that shares the store.
    fn server_key(
        &self,
        name: String,
        candidate: String,
    ) -> impl Future<Output = Result<String, StoreError>> + Send;
}
