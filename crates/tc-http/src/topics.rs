//! The `/topics` routes: a tenant's topics and their
//! subscriptions, publishing an event to every matching subscription in one
//! transaction, reading an event with its deliveries, replays. A tenant's
//! key sees its own topics only (an admin's request, the admin's own);
//! another's topic is as unknown as one that never was. Subscription
//! secrets are write-only: a view shows how many there are.

use http::StatusCode;
use serde::Serialize;
use tc_model::store::{StoreError, TaskStore};
use tc_model::topic::event::Event;
use tc_model::topic::{Delivery, Subscription, Topic, TopicRef};
use tc_model::view::HeadersView;

use crate::app::App;
use crate::auth::Caller;
use crate::dto::rfc3339;
use crate::error::{About, ApiError};
use crate::reply::{Answer, json};
use crate::topic_body::{parse_event, parse_patch, parse_replay, parse_subscription, parse_topic};
use crate::worker_port::Control;

/// A topic as the API shows it.
#[derive(Debug, Serialize)]
pub(crate) struct TopicView<'a> {
    name: &'a str,
    description: &'a str,
    callback_url: Option<&'a str>,
    disable_after_s: u64,
    subscriptions: u64,
    created_at: String,
    updated_at: String,
}

impl<'a> TopicView<'a> {
    pub(crate) fn new(t: &'a Topic) -> Self {
        TopicView {
            name: &t.at.name,
            description: &t.spec.description,
            callback_url: t.spec.callback_url.as_deref(),
            disable_after_s: t.spec.disable_after.as_secs(),
            subscriptions: t.subscriptions,
            created_at: rfc3339(t.created_at),
            updated_at: rfc3339(t.updated_at),
        }
    }
}

/// A subscription as the API shows it: its secrets counted, never shown.
#[derive(Debug, Serialize)]
pub(crate) struct SubscriptionView<'a> {
    id: &'a str,
    topic: &'a str,
    url: &'a str,
    event_types: Option<&'a [String]>,
    headers: HeadersView<'a>,
    signing_secrets: usize,
    enabled: bool,
    failing_since: Option<String>,
    disabled_reason: Option<&'a str>,
    created_at: String,
    updated_at: String,
}

impl<'a> SubscriptionView<'a> {
    pub(crate) fn new(s: &'a Subscription) -> Self {
        SubscriptionView {
            id: &s.id,
            topic: &s.topic.name,
            url: &s.spec.url,
            event_types: s.spec.event_types.list(),
            headers: HeadersView::new(&s.spec.headers),
            signing_secrets: s.spec.signing_secrets.len(),
            enabled: s.spec.enabled,
            failing_since: s.failing_since.map(rfc3339),
            disabled_reason: s.disabled_reason.as_deref(),
            created_at: rfc3339(s.created_at),
            updated_at: rfc3339(s.updated_at),
        }
    }
}

/// One task an event made.
#[derive(Debug, Serialize)]
pub(crate) struct DeliveryView<'a> {
    subscription: &'a str,
    task_id: String,
    state: &'static str,
}

impl<'a> DeliveryView<'a> {
    fn new(d: &'a Delivery) -> Self {
        DeliveryView {
            subscription: &d.subscription,
            task_id: d.task_id.to_string(),
            state: d.state.as_str(),
        }
    }
}

/// An event as the API shows it.
#[derive(Debug, Serialize)]
pub(crate) struct EventView<'a> {
    id: &'a str,
    event_type: &'a str,
    created_at: String,
    tasks: Vec<DeliveryView<'a>>,
}

impl<'a> EventView<'a> {
    pub(crate) fn new(e: &'a Event) -> Self {
        EventView {
            id: &e.id,
            event_type: &e.event_type,
            created_at: rfc3339(e.created_at),
            tasks: e.tasks.iter().map(DeliveryView::new).collect(),
        }
    }
}

/// The topic `name` of the caller: 404 for a name that is no topic's.
pub(crate) fn topic_at(caller: &Caller, segment: Option<&str>) -> Result<TopicRef, ApiError> {
    let name = segment.unwrap_or_default();
    TopicRef::new(caller.scope.tenant().map(str::to_owned), name)
        .map_err(|_| not_found(About::Topic(name)))
}

fn not_found(about: About<'_>) -> ApiError {
    ApiError::from_store(StoreError::NotFound, about)
}

