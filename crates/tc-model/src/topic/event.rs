//! Publishing: a [`NewEvent`] checked field by field, the task it makes for
//! each subscription that takes it ([`NewEvent::task_for`]), the stored
//! [`Event`], and the rule that says when a repeat of an event is the same
//! event ([`NewEvent::differing_fields`]).

use std::time::Duration;

use crate::setting::InvalidSetting;
use crate::topic::{Delivery, Subscription, TopicRef};
use crate::validation::Limits;
use crate::{FirstRun, Method, NewTask, Timestamp};

/// The longest event idempotency key, in bytes: room is left for the
/// `:{subscription id}:replay:{n}` its tasks' keys add.
pub const MAX_EVENT_KEY_BYTES: usize = 180;

/// The header every call of a topic's task carries: the event's id.
pub const WEBHOOK_ID: &str = "webhook-id";

/// The header every call of a topic's task carries: the event's type.
pub const EVENT_TYPE: &str = "event-type";

/// A valid event to publish on a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    topic: TopicRef,
    event_type: String,
    body: Vec<u8>,
    idempotency_key: String,
    first_run: FirstRun,
    max_attempts: u32,
    timeout: Duration,
    pending_limit: Option<u64>,
    key_id: Option<String>,
}

/// A field's refusal, as [`InvalidSetting`] words it.
fn bad(field: &'static str, message: String) -> InvalidSetting {
    InvalidSetting { field, message }
}

impl NewEvent {
    /// Checks every field and builds the event, or names the first field
    /// that is wrong.
    pub fn new(
        topic: TopicRef,
        event_type: String,
        body: Vec<u8>,
        idempotency_key: String,
        max_attempts: u32,
        timeout: Duration,
        limits: &Limits,
    ) -> Result<NewEvent, InvalidSetting> {
        crate::topic::check_event_type(&event_type)?;
        crate::new_task::check_key(&idempotency_key)
            .map_err(|e| bad("idempotency_key", strip(&e.to_string())))?;
        if idempotency_key.len() > MAX_EVENT_KEY_BYTES {
            return Err(bad(
                "idempotency_key",
                format!("must be at most {MAX_EVENT_KEY_BYTES} bytes for an event"),
            ));
        }
        if !(1..=Limits::MAX_ATTEMPTS).contains(&max_attempts) {
            return Err(bad(
                "max_attempts",
                format!(
                    "must be between 1 and {}, got {max_attempts}",
                    Limits::MAX_ATTEMPTS
                ),
            ));
        }
        if !(Limits::MIN_TIMEOUT..=Limits::MAX_TIMEOUT).contains(&timeout) {
            return Err(bad(
                "timeout_ms",
                format!(
                    "must be between 1 ms and 600000 ms, got {} ms",
                    timeout.as_millis()
                ),
            ));
        }
        if body.len() > limits.max_body_bytes {
            return Err(bad(
                "json",
                format!(
                    "{} bytes is over the limit of {} bytes",
                    body.len(),
                    limits.max_body_bytes
                ),
            ));
        }
        Ok(NewEvent {
            topic,
            event_type,
            body,
            idempotency_key,
            first_run: FirstRun::Now,
            max_attempts,
            timeout,
            pending_limit: None,
            key_id: None,
        })
    }

    /// The same event, its tasks first due as `first_run` says (a delay over
    /// [`FirstRun::MAX_AHEAD`] is refused).
    pub fn with_first_run(mut self, first_run: FirstRun) -> Result<NewEvent, InvalidSetting> {
        if let FirstRun::After(delay) = first_run
            && delay > FirstRun::MAX_AHEAD
        {
            return Err(bad(
                "delay_ms",
                format!("must be at most 365 days, got {} ms", delay.as_millis()),
            ));
        }
        self.first_run = first_run;
        Ok(self)
    }

    /// The same event published with the tenant's key `key_id` under its
    /// `max_pending` (each task counts, as a submit's does).
    pub fn with_quota(mut self, pending_limit: Option<u64>, key_id: Option<String>) -> NewEvent {
        self.pending_limit = pending_limit;
        self.key_id = key_id;
        self
    }

    /// The topic it is published on.
    pub fn topic(&self) -> &TopicRef {
        &self.topic
    }

    /// Its type.
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// Its JSON body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The publisher's key.
    pub fn idempotency_key(&self) -> &str {
        &self.idempotency_key
    }

    /// When its tasks first become due.
    pub fn first_run(&self) -> FirstRun {
        self.first_run
    }

