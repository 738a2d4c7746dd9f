//! The [`FlowKeys`] part of the store port on [`PgStore`]: a tenant's flow
//! keys' settings, read and written in flow_keys.rs.

use tc_model::Timestamp;
use tc_model::flow_key::{FlowKey, FlowKeyUpdate, KeyRef};
use tc_model::store::{FlowKeys, StoreError};

use super::PgStore;

impl FlowKeys for PgStore {
    async fn put_flow_key(
        &self,
        tenant: Option<String>,
        key: String,
        update: FlowKeyUpdate,
        now: Timestamp,
    ) -> Result<FlowKey, StoreError> {
        let at = KeyRef::new(tenant.as_deref(), &key);
        self.write(async |tx| crate::flow_keys::put(tx, &at, &update, now).await)
            .await
    }

    async fn flow_key(&self, tenant: Option<String>, key: String) -> Result<FlowKey, StoreError> {
        let at = KeyRef::new(tenant.as_deref(), &key);
        crate::flow_keys::get(&self.client().await?, &at).await
    }

    async fn flow_keys(&self, tenant: Option<String>) -> Result<Vec<FlowKey>, StoreError> {
        self.read(async |tx| crate::flow_keys::list(tx, tenant.as_deref()).await)
            .await
    }

    async fn delete_flow_key(&self, tenant: Option<String>, key: String) -> Result<(), StoreError> {
        let at = KeyRef::new(tenant.as_deref(), &key);
        self.write(async |tx| crate::flow_keys::delete(tx, &at).await)
            .await
    }
}