/// A new id for a subscription or an event.
fn new_id<S: TaskStore, C: Control>(app: &App<S, C>) -> Result<String, ApiError> {
    let random = crate::tenants::random::<10>()?;
    Ok(tc_model::topic::new_id(app.control().now(), random))
}

/// `PUT /topics/{name}`: 201 when created, 200 when replaced.
pub(crate) async fn put<S: TaskStore, C: Control>(
    app: &App<S, C>,
    caller: &Caller,
    segment: Option<&str>,
    bytes: &[u8],
) -> Answer {
    let name = segment.unwrap_or_default();
    let at = TopicRef::new(caller.scope.tenant().map(str::to_owned), name)
        .map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
    let spec = parse_topic(bytes, app.config())?;
    let (topic, created) = app
        .store()
        .put_topic(at, spec, app.control().now())
        .await
        .map_err(|e| ApiError::from_store(e, About::Topic(name)))?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    json(status, &TopicView::new(&topic))
}

#[derive(Serialize)]
struct TopicList<'a> {
    topics: Vec<TopicView<'a>>,
}

/// `GET /topics`: the caller's topics, in name order.
pub(crate) async fn list<S: TaskStore, C: Control>(app: &App<S, C>, caller: &Caller) -> Answer {
    let tenant = caller.scope.tenant().map(str::to_owned);
    let topics = app.store().topics(tenant).await?;
    let topics = topics.iter().map(TopicView::new).collect();
    json(StatusCode::OK, &TopicList { topics })
}

/// `GET /topics/{name}`.
pub(crate) async fn get<S: TaskStore, C: Control>(app: &App<S, C>, at: TopicRef) -> Answer {
    let topic = app
        .store()
        .topic(at.clone())
        .await
        .map_err(|e| ApiError::from_store(e, About::Topic(&at.name)))?;
    json(StatusCode::OK, &TopicView::new(&topic))
}

/// `DELETE /topics/{name}`: 204, or 409 `topic_not_empty` while it has
/// subscriptions.
pub(crate) async fn delete<S: TaskStore, C: Control>(app: &App<S, C>, at: TopicRef) -> Answer {
    app.store()
        .delete_topic(at.clone())
        .await
        .map_err(|e| ApiError::from_store(e, About::Topic(&at.name)))?;
    crate::reply::no_content()
}

/// `POST /topics/{name}/subscriptions` -> 201 with its `id`.
pub(crate) async fn subscribe<S: TaskStore, C: Control>(
    app: &App<S, C>,
    at: TopicRef,
    bytes: &[u8],
) -> Answer {
    let spec = parse_subscription(bytes, app.config())?;
    let id = new_id(app)?;
    let sub = app
        .store()
        .create_subscription(at.clone(), id, spec, app.control().now())
        .await
        .map_err(|e| match e {
            // A full topic: the subscription's own refusal.
            StoreError::NotEmpty => ApiError::from_store(e, About::Subscription("")),
            e => ApiError::from_store(e, About::Topic(&at.name)),
        })?;
    // The worker reads subscriptions' secrets with the destinations'
    // settings: the next claim signs with the new ones.
    app.control().destinations_changed();
    json(StatusCode::CREATED, &SubscriptionView::new(&sub))
}

#[derive(Serialize)]
struct SubscriptionList<'a> {
    subscriptions: Vec<SubscriptionView<'a>>,
}

/// `GET /topics/{name}/subscriptions`, oldest first.
pub(crate) async fn subscriptions<S: TaskStore, C: Control>(
    app: &App<S, C>,
    at: TopicRef,
) -> Answer {
    let subs = app
        .store()
        .subscriptions(at.clone())
        .await
        .map_err(|e| ApiError::from_store(e, About::Topic(&at.name)))?;
    let subscriptions = subs.iter().map(SubscriptionView::new).collect();
    json(StatusCode::OK, &SubscriptionList { subscriptions })
}

/// `GET /topics/{name}/subscriptions/{id}`.
pub(crate) async fn subscription<S: TaskStore, C: Control>(
    app: &App<S, C>,
    at: TopicRef,
    id: &str,
) -> Answer {
    let subs = app
        .store()
        .subscriptions(at.clone())
        .await
        .map_err(|e| ApiError::from_store(e, About::Topic(&at.name)))?;
    let sub = subs
        .iter()
        .find(|s| s.id == id)
        .ok_or_else(|| not_found(About::Subscription(id)))?;
    json(StatusCode::OK, &SubscriptionView::new(sub))
}

