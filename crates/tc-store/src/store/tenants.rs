//! The [`Tenants`] part of the store port on [`SqliteStore`]: tenants, their API keys and the server's own keys.

use crate::{destinations, tenants};
use std::collections::BTreeMap;
use tc_model::Timestamp;
use tc_model::store::StoreError;
use tc_model::store::Tenants;
use tc_model::tenant::key::{ApiKey, KeyHash, KeyOwner};
use tc_model::tenant::{Tenant, TenantDetail, TenantSettings, TenantUpdate};

use super::SqliteStore;

impl Tenants for SqliteStore {
    async fn create_tenant(
        &self,
        name: String,
        settings: TenantUpdate,
        now: Timestamp,
    ) -> Result<Tenant, StoreError> {
        let sealer = self.sealer.clone();
        self.write(move |conn| tenants::create(conn, &name, &settings, now, &sealer))
            .await
    }

    async fn update_tenant(
        &self,
        name: String,
        update: TenantUpdate,
        now: Timestamp,
    ) -> Result<Tenant, StoreError> {
        let sealer = self.sealer.clone();
        self.write(move |conn| tenants::update(conn, &name, &update, now, &sealer))
            .await
    }

    async fn delete_tenant(&self, name: String) -> Result<(), StoreError> {
        self.write(move |conn| tenants::delete(conn, &name)).await
    }

    async fn tenants(&self) -> Result<Vec<TenantDetail>, StoreError> {
        let sealer = self.sealer.clone();
        self.readers
            .run(move |conn| tenants::all(conn, &sealer))
            .await
    }

    async fn tenant_settings(&self) -> Result<BTreeMap<String, TenantSettings>, StoreError> {
        let sealer = self.sealer.clone();
        self.readers
            .run(move |conn| tenants::settings(conn, &sealer))
            .await
    }

    async fn tenant(&self, name: String) -> Result<TenantDetail, StoreError> {
        let sealer = self.sealer.clone();
        self.readers
            .run(move |conn| tenants::one(conn, &name, &sealer))
            .await
    }

    async fn create_api_key(
        &self,
        tenant: String,
        id: String,
        hash: KeyHash,
        now: Timestamp,
    ) -> Result<ApiKey, StoreError> {
        self.write(move |conn| tenants::create_key(conn, &tenant, &id, &hash, now))
            .await
    }

    async fn revoke_api_key(&self, tenant: String, id: String) -> Result<(), StoreError> {
        self.write(move |conn| tenants::revoke_key(conn, &tenant, &id))
            .await
    }

    async fn api_key(&self, hash: KeyHash) -> Result<Option<KeyOwner>, StoreError> {
        let sealer = self.sealer.clone();
        self.readers
            .run(move |conn| tenants::key_owner(conn, &hash, &sealer))
            .await
    }

    async fn touch_api_key(&self, id: String, at: Timestamp) -> Result<(), StoreError> {
        self.write(move |conn| tenants::touch_key(conn, &id, at))
            .await
    }

    async fn server_key(&self, name: String, candidate: String) -> Result<String, StoreError> {
        let sealer = self.sealer.clone();
        self.write(move |conn| destinations::server_key(conn, &sealer, &name, &candidate))
            .await
    }
}
