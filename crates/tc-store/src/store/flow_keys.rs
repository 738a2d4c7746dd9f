//! The [`FlowKeys`] part of the store port on [`SqliteStore`]: a tenant's
//! flow keys' settings, read and written in flow_keys.rs.

use tc_model::Timestamp;
use tc_model::flow_key::{FlowKey, FlowKeyUpdate, KeyRef};
use tc_model::store::{FlowKeys, StoreError};

use super::SqliteStore;

impl FlowKeys for SqliteStore {
    async fn put_flow_key(
        &self,
        tenant: Option<String>,
        key: String,
        update: FlowKeyUpdate,
        now: Timestamp,
    ) -> Result<FlowKey, StoreError> {
        let at = KeyRef::new(tenant.as_deref(), &key);
        self.write(move |conn| crate::flow_keys::put(conn, &at, &update, now))
            .await
    }

    async fn flow_key(&self, tenant: Option<String>, key: String) -> Result<FlowKey, StoreError> {
        let at = KeyRef::new(tenant.as_deref(), &key);
        self.readers
            .run(move |conn| crate::flow_keys::get(conn, &at))
            .await
    }

    async fn flow_keys(&self, tenant: Option<String>) -> Result<Vec<FlowKey>, StoreError> {
        self.readers
            .run(move |conn| crate::flow_keys::list(conn, tenant.as_deref()))
            .await
    }

    async fn delete_flow_key(&self, tenant: Option<String>, key: String) -> Result<(), StoreError> {
        let at = KeyRef::new(tenant.as_deref(), &key);
        self.write(move |conn| crate::flow_keys::delete(conn, &at))
            .await
    }
}
