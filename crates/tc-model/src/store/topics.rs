//! Topics in the store port ([`Topics`]): topics, their subscriptions,
//! events published on them and their deliveries.

use std::future::Future;

use super::StoreError;
use crate::Timestamp;
use crate::signing::SigningSecrets;
use crate::topic::event::{Event, NewEvent, Published};
use crate::topic::{
    Delivery, Subscription, SubscriptionSpec, SubscriptionUpdate, Topic, TopicRef, TopicSpec,
};

/// Topics, subscriptions and events.
pub trait Topics: Send + Sync + 'static {
    /// Creates the topic `at` with `spec`, or replaces the settings of the
    /// one there; answers it and whether it was created.
    fn put_topic(
        &self,
        at: TopicRef,
        spec: TopicSpec,
        now: Timestamp,
    ) -> impl Future<Output = Result<(Topic, bool), StoreError>> + Send;

    /// Every topic of `tenant` (`None`: the admin's), in name order, with
    /// its subscription count.
    fn topics(
        &self,
        tenant: Option<String>,
    ) -> impl Future<Output = Result<Vec<Topic>, StoreError>> + Send;

    /// The topic `at`, or [`StoreError::NotFound`].
    fn topic(&self, at: TopicRef) -> impl Future<Output = Result<Topic, StoreError>> + Send;

    /// Deletes the topic `at` with its events (their tasks stay);
    /// [`StoreError::NotEmpty`] while it has subscriptions,
    /// [`StoreError::NotFound`] when there is none.
    fn delete_topic(&self, at: TopicRef) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Stores a new subscription `id` on the topic `at`, or
    /// [`StoreError::NotFound`] when there is no such topic; a topic at
    /// [`crate::topic::MAX_SUBSCRIPTIONS`] is [`StoreError::NotEmpty`].
    fn create_subscription(
        &self,
        at: TopicRef,
        id: String,
        spec: SubscriptionSpec,
        now: Timestamp,
    ) -> impl Future<Output = Result<Subscription, StoreError>> + Send;

    /// Applies `update` to the subscription `id` of the topic `at`
    /// ([`Subscription::updated`]), or [`StoreError::NotFound`].
    fn update_subscription(
        &self,
        at: TopicRef,
        id: String,
        update: SubscriptionUpdate,
        now: Timestamp,
    ) -> impl Future<Output = Result<Subscription, StoreError>> + Send;

    /// Deletes the subscription `id` of the topic `at` (its tasks stay),
    /// or [`StoreError::NotFound`].
    fn delete_subscription(
        &self,
        at: TopicRef,
        id: String,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Every subscription of the topic `at`, oldest first, or
    /// [`StoreError::NotFound`] when there is no such topic.
    fn subscriptions(
        &self,
        at: TopicRef,
    ) -> impl Future<Output = Result<Vec<Subscription>, StoreError>> + Send;

    /// The signing secrets of every subscription (of every tenant) that has
    /// some, by subscription id: what the worker signs a topic task's call
    /// with ([`crate::outbound::outbound_for`]).
    fn subscription_secrets(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, SigningSecrets)>, StoreError>> + Send;

    /// Records, in one transaction, that a try of a task of the
    /// subscription `id` (any tenant's) ended at `now`, `ok` or not
    /// ([`Subscription::after_try`]). When that disables it, its pending
    /// tasks are canceled with the error [`crate::topic::DISABLED_REASON`]
    /// and the notice to its topic's `callback_url` is submitted
    /// ([`crate::topic::health::disabled_notice`]). Answers what changed;
    /// [`StoreError::NotFound`] for a subscription deleted since.
    fn subscription_try_ended(
        &self,
        id: String,
        ok: bool,
        now: Timestamp,
    ) -> impl Future<Output = Result<crate::topic::health::HealthChange, StoreError>> + Send;

    /// Publishes `event` as `id` in one transaction: one task per
    /// subscription that [`Subscription::takes`] it
    /// ([`NewEvent::task_for`]), and the event with its deliveries. The
    /// same key again answers the stored event (`created == false`) when
    /// [`NewEvent::differing_fields`] is empty, else
    /// [`StoreError::IdempotencyConflict`]. Any task refused (its key taken
    /// by other work, the tenant's `max_pending` reached, the key gone)
    /// refuses the whole event: nothing is written. No such topic:
    /// [`StoreError::NotFound`].
    fn publish(
        &self,
        event: NewEvent,
        id: String,
        now: Timestamp,
    ) -> impl Future<Output = Result<Published, StoreError>> + Send;

    /// The event `id` of the topic `at` with its deliveries, or
    /// [`StoreError::NotFound`].
    fn event(
        &self,
        at: TopicRef,
        id: String,
    ) -> impl Future<Output = Result<Event, StoreError>> + Send;

    /// Replays to the subscription `id` of the topic `at` every event
    /// created at or after `since` that its event types match, oldest
    /// first, at most [`crate::topic::MAX_REPLAY`]: one new task each
    /// ([`Event::replay_task`], its n one more than the event's earlier
    /// replays to it), in one transaction. Answers the new deliveries.
    fn replay(
        &self,
        at: TopicRef,
        id: String,
        since: Timestamp,
        now: Timestamp,
    ) -> impl Future<Output = Result<Vec<Delivery>, StoreError>> + Send;
}
