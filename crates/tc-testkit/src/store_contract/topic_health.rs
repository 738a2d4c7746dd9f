//! Auto-disable: a subscription's calls that have all
//! failed for its topic's `disable_after` disable it, cancel its pending
//! tasks with the error `subscription_disabled` and submit the
//! `subscription.disabled` notice to the topic's `callback_url`; a success
//! clears its failing time; enabling it again forgets its failures.

use tc_model::State;
use tc_model::store::{ListQuery, StoreError, TaskStore};
use tc_model::topic::health::HealthChange;
use tc_model::topic::{SubscriptionUpdate, TopicRef, TopicSpec};

use super::Verdict;
use super::check::*;
use super::topics::{event, subscribe};
use tc_model::tenant::Scope;

/// Failures for longer than `disable_after_s` (60 s here) disable the
/// subscription in the write that records the last one; a success between
/// failures starts the time anew.
pub async fn a_subscription_failing_past_disable_after_is_disabled<S: TaskStore>(
    store: S,
) -> Verdict {
    let ops = TopicRef {
        tenant: None,
        name: "ops".to_owned(),
    };
    let spec = TopicSpec::new(String::new(), Some(URL_B.to_owned()), Some(60))
        .map_err(|e| e.to_string())?;
    store
        .put_topic(ops.clone(), spec, at(0))
        .await
        .step("put_topic")?;
    subscribe(&store, &ops, "s1", None, true).await?;
    let mut made = Vec::new();
    for key in ["k1", "k2"] {
        let new = event(&ops, "order.placed", "{}", key)?;
        let published = store
            .publish(new, format!("ev-{key}"), at(1))
            .await
            .step("publish")?;
        made.extend(published.event.tasks.iter().map(|d| d.task_id));
    }
    ensure_eq!(made.len(), 2, "tasks made");
    // (ok, at ms, change, failing since after)
    let steps = [
        (false, 1_000, HealthChange::Changed, Some(1_000)),
        (true, 2_000, HealthChange::Changed, None),
        (false, 3_000, HealthChange::Changed, Some(3_000)),
        (false, 62_999, HealthChange::None, Some(3_000)),
        (false, 63_000, HealthChange::Disabled, Some(3_000)),
    ];
    for (ok, ms, change, since) in steps {
        let got = store
            .subscription_try_ended("s1".to_owned(), ok, at(ms))
            .await
            .step("subscription_try_ended")?;
        ensure_eq!(got, change, "the change at {ms} ms");
        let subs = store
            .subscriptions(ops.clone())
            .await
            .step("subscriptions")?;
        ensure_eq!(
            subs[0].failing_since,
            since.map(at),
            "failing_since at {ms} ms"
        );
    }
    let subs = store
        .subscriptions(ops.clone())
        .await
        .step("subscriptions")?;
    ensure_eq!(
        (subs[0].spec.enabled, subs[0].disabled_reason.as_deref()),
        (false, Some("subscription_disabled")),
        "disabled"
    );
    for id in &made {
        let task = store.get(*id, Scope::Admin).await.step("get")?;
        ensure_eq!(
            (task.state, task.error.as_deref()),
            (State::Canceled, Some("subscription_disabled")),
            "a pending task of the subscription"
        );
    }
    let listed = store
        .list(ListQuery::default(), Scope::Admin)
        .await
        .step("list")?;
    let notices: Vec<_> = listed.tasks.iter().filter(|t| t.url == URL_B).collect();
    ensure_eq!(notices.len(), 1, "one notice to the callback_url");
    let notice = store
        .get(notices[0].id, Scope::Admin)
        .await
        .step("get notice")?;
    ensure_eq!(notice.state, State::Pending, "the notice is due");
    let body: serde_json::Value =
        serde_json::from_slice(&notice.body).map_err(|e| format!("notice body: {e}"))?;
    ensure_eq!(
        (
            body["type"].as_str(),
            body["topic"].as_str(),
            body["subscription"].as_str(),
            body["reason"].as_str()
        ),
        (
            Some("subscription.disabled"),
            Some("ops"),
            Some("s1"),
            Some("subscription_disabled")
        ),
        "the notice's body"
    );
    // Disabled already: more failures change nothing, and make no notice.
    let again = store
        .subscription_try_ended("s1".to_owned(), false, at(200_000))
        .await
        .step("again")?;
    ensure_eq!(again, HealthChange::None, "a failure after the disable");
    let gone = store
        .subscription_try_ended("nope".to_owned(), false, at(200_000))
        .await;
    ensure!(
        matches!(gone, Err(StoreError::NotFound)),
        "an unknown subscription: {gone:?}"
    );
    let update = SubscriptionUpdate {
        enabled: Some(true),
        ..SubscriptionUpdate::default()
    };
    let back = store
        .update_subscription(ops, "s1".to_owned(), update, at(300_000))
        .await
        .step("enable")?;
    ensure_eq!(
        (back.spec.enabled, back.failing_since, back.disabled_reason),
        (true, None, None),
        "enabled again"
    );
    Ok(())
}
