//! The [`Topics`] part of the store port on [`PgStore`]: topics, subscriptions and events.

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

use super::PgStore;

impl Topics for PgStore {
    async fn put_topic(
        &self,
        at: TopicRef,
        spec: TopicSpec,
        now: Timestamp,
    ) -> Result<(Topic, bool), StoreError> {
        topics::put(&self.client().await?, &at, &spec, now).await
    }

    async fn topics(&self, tenant: Option<String>) -> Result<Vec<Topic>, StoreError> {
        topics::all(&self.client().await?, tenant.as_deref()).await
    }

    async fn topic(&self, at: TopicRef) -> Result<Topic, StoreError> {
        topics::one(&self.client().await?, &at).await
    }

    async fn delete_topic(&self, at: TopicRef) -> Result<(), StoreError> {
        self.write(async |tx| topics::delete(tx, &at).await).await
    }

    async fn create_subscription(
        &self,
        at: TopicRef,
        id: String,
        spec: SubscriptionSpec,
        now: Timestamp,
    ) -> Result<Subscription, StoreError> {
        let sealer = &self.sealer;
        self.write(async |tx| topics::create_subscription(tx, sealer, at, id, spec, now).await)
            .await
    }

    async fn update_subscription(
        &self,
        at: TopicRef,
        id: String,
        update: SubscriptionUpdate,
        now: Timestamp,
    ) -> Result<Subscription, StoreError> {
        let sealer = &self.sealer;
        self.write(async |tx| topics::update_subscription(tx, sealer, &at, &id, update, now).await)
            .await
    }

    async fn delete_subscription(&self, at: TopicRef, id: String) -> Result<(), StoreError> {
        topics::delete_subscription(&self.client().await?, &at, &id).await
    }

    async fn subscriptions(&self, at: TopicRef) -> Result<Vec<Subscription>, StoreError> {
        let sealer = &self.sealer;
        self.read(async |tx| topics::subscriptions(tx, sealer, &at).await)
            .await
    }

    async fn subscription_secrets(&self) -> Result<Vec<(String, SigningSecrets)>, StoreError> {
        let sealer = &self.sealer;
        self.read(async |tx| topics::all_secrets(tx, sealer).await)
            .await
    }

    async fn subscription_try_ended(
        &self,
        id: String,
        ok: bool,
        now: Timestamp,
    ) -> Result<HealthChange, StoreError> {
        let (sealer, stamp) = (&self.sealer, (now, self.stamp(now)));
        let (channel, callback_bytes) = (&self.channels.cancel, self.callback_bytes);
        let change = self
            .write(async |tx| {
                crate::sub_health::try_ended(tx, sealer, &id, ok, stamp, channel, callback_bytes)
                    .await
            })
            .await?;
        if change == HealthChange::Disabled {
            self.states_changed();
            self.submitted.notify_one();
        }
        Ok(change)
    }

    async fn publish(
        &self,
        event: NewEvent,
        id: String,
        now: Timestamp,
    ) -> Result<Published, StoreError> {
        let (sealer, stamp) = (&self.sealer, self.stamp(now));
        let (published, created) = self
            .write(async |tx| events::publish(tx, sealer, &event, id, now, stamp).await)
            .await?;
        if created {
            self.states_changed();
            self.submitted.notify_one();
        }
        Ok(published)
    }

    async fn event(&self, at: TopicRef, id: String) -> Result<Event, StoreError> {
        self.read(async |tx| events::event(tx, &at, &id).await)
            .await
    }

    async fn replay(
        &self,
        at: TopicRef,
        id: String,
        since: Timestamp,
        now: Timestamp,
    ) -> Result<Vec<Delivery>, StoreError> {
        let (sealer, stamp) = (&self.sealer, (now, self.stamp(now)));
        let (deliveries, created) = self
            .write(async |tx| events::replay(tx, sealer, &at, &id, since, stamp).await)
            .await?;
        if created {
            self.states_changed();
            self.submitted.notify_one();
        }
        Ok(deliveries)
    }
}