    /// The most tries each task may use.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// Each try's timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The stored event this one makes as `id` at `now`, with no tasks yet.
    pub fn stored(&self, id: String, now: Timestamp) -> Event {
        Event {
            id,
            topic: self.topic.clone(),
            event_type: self.event_type.clone(),
            body: self.body.clone(),
            idempotency_key: self.idempotency_key.clone(),
            first_run: self.first_run,
            max_attempts: self.max_attempts,
            timeout: self.timeout,
            created_at: now,
            tasks: Vec::new(),
        }
    }

    /// The task the event `event_id` makes for `subscription` (one that
    /// [`Subscription::takes`] it): a POST of the event's body to the
    /// subscription's url with its headers, `webhook-id` (the event's id)
    /// and `event-type`, keyed `{idempotency_key}:{subscription id}`.
    pub fn task_for(&self, event_id: &str, subscription: &Subscription) -> NewTask {
        let key = format!("{}:{}", self.idempotency_key, subscription.id);
        let mut task = topic_task(subscription, event_id, &self.event_type, &self.body, key);
        task.max_attempts = self.max_attempts;
        task.timeout = self.timeout;
        task.first_run = self.first_run;
        task.pending_limit = self.pending_limit;
        task.key_id = self.key_id.clone();
        task
    }

    /// The fields, by their API names, in which this event differs from
    /// the stored one with its key (what a `409` names); empty: the same
    /// event. Bodies compare as JSON values.
    pub fn differing_fields(&self, stored: &Event) -> Vec<&'static str> {
        let mut fields = Vec::new();
        if self.event_type != stored.event_type {
            fields.push("event_type");
        }
        if !crate::new_task::same_json(&self.body, &stored.body) {
            fields.push("json");
        }
        if self.max_attempts != stored.max_attempts {
            fields.push("max_attempts");
        }
        if self.timeout != stored.timeout {
            fields.push("timeout_ms");
        }
        if self.first_run != stored.first_run {
            for first_run in [self.first_run, stored.first_run] {
                let name = match first_run {
                    FirstRun::Now => continue,
                    FirstRun::At(_) => "run_at",
                    FirstRun::After(_) => "delay_ms",
                };
                if !fields.contains(&name) {
                    fields.push(name);
                }
            }
        }
        fields
    }
}

/// A task of a topic's event: everything but its budget and first run.
fn topic_task(
    subscription: &Subscription,
    event_id: &str,
    event_type: &str,
    body: &[u8],
    key: String,
) -> NewTask {
    let headers = subscription
        .spec
        .headers
        .clone()
        .with_own(WEBHOOK_ID, event_id.to_owned())
        .with_own(EVENT_TYPE, event_type.to_owned());
    NewTask {
        url: subscription.spec.url.clone(),
        body: body.to_vec(),
        idempotency_key: key,
        max_attempts: 1,
        timeout: Limits::MAX_TIMEOUT,
        first_run: FirstRun::Now,
        method: Method::Post,
        headers,
        trace: None,
        callback: None,
        callback_of: None,
        tenant: subscription.topic.tenant.clone(),
        pending_limit: None,
        key_id: None,
        topic: Some(crate::topic::TopicLink {
            topic: subscription.topic.name.clone(),
            event_id: event_id.to_owned(),
            subscription: subscription.id.clone(),
        }),
        priority: 0,
        flow_key: None,
    }
}

fn strip(message: &str) -> String {
    message
        .strip_prefix("idempotency_key: ")
        .unwrap_or(message)
        .to_owned()
}

/// A stored event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Its id: `webhook-id` on each of its calls.
    pub id: String,
    /// Its topic.
    pub topic: TopicRef,
    /// Its type.
    pub event_type: String,
    /// Its JSON body.
    pub body: Vec<u8>,
    /// The publisher's key.
    pub idempotency_key: String,
    /// When its tasks were first due.
    pub first_run: FirstRun,
    /// Each task's budget of tries.
    pub max_attempts: u32,
    /// Each try's timeout.
    pub timeout: Duration,
    /// When it was published.
    pub created_at: Timestamp,
    /// The tasks it made (replays included), in the order made; a task
    /// deleted since is left out.
    pub tasks: Vec<Delivery>,
}

impl Event {
    /// The `n`-th replay of this event to `subscription` (n from 1): a
    /// task due at once, keyed `{idempotency_key}:{subscription id}:replay:{n}`.
    pub fn replay_task(&self, subscription: &Subscription, n: u32) -> NewTask {
        let key = format!("{}:{}:replay:{n}", self.idempotency_key, subscription.id);
        let mut task = topic_task(subscription, &self.id, &self.event_type, &self.body, key);
        task.max_attempts = self.max_attempts;
        task.timeout = self.timeout;
        task
    }
}

/// What a publish answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The event, new or the one that already had the key, with its tasks.
    pub event: Event,
    /// `true` if this call created it.
    pub created: bool,
}
