//! The [`Tenants`] part of the store port on [`PgStore`]: tenants, their API keys and the server's own keys.

use crate::destinations;
use crate::tenants;
use std::collections::BTreeMap;
use tc_model::Timestamp;
use tc_model::store::StoreError;
use tc_model::store::Tenants;
use tc_model::tenant::key::{ApiKey, KeyHash, KeyOwner};
use tc_model::tenant::{Tenant, TenantDetail, TenantSettings, TenantUpdate};

use super::PgStore;

impl Tenants for PgStore {
    async fn create_tenant(
        &self,
        name: String,
        settings: TenantUpdate,
        now: Timestamp,
    ) -> Result<Tenant, StoreError> {
        tenants::create(&self.client().await?, &name, &settings, now, &self.sealer).await
    }

    async fn update_tenant(
        &self,
        name: String,
        update: TenantUpdate,
        now: Timestamp,
    ) -> Result<Tenant, StoreError> {
        self.write(async |tx| tenants::update(tx, &name, &update, now, &self.sealer).await)
            .await
    }

    async fn delete_tenant(&self, name: String) -> Result<(), StoreError> {
        self.write(async |tx| tenants::delete(tx, &name).await)
            .await
    }

    async fn tenants(&self) -> Result<Vec<TenantDetail>, StoreError> {
        self.read(async |tx| tenants::details(tx, None, &self.sealer).await)
            .await
    }

    async fn tenant_settings(&self) -> Result<BTreeMap<String, TenantSettings>, StoreError> {
        tenants::settings(&self.client().await?, &self.sealer).await
    }

    async fn tenant(&self, name: String) -> Result<TenantDetail, StoreError> {
        self.read(async |tx| tenants::details(tx, Some(&name), &self.sealer).await)
            .await?
            .into_iter()
            .next()
            .ok_or(StoreError::NotFound)
    }

    async fn create_api_key(
        &self,
        tenant: String,
        id: String,
        hash: KeyHash,
        now: Timestamp,
    ) -> Result<ApiKey, StoreError> {
        tenants::create_key(&self.client().await?, &tenant, &id, &hash, now).await
    }

    async fn revoke_api_key(&self, tenant: String, id: String) -> Result<(), StoreError> {
        self.write(async |tx| tenants::revoke_key(tx, &tenant, &id).await)
            .await
    }

    async fn api_key(&self, hash: KeyHash) -> Result<Option<KeyOwner>, StoreError> {
        tenants::key_owner(&self.client().await?, &hash, &self.sealer).await
    }

    async fn touch_api_key(&self, id: String, at: Timestamp) -> Result<(), StoreError> {
        tenants::touch_key(&self.client().await?, &id, at).await
    }

    async fn server_key(&self, name: String, candidate: String) -> Result<String, StoreError> {
        destinations::server_key(&self.client().await?, &self.sealer, &name, &candidate).await
    }
}
