//! The [`Topics`] part of the store port on [`SqliteStore`]: topics, subscriptions and events.

use crate::writer::Undo;
use crate::{events, topics};
use tc_model::Timestamp;
use tc_model::signing::SigningSecrets;
use tc_model::store::StoreError;
use tc_model::store::Topics;
use tc_model::topic::event::{Event, NewEvent, Published};
use tc_model::topic::health::HealthChange;
use tc_model::topic::{
    Delivery, Subscription, SubscriptionSpec, SubscriptionUpdate, Topic, TopicRef, TopicSpec,
};

use super::SqliteStore;

impl Topics for SqliteStore {
    async fn put_topic(
        &self,
        at: TopicRef,
        spec: TopicSpec,
        now: Timestamp,
    ) -> Result<(Topic, bool), StoreError> {
        self.write(move |conn| topics::put(conn, &at, &spec, now))
            .await
    }

    async fn topics(&self, tenant: Option<String>) -> Result<Vec<Topic>, StoreError> {
        self.readers
            .run(move |conn| topics::all(conn, tenant.as_deref()))
            .await
    }

    async fn topic(&self, at: TopicRef) -> Result<Topic, StoreError> {
        self.readers.run(move |conn| topics::one(conn, &at)).await
    }

    async fn delete_topic(&self, at: TopicRef) -> Result<(), StoreError> {
        self.write(move |conn| topics::delete(conn, &at)).await
    }

    async fn create_subscription(
        &self,
        at: TopicRef,
        id: String,
        spec: SubscriptionSpec,
        now: Timestamp,
    ) -> Result<Subscription, StoreError> {
        let sealer = self.sealer.clone();
        self.write(move |conn| topics::create_subscription(conn, &sealer, at, id, spec, now))
            .await
    }

    async fn update_subscription(
        &self,
        at: TopicRef,
        id: String,
        update: SubscriptionUpdate,
        now: Timestamp,
    ) -> Result<Subscription, StoreError> {
        let sealer = self.sealer.clone();
        self.write(move |conn| topics::update_subscription(conn, &sealer, &at, &id, update, now))
            .await
    }

    async fn delete_subscription(&self, at: TopicRef, id: String) -> Result<(), StoreError> {
        self.write(move |conn| topics::delete_subscription(conn, &at, &id))
            .await
    }

    async fn subscriptions(&self, at: TopicRef) -> Result<Vec<Subscription>, StoreError> {
        let sealer = self.sealer.clone();
        self.readers
            .run(move |conn| topics::subscriptions(conn, &sealer, &at))
            .await
    }

    async fn subscription_secrets(&self) -> Result<Vec<(String, SigningSecrets)>, StoreError> {
        let sealer = self.sealer.clone();
        self.readers
            .run(move |conn| topics::all_secrets(conn, &sealer))
            .await
    }

    async fn subscription_try_ended(
        &self,
        id: String,
        ok: bool,
        now: Timestamp,
    ) -> Result<HealthChange, StoreError> {
        let (sealer, callback_bytes) = (self.sealer.clone(), self.callback_bytes);
        self.write(move |conn| {
            crate::sub_health::try_ended(conn, &sealer, &id, ok, now, callback_bytes)
        })
        .await
    }

    async fn publish(
        &self,
        event: NewEvent,
        id: String,
        now: Timestamp,
    ) -> Result<Published, StoreError> {
        let sealer = self.sealer.clone();
        let bytes = event.body().len() + event.idempotency_key().len();
        // One command, one savepoint: a task refused undoes the event.
        self.write_sized(bytes, Undo::Savepoint, move |conn| {
            events::publish(conn, &sealer, &event, id, now)
        })
        .await
    }

    async fn event(&self, at: TopicRef, id: String) -> Result<Event, StoreError> {
        self.readers
            .run(move |conn| events::event(conn, &at, &id))
            .await
    }

    async fn replay(
        &self,
        at: TopicRef,
        id: String,
        since: Timestamp,
        now: Timestamp,
    ) -> Result<Vec<Delivery>, StoreError> {
        let sealer = self.sealer.clone();
        self.write(move |conn| events::replay(conn, &sealer, &at, &id, since, now))
            .await
    }
}
