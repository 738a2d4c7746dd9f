//! Topics: one event to every subscriber. A [`Topic`] is a
//! tenant's named channel; its [`Subscription`]s are receivers, each with
//! its url, the [`EventTypes`] it wants, its own headers and signing
//! secrets. Publishing ([`event::NewEvent`]) makes one task per enabled,
//! matching subscription; the rules for which, and what each task is, live
//! here once, and every store adapter applies them in its own transaction.

pub mod event;
pub mod health;

use std::time::Duration;

use crate::headers::Headers;
use crate::setting::InvalidSetting;
use crate::signing::SigningSecrets;
use crate::{Task, TaskId, Timestamp};

/// How long a subscription's calls may all fail before it is disabled,
/// unless its topic says otherwise: 5 days.
pub const DEFAULT_DISABLE_AFTER: Duration = Duration::from_secs(5 * 24 * 3600);

/// The longest `disable_after_s` a topic may set: 365 days.
pub const MAX_DISABLE_AFTER: Duration = Duration::from_secs(365 * 24 * 3600);

/// The longest topic description, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 1024;

/// The most event types or patterns one subscription lists.
pub const MAX_EVENT_TYPES: usize = 32;

/// The longest event type or pattern, in bytes.
pub const MAX_EVENT_TYPE_BYTES: usize = 128;

/// The most subscriptions one topic holds (one event makes at most this
/// many tasks, in one transaction).
pub const MAX_SUBSCRIPTIONS: usize = 1000;

/// The most events one replay sends again.
pub const MAX_REPLAY: usize = 1000;

/// Where a topic is: its owner (`None`: the admin's) and its name. A
/// tenant's topics are its own: two tenants may each have a topic `orders`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicRef {
    /// The tenant that owns it; `None`: the admin's.
    pub tenant: Option<String>,
    /// Its name (the tenant name rule).
    pub name: String,
}

impl TopicRef {
    /// The topic `name` of `tenant`, its name checked
    /// ([`crate::tenant::check_name`]).
    pub fn new(tenant: Option<String>, name: &str) -> Result<TopicRef, InvalidSetting> {
        crate::tenant::check_name(name)?;
        Ok(TopicRef {
            tenant,
            name: name.to_owned(),
        })
    }
}

/// What a `PUT /topics/{name}` sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    /// Free text for operators.
    pub description: String,
    /// Where operational events (`subscription.disabled`) are POSTed.
    pub callback_url: Option<String>,
    /// How long a subscription's calls may all fail before it is disabled.
    pub disable_after: Duration,
}

impl Default for TopicSpec {
    fn default() -> Self {
        TopicSpec {
            description: String::new(),
            callback_url: None,
            disable_after: DEFAULT_DISABLE_AFTER,
        }
    }
}

impl TopicSpec {
    /// Checks every field, or names the first that is wrong.
    pub fn new(
        description: String,
        callback_url: Option<String>,
        disable_after_s: Option<u64>,
    ) -> Result<TopicSpec, InvalidSetting> {
        if description.len() > MAX_DESCRIPTION_BYTES {
            return Err(InvalidSetting {
                field: "description",
                message: format!("must be at most {MAX_DESCRIPTION_BYTES} bytes"),
            });
        }
        if let Some(url) = &callback_url {
            crate::validation::check_url(url).map_err(|e| InvalidSetting {
                field: "callback_url",
                message: url_message(&e),
            })?;
        }
        let disable_after = match disable_after_s {
            None => DEFAULT_DISABLE_AFTER,
            Some(s) if (1..=MAX_DISABLE_AFTER.as_secs()).contains(&s) => Duration::from_secs(s),
            Some(s) => {
                return Err(InvalidSetting {
                    field: "disable_after_s",
                    message: format!(
                        "must be between 1 and {} (365 days), got {s}",
                        MAX_DISABLE_AFTER.as_secs()
                    ),
                });
            }
        };
        Ok(TopicSpec {
            description,
            callback_url,
            disable_after,
        })
    }
}

