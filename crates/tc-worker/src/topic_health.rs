//! Auto-disable's input: when a try of a topic's task
//! ends, the worker tells the store whether it succeeded, for that task's
//! subscription ([`Topics::subscription_try_ended`](tc_model::store::Topics::subscription_try_ended)); the store decides,
//! in the same transaction, whether the subscription's calls have all
//! failed for long enough to disable it.

use tc_model::State;
use tc_model::store::{StoreError, TaskStore};
use tc_model::topic::TopicLink;
use tc_model::topic::health::HealthChange;

use crate::shared::Shared;

/// Records that a try of the topic task `link` ended in `state` (success:
/// healthy; a retry or a failure: failing). A store that fails here is
/// logged, not retried: the next try records health again.
pub(crate) async fn try_ended<S: TaskStore>(
    shared: &Shared<S>,
    link: &TopicLink,
    state: State,
    now: tc_model::Timestamp,
) {
    let ok = state == State::Success;
    match shared
        .store
        .subscription_try_ended(link.subscription.clone(), ok, now)
        .await
    {
        Ok(HealthChange::Disabled) => {
            tracing::warn!(
                topic = %link.topic,
                subscription = %link.subscription,
                reason = tc_model::topic::DISABLED_REASON,
                "subscription_disabled"
            );
            // Its pending tasks were canceled and a notice may be due.
            shared.wake.notify_one();
        }
        Ok(_) | Err(StoreError::NotFound) => {}
        Err(e) => tracing::error!(
            subscription = %link.subscription,
            error = %e,
            "subscription_health_failed"
        ),
    }
}