/// `PATCH /topics/{name}/subscriptions/{id}`.
pub(crate) async fn patch<S: TaskStore, C: Control>(
    app: &App<S, C>,
    at: TopicRef,
    id: &str,
    bytes: &[u8],
) -> Answer {
    let update = parse_patch(bytes, app.config())?;
    let sub = app
        .store()
        .update_subscription(at, id.to_owned(), update, app.control().now())
        .await
        .map_err(|e| ApiError::from_store(e, About::Subscription(id)))?;
    app.control().destinations_changed();
    json(StatusCode::OK, &SubscriptionView::new(&sub))
}

/// `DELETE /topics/{name}/subscriptions/{id}` -> 204 (its tasks stay).
pub(crate) async fn unsubscribe<S: TaskStore, C: Control>(
    app: &App<S, C>,
    at: TopicRef,
    id: &str,
) -> Answer {
    app.store()
        .delete_subscription(at, id.to_owned())
        .await
        .map_err(|e| ApiError::from_store(e, About::Subscription(id)))?;
    crate::reply::no_content()
}

/// `POST /topics/{name}/events`: 201 with the event and its tasks, 200
/// with the same for a repeat, 409 for another payload under the key.
/// A tenant's event takes one token of its submit rate, and its tasks
/// count against its `max_pending`.
pub(crate) async fn publish<S: TaskStore, C: Control>(
    app: &App<S, C>,
    caller: &Caller,
    at: TopicRef,
    bytes: &[u8],
) -> Answer {
    let now = app.control().now();
    let new = parse_event(bytes, at.clone(), app.config(), now)?
        .with_quota(caller.settings.max_pending, caller.key_id.clone());
    crate::tasks::take_submit_token(app, caller)?;
    let id = new_id(app)?;
    let published = app
        .store()
        .publish(new, id, now)
        .await
        .map_err(|e| match e {
            StoreError::NotFound => not_found(About::Topic(&at.name)),
            StoreError::IdempotencyConflict { fields } => ApiError::IdempotencyConflict(format!(
                "idempotency_key: already used for an event (or one of its tasks' keys) \
                     with other work; differs in {}",
                fields.join(", ")
            )),
            e => crate::tasks::quota_refusal(app, caller, e),
        })?;
    let made = published.event.tasks.len();
    if published.created && made > 0 {
        app.control().task_submitted();
        let count = u64::try_from(made).unwrap_or(u64::MAX);
        app.ui()
            .activity
            .record(crate::ui::Event::Submitted, count, now);
        tracing::info!(event_id = %published.event.id, topic = %at.name, tasks = made, "event_published");
    }
    let status = if published.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    json(status, &EventView::new(&published.event))
}

/// `GET /topics/{name}/events/{id}`.
pub(crate) async fn event<S: TaskStore, C: Control>(
    app: &App<S, C>,
    at: TopicRef,
    id: &str,
) -> Answer {
    let event = app
        .store()
        .event(at, id.to_owned())
        .await
        .map_err(|e| ApiError::from_store(e, About::Event(id)))?;
    json(StatusCode::OK, &EventView::new(&event))
}

#[derive(Serialize)]
struct Replayed<'a> {
    tasks: Vec<DeliveryView<'a>>,
}

/// `POST /topics/{name}/subscriptions/{id}/replay` with `since`: 200 with
/// the new tasks.
pub(crate) async fn replay<S: TaskStore, C: Control>(
    app: &App<S, C>,
    caller: &Caller,
    at: TopicRef,
    id: &str,
    bytes: &[u8],
) -> Answer {
    let since = parse_replay(bytes)?;
    let now = app.control().now();
    let made = app
        .store()
        .replay(at, id.to_owned(), since, now)
        .await
        .map_err(|e| match e {
            StoreError::NotFound => not_found(About::Subscription(id)),
            e => crate::tasks::quota_refusal(app, caller, e),
        })?;
    if !made.is_empty() {
        app.control().task_submitted();
    }
    json(
        StatusCode::OK,
        &Replayed {
            tasks: made.iter().map(DeliveryView::new).collect(),
        },
    )
}