/// The url rule's message without its own field name (the caller names
/// the field it checked).
fn url_message(e: &crate::ValidationError) -> String {
    let text = e.to_string();
    text.strip_prefix("url: ").unwrap_or(&text).to_owned()
}

/// A stored topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topic {
    /// Its owner and name.
    pub at: TopicRef,
    /// Its settings.
    pub spec: TopicSpec,
    /// How many subscriptions it has.
    pub subscriptions: u64,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// Which event types a subscription receives: every one, or those a name
/// or a pattern (`invoice.*`, `*`) of its list matches.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EventTypes(Option<Vec<String>>);

impl EventTypes {
    /// Every event type.
    pub fn all() -> EventTypes {
        EventTypes(None)
    }

    /// The list given (`None`: every event), each entry checked: an event
    /// type ([`check_event_type`]), or one followed by `.*`, or `*` alone.
    pub fn parse(list: Option<Vec<String>>) -> Result<EventTypes, InvalidSetting> {
        let Some(list) = list else {
            return Ok(EventTypes(None));
        };
        let bad = |message: String| InvalidSetting {
            field: "event_types",
            message,
        };
        if list.is_empty() || list.len() > MAX_EVENT_TYPES {
            return Err(bad(format!(
                "must list 1 to {MAX_EVENT_TYPES} event types or patterns (leave it out for every event)"
            )));
        }
        for entry in &list {
            let name = entry.strip_suffix(".*").unwrap_or(entry);
            if entry != "*" && check_event_type(name).is_err() {
                return Err(bad(format!(
                    "{entry:?} is neither an event type (a-z, 0-9, '_', '-', '.'-separated, \
                     at most {MAX_EVENT_TYPE_BYTES} bytes) nor a pattern such as `invoice.*`"
                )));
            }
        }
        Ok(EventTypes(Some(list)))
    }

    /// Whether an event of `event_type` is one of these.
    pub fn matches(&self, event_type: &str) -> bool {
        let Some(list) = &self.0 else {
            return true;
        };
        list.iter().any(|entry| {
            entry == "*"
                || entry == event_type
                || entry.strip_suffix('*').is_some_and(|prefix| {
                    event_type.starts_with(prefix) && event_type.len() > prefix.len()
                })
        })
    }

    /// The list, `None` for every event.
    pub fn list(&self) -> Option<&[String]> {
        self.0.as_deref()
    }

    /// The text stores keep: the entries separated by a space (an entry has
    /// none); `None` for every event.
    pub fn to_stored(&self) -> Option<String> {
        self.0.as_ref().map(|l| l.join(" "))
    }

    /// The types [`EventTypes::to_stored`] wrote.
    pub fn from_stored(text: Option<&str>) -> Result<EventTypes, InvalidSetting> {
        EventTypes::parse(text.map(|t| t.split(' ').map(str::to_owned).collect()))
    }
}

/// Whether `name` is an event type: dot-separated words of `a-z`, `0-9`,
/// `_` and `-`, at most [`MAX_EVENT_TYPE_BYTES`] bytes (`invoice.paid`).
pub fn check_event_type(name: &str) -> Result<(), InvalidSetting> {
    let word_ok = |w: &str| {
        !w.is_empty()
            && w.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    };
    if name.len() <= MAX_EVENT_TYPE_BYTES && name.split('.').all(word_ok) {
        Ok(())
    } else {
        Err(InvalidSetting {
            field: "event_type",
            message: format!(
                "must be dot-separated words of a-z, 0-9, '_' and '-', \
                 at most {MAX_EVENT_TYPE_BYTES} bytes (such as invoice.paid)"
            ),
        })
    }
}

/// What a subscription is: where its calls go and which events it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionSpec {
    /// Where each event is POSTed.
    pub url: String,
    /// Which events it receives.
    pub event_types: EventTypes,
    /// Headers sent with each of its calls.
    pub headers: Headers,
    /// Its calls are signed with these (write-only: never shown).
    pub signing_secrets: SigningSecrets,
    /// Whether events make tasks for it.
    pub enabled: bool,
}

