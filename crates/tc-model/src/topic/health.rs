//! Auto-disable: a subscription's health after each try
//! of one of its tasks ([`Subscription::after_try`]), and the operational
//! event a disable sends to its topic's `callback_url`
//! ([`disabled_notice`]). Every store adapter applies both in the one
//! transaction that records a try's end for a subscription
//! ([`crate::store::Topics::subscription_try_ended`]).

use crate::topic::event::EVENT_TYPE;
use crate::topic::{DISABLED_REASON, Subscription, Topic};
use crate::{FirstRun, Headers, Method, NewTask, Timestamp};

/// The operational event's type.
pub const SUBSCRIPTION_DISABLED: &str = "subscription.disabled";

/// The tries a notice may use (the store knows no server defaults).
pub const NOTICE_MAX_ATTEMPTS: u32 = 10;

/// Each try's timeout for a notice.
pub const NOTICE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// What a try's end did to its subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthChange {
    /// Nothing to write: healthy and still so, or failing since before.
    None,
    /// `failing_since` set or cleared.
    Changed,
    /// Its calls have all failed for the topic's `disable_after`: it is
    /// disabled now, and its pending tasks must be canceled.
    Disabled,
}

impl Subscription {
    /// Records that a try of one of its tasks ended at `now`: `ok` (a 2xx)
    /// clears `failing_since`; a failure (a retry to come, or the last)
    /// sets it when it is not set. A subscription still enabled whose calls
    /// have all failed for `disable_after` (its topic's) is disabled with
    /// [`DISABLED_REASON`].
    pub fn after_try(
        &mut self,
        ok: bool,
        now: Timestamp,
        disable_after: std::time::Duration,
    ) -> HealthChange {
        if ok {
            if self.failing_since.take().is_some() {
                self.updated_at = now;
                return HealthChange::Changed;
            }
            return HealthChange::None;
        }
        let Some(since) = self.failing_since else {
            self.failing_since = Some(now);
            self.updated_at = now;
            return HealthChange::Changed;
        };
        let failing_for = now.as_millis().saturating_sub(since.as_millis());
        let limit = i64::try_from(disable_after.as_millis()).unwrap_or(i64::MAX);
        if self.spec.enabled && failing_for >= limit {
            self.spec.enabled = false;
            self.disabled_reason = Some(DISABLED_REASON.to_owned());
            self.updated_at = now;
            return HealthChange::Disabled;
        }
        HealthChange::None
    }
}

/// The task that tells `topic`'s `callback_url` (when it has one) that
/// `subscription` was disabled at `now`: a POST of
/// `{"type", "topic", "subscription", "reason", "at"}` with the header
/// `event-type: subscription.disabled`, of the topic's tenant, as any task
/// (its destination's flow control, retries and signing), keyed by the
/// subscription and the time.
pub fn disabled_notice(
    topic: &Topic,
    subscription: &Subscription,
    now: Timestamp,
) -> Option<NewTask> {
    let url = topic.spec.callback_url.clone()?;
    let body = serde_json::json!({
        "type": SUBSCRIPTION_DISABLED,
        "topic": topic.at.name,
        "subscription": subscription.id,
        "reason": DISABLED_REASON,
        "at": crate::view::rfc3339(now),
    });
    Some(NewTask {
        url,
        body: body.to_string().into_bytes(),
        idempotency_key: format!(
            "{SUBSCRIPTION_DISABLED}:{}:{}",
            subscription.id,
            now.as_millis()
        ),
        max_attempts: NOTICE_MAX_ATTEMPTS,
        timeout: NOTICE_TIMEOUT,
        first_run: FirstRun::Now,
        method: Method::Post,
        headers: Headers::default().with_own(EVENT_TYPE, SUBSCRIPTION_DISABLED.to_owned()),
        trace: None,
        callback: None,
        callback_of: None,
        tenant: topic.at.tenant.clone(),
        pending_limit: None,
        key_id: None,
        topic: None,
        priority: 0,
        flow_key: None,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::topic::{EventTypes, SubscriptionSpec, TopicRef, TopicSpec};

    fn sub() -> Subscription {
        let at = TopicRef {
            tenant: Some("t".to_owned()),
            name: "orders".to_owned(),
        };
        let spec =
            SubscriptionSpec::new("http://127.0.0.1:1/h".to_owned(), EventTypes::all()).unwrap();
        Subscription::created("s1".to_owned(), at, spec, Timestamp::from_millis(0))
    }

    #[test]
    fn calls_that_all_fail_for_the_window_disable_and_a_success_clears() {
        let window = Duration::from_secs(60);
        let at = |s: i64| Timestamp::from_millis(s * 1000);
        let mut s = sub();
        // (ok, at second, change, failing_since after, enabled after)
        let steps = [
            (true, 1, HealthChange::None, None, true),
            (false, 10, HealthChange::Changed, Some(10), true),
            (false, 69, HealthChange::None, Some(10), true),
            (true, 70, HealthChange::Changed, None, true),
            (false, 100, HealthChange::Changed, Some(100), true),
            (false, 160, HealthChange::Disabled, Some(100), false),
            (false, 200, HealthChange::None, Some(100), false),
        ];
        for (ok, t, change, since, enabled) in steps {
            assert_eq!(s.after_try(ok, at(t), window), change, "at {t}");
            assert_eq!(s.failing_since, since.map(at), "at {t}");
            assert_eq!(s.spec.enabled, enabled, "at {t}");
        }
        assert_eq!(s.disabled_reason.as_deref(), Some(DISABLED_REASON));
    }

    #[test]
    fn the_notice_goes_to_the_callback_url_only() {
        let s = sub();
        let mut topic = Topic {
            at: s.topic.clone(),
            spec: TopicSpec::default(),
            subscriptions: 1,
            created_at: Timestamp::from_millis(0),
            updated_at: Timestamp::from_millis(0),
        };
        assert!(disabled_notice(&topic, &s, Timestamp::from_millis(5)).is_none());
        topic.spec.callback_url = Some("http://127.0.0.1:1/ops".to_owned());
        let task = disabled_notice(&topic, &s, Timestamp::from_millis(5)).unwrap();
        assert_eq!(task.url, "http://127.0.0.1:1/ops");
        assert_eq!(task.tenant.as_deref(), Some("t"));
        let body: serde_json::Value = serde_json::from_slice(&task.body).unwrap();
        assert_eq!(body["type"], "subscription.disabled");
        assert_eq!(body["topic"], "orders");
        assert_eq!(body["subscription"], "s1");
        assert_eq!(body["reason"], "subscription_disabled");
        assert_eq!(body["at"], "1970-01-01T00:00:00.005Z");
    }
}