impl SubscriptionSpec {
    /// A subscription to `url` (checked by the url rule) for `event_types`,
    /// enabled, with no headers or secrets.
    pub fn new(url: String, event_types: EventTypes) -> Result<SubscriptionSpec, InvalidSetting> {
        crate::validation::check_url(&url).map_err(|e| InvalidSetting {
            field: "url",
            message: url_message(&e),
        })?;
        Ok(SubscriptionSpec {
            url,
            event_types,
            headers: Headers::default(),
            signing_secrets: SigningSecrets::default(),
            enabled: true,
        })
    }
}

/// A `PATCH` of a subscription: each field given replaces the stored one.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SubscriptionUpdate {
    /// A new url (already checked by the url rule).
    pub url: Option<String>,
    /// New event types.
    pub event_types: Option<EventTypes>,
    /// New headers.
    pub headers: Option<Headers>,
    /// New signing secrets.
    pub signing_secrets: Option<SigningSecrets>,
    /// Enabled or disabled; enabling clears the failure record.
    pub enabled: Option<bool>,
}

/// A stored subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// Its id (a UUID v7, as [`new_id`] writes it).
    pub id: String,
    /// Its topic.
    pub topic: TopicRef,
    /// What it is.
    pub spec: SubscriptionSpec,
    /// When its calls began to fail with none succeeding since; `None`
    /// while healthy.
    pub failing_since: Option<Timestamp>,
    /// Why it was disabled by the server (`subscription_disabled`), if it
    /// was; an operator's disable leaves it `None`.
    pub disabled_reason: Option<String>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

impl Subscription {
    /// A new subscription `id` on `topic` at `now`.
    pub fn created(id: String, topic: TopicRef, spec: SubscriptionSpec, now: Timestamp) -> Self {
        Subscription {
            id,
            topic,
            spec,
            failing_since: None,
            disabled_reason: None,
            created_at: now,
            updated_at: now,
        }
    }

    /// This subscription with `update` applied at `now`. Enabling it again
    /// forgets its failures (a receiver back must fail anew to be
    /// disabled again).
    pub fn updated(mut self, update: SubscriptionUpdate, now: Timestamp) -> Subscription {
        if let Some(url) = update.url {
            self.spec.url = url;
        }
        if let Some(types) = update.event_types {
            self.spec.event_types = types;
        }
        if let Some(headers) = update.headers {
            self.spec.headers = headers;
        }
        if let Some(secrets) = update.signing_secrets {
            self.spec.signing_secrets = secrets;
        }
        if let Some(enabled) = update.enabled {
            if enabled {
                self.failing_since = None;
                self.disabled_reason = None;
            }
            self.spec.enabled = enabled;
        }
        self.updated_at = now;
        self
    }

    /// Whether an event of `event_type` makes a task for it now.
    pub fn takes(&self, event_type: &str) -> bool {
        self.spec.enabled && self.spec.event_types.matches(event_type)
    }
}

/// Why the server disabled a subscription, and the reason its pending
/// tasks are canceled with.
pub const DISABLED_REASON: &str = "subscription_disabled";

/// A new id for a subscription or an event made at `now`: a UUID v7 with
/// the caller's random bits, hyphenated (this crate reads no entropy).
pub fn new_id(now: Timestamp, random: [u8; 10]) -> String {
    TaskId::new(now, random).to_string()
}

/// What ties a task to the event that made it: shown in its view and
/// filtered on (`topic`, `event_id`, `subscription`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicLink {
    /// The topic's name (the task's tenant is the topic's).
    pub topic: String,
    /// The event's id.
    pub event_id: String,
    /// The subscription's id.
    pub subscription: String,
}

/// One task an event made: for which subscription, which task, and the
/// task's state now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The subscription's id.
    pub subscription: String,
    /// The task.
    pub task_id: TaskId,
    /// Its state as stored now.
    pub state: crate::State,
}

impl Delivery {
    /// The delivery of `task` for `subscription`.
    pub fn of(subscription: &str, task: &Task) -> Delivery {
        Delivery {
            subscription: subscription.to_owned(),
            task_id: task.id,
            state: task.state,
        }
    }
}

#[cfg(test)]
mod tests;
