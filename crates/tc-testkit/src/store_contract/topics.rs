//! Topics: topics and subscriptions kept field by field and per
//! tenant, a publish that makes one task per matching enabled subscription
//! in one transaction (all or nothing), the same event again answering the
//! same tasks, and replays keyed `…:replay:{n}`.

use std::time::Duration;

use tc_model::signing::SigningSecrets;
use tc_model::store::{ListQuery, StoreError, TaskFilter, TaskStore};
use tc_model::topic::event::{NewEvent, WEBHOOK_ID};
use tc_model::topic::{
    EventTypes, Subscription, SubscriptionSpec, SubscriptionUpdate, TopicLink, TopicRef, TopicSpec,
};
use tc_model::{Headers, Limits, State};

use super::Verdict;
use super::check::*;
use tc_model::tenant::Scope;

fn topic_at(tenant: Option<&str>, name: &str) -> TopicRef {
    TopicRef {
        tenant: tenant.map(str::to_owned),
        name: name.to_owned(),
    }
}

/// A subscription spec with every field away from its default.
fn full_spec(types: Option<&[&str]>, enabled: bool) -> Result<SubscriptionSpec, String> {
    let types = types.map(|l| l.iter().map(|s| (*s).to_owned()).collect());
    let types = EventTypes::parse(types).map_err(|e| e.to_string())?;
    let mut spec = SubscriptionSpec::new(URL.to_owned(), types).map_err(|e| e.to_string())?;
    spec.headers =
        Headers::parse([("x-team".to_owned(), "billing".to_owned())]).map_err(|e| e.to_string())?;
    spec.signing_secrets = SigningSecrets::parse(&["whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"])?;
    spec.enabled = enabled;
    Ok(spec)
}

pub(super) fn event(
    at: &TopicRef,
    event_type: &str,
    json: &str,
    key: &str,
) -> Result<NewEvent, String> {
    NewEvent::new(
        at.clone(),
        event_type.to_owned(),
        json.as_bytes().to_vec(),
        key.to_owned(),
        3,
        Duration::from_secs(5),
        &Limits::default(),
    )
    .map_err(|e| e.to_string())
}

pub(super) async fn subscribe<S: TaskStore>(
    store: &S,
    at: &TopicRef,
    id: &str,
    types: Option<&[&str]>,
    enabled: bool,
) -> Result<Subscription, String> {
    store
        .create_subscription(
            at.clone(),
            id.to_owned(),
            full_spec(types, enabled)?,
            at_ms(0),
        )
        .await
        .step("create_subscription")
}

fn at_ms(ms: i64) -> tc_model::Timestamp {
    at(ms)
}

/// A topic is created once and then replaced; read back by name and in its
/// tenant's list only; a subscription reads back field by field (its
/// secrets too), is changed by a patch, and deleted; a topic with
/// subscriptions cannot be deleted, one without can, with its name free.
pub async fn topics_and_subscriptions_are_kept_field_by_field<S: TaskStore>(store: S) -> Verdict {
    let orders = topic_at(Some("acme"), "orders");
    let spec = TopicSpec::new("Orders".into(), Some(URL.to_owned()), Some(60))
        .map_err(|e| e.to_string())?;
    let (made, created) = store
        .put_topic(orders.clone(), spec.clone(), at(0))
        .await
        .step("put")?;
    ensure!(created, "the first put did not create");
    ensure_eq!(
        (made.at.clone(), made.spec.clone(), made.subscriptions),
        (orders.clone(), spec, 0),
        "created"
    );
    let again = TopicSpec::new("Orders v2".into(), None, None).map_err(|e| e.to_string())?;
    let (replaced, created) = store
        .put_topic(orders.clone(), again.clone(), at(5))
        .await
        .step("put again")?;
    ensure!(!created, "a second put created");
    ensure_eq!(
        (
            replaced.spec.clone(),
            replaced.created_at,
            replaced.updated_at
        ),
        (again, at(0), at(5)),
        "replaced"
    );
    let admin = store.topics(None).await.step("admin's topics")?;
    ensure!(
        admin.is_empty(),
        "the admin sees a tenant's topic: {admin:?}"
    );
    let other = store.topic(topic_at(Some("other"), "orders")).await;
    ensure_eq!(other, Err(StoreError::NotFound), "another tenant's topic");
    let sub = subscribe(&store, &orders, "s1", Some(&["invoice.*"]), false).await?;
    let listed = store
        .subscriptions(orders.clone())
        .await
        .step("subscriptions")?;
    ensure_eq!(listed, vec![sub.clone()], "listed");
    ensure_eq!(
        store
            .topic(orders.clone())
            .await
            .step("topic")?
            .subscriptions,
        1,
        "count"
    );
    let update = SubscriptionUpdate {
        enabled: Some(true),
        event_types: Some(EventTypes::all()),
        ..SubscriptionUpdate::default()
    };
    let changed = store
        .update_subscription(orders.clone(), "s1".into(), update.clone(), at(9))
        .await
        .step("update")?;
    ensure_eq!(changed, sub.updated(update, at(9)), "patched");
    ensure_eq!(
        store.delete_topic(orders.clone()).await,
        Err(StoreError::NotEmpty),
        "delete with a subscription"
    );
    let missing = store
        .delete_subscription(orders.clone(), "nope".into())
        .await;
    ensure_eq!(
        missing,
        Err(StoreError::NotFound),
        "delete an unknown subscription"
    );
    store
        .delete_subscription(orders.clone(), "s1".into())
        .await
        .step("delete subscription")?;
    store
        .delete_topic(orders.clone())
        .await
        .step("delete topic")?;
    ensure_eq!(
        store.topic(orders.clone()).await,
        Err(StoreError::NotFound),
        "deleted topic"
    );
    let (_, created) = store
        .put_topic(orders, TopicSpec::default(), at(10))
        .await
        .step("put after delete")?;
    ensure!(created, "the name was not free");
    Ok(())
}

/// One task per enabled subscription whose types match, keyed
/// `{key}:{subscription}`, carrying `webhook-id` and `event-type`; the
/// event reads back with them; the same event again answers the same tasks
/// and writes nothing; another payload under the key is a conflict.
pub async fn a_publish_makes_one_task_per_matching_subscription<S: TaskStore>(store: S) -> Verdict {
    let at_ = topic_at(Some("acme"), "billing");
    store
        .put_topic(at_.clone(), TopicSpec::default(), at(0))
        .await
        .step("put")?;
    subscribe(&store, &at_, "all", None, true).await?;
    subscribe(&store, &at_, "inv", Some(&["invoice.*"]), true).await?;
    subscribe(&store, &at_, "usr", Some(&["user.*"]), true).await?;
    subscribe(&store, &at_, "off", None, false).await?;
    let new = event(&at_, "invoice.paid", r#"{"n":1}"#, "e1")?;
    let published = store
        .publish(new.clone(), "ev-1".into(), at(1))
        .await
        .step("publish")?;
    ensure!(published.created, "not created");
    let subs: Vec<&str> = published
        .event
        .tasks
        .iter()
        .map(|d| d.subscription.as_str())
        .collect();
    ensure_eq!(subs, vec!["all", "inv"], "deliveries");
    for delivery in &published.event.tasks {
        let task = store
            .get(delivery.task_id, Scope::Admin)
            .await
            .step("get")?;
        ensure_eq!(
            task.idempotency_key,
            format!("e1:{}", delivery.subscription),
            "key"
        );
        ensure_eq!(task.headers.get(WEBHOOK_ID), Some("ev-1"), "webhook-id");
        ensure_eq!(
            task.headers.get("event-type"),
            Some("invoice.paid"),
            "event-type"
        );
        ensure_eq!(
            task.headers.get("x-team"),
            Some("billing"),
            "subscription header"
        );
        let link = TopicLink {
            topic: "billing".into(),
            event_id: "ev-1".into(),
            subscription: delivery.subscription.clone(),
        };
        ensure_eq!(task.topic, Some(link), "the task's topic link");
        ensure_eq!(
            (task.tenant.as_deref(), task.state, task.max_attempts),
            (Some("acme"), State::Pending, 3),
            "task"
        );
    }
    // A task of no topic: its NULL topic columns are no match, not an
    // error (a scanned `topic = ?` was NULL, read as a boolean).
    store
        .submit(new_task("no-topic"), at(0))
        .await
        .step("submit a task of no topic")?;
    for (filter, expected) in [
        (
            TaskFilter {
                event_id: Some("ev-1".into()),
                ..TaskFilter::default()
            },
            2,
        ),
        (
            TaskFilter {
                subscription: Some("inv".into()),
                ..TaskFilter::default()
            },
            1,
        ),
        (
            TaskFilter {
                topic: Some("billing".into()),
                ..TaskFilter::default()
            },
            2,
        ),
        (
            TaskFilter {
                topic: Some("other".into()),
                ..TaskFilter::default()
            },
            0,
        ),
    ] {
        let query = ListQuery {
            filter: filter.clone(),
            ..ListQuery::default()
        };
        let listed = store.list(query, Scope::Admin).await.step("list")?;
        ensure_eq!(listed.tasks.len(), expected, "listed by {filter:?}");
    }
    let read = store
        .event(at_.clone(), "ev-1".into())
        .await
        .step("event")?;
    ensure_eq!(read, published.event, "read back");
    let same = event(&at_, "invoice.paid", r#"{ "n": 1 }"#, "e1")?;
    let repeat = store
        .publish(same, "ev-2".into(), at(2))
        .await
        .step("repeat")?;
    ensure_eq!(
        (repeat.created, repeat.event),
        (false, published.event.clone()),
        "repeat"
    );
    let other = event(&at_, "invoice.paid", r#"{"n":2}"#, "e1")?;
    let conflict = store.publish(other, "ev-3".into(), at(3)).await;
    ensure_eq!(
        conflict,
        Err(StoreError::IdempotencyConflict {
            fields: vec!["json"]
        }),
        "conflict"
    );
    let counts = store.count_by_state().await.step("counts")?;
    // The event's two and the task of no topic.
    ensure_eq!(counts.get(State::Pending), 3, "tasks written");
    let none = store
        .publish(
            event(&topic_at(None, "billing"), "a.b", "{}", "k")?,
            "x".into(),
            at(4),
        )
        .await;
    ensure_eq!(
        none.map(|p| p.created),
        Err(StoreError::NotFound),
        "an unknown topic"
    );
    Ok(())
}

/// A publish one of whose tasks is refused (its key taken by other work)
/// writes nothing: no task, no event.
pub async fn a_refused_publish_writes_nothing<S: TaskStore>(store: S) -> Verdict {
    let at_ = topic_at(None, "orders");
    store
        .put_topic(at_.clone(), TopicSpec::default(), at(0))
        .await
        .step("put")?;
    subscribe(&store, &at_, "a", None, true).await?;
    subscribe(&store, &at_, "b", None, true).await?;
    store
        .submit(new_task("e1:b"), at(0))
        .await
        .step("squat the key")?;
    let refused = store
        .publish(event(&at_, "order.placed", "{}", "e1")?, "ev".into(), at(1))
        .await;
    ensure!(
        matches!(refused, Err(StoreError::IdempotencyConflict { .. })),
        "publish answered {refused:?}"
    );
    let counts = store.count_by_state().await.step("counts")?;
    ensure_eq!(counts.get(State::Pending), 1, "tasks after the refusal");
    ensure_eq!(
        store.event(at_, "ev".into()).await,
        Err(StoreError::NotFound),
        "event"
    );
    Ok(())
}

/// A replay makes one new task per event since the time given that the
/// subscription's types match, keyed `…:replay:{n}` (n counting that
/// event's replays to it), and the event lists it.
pub async fn a_replay_sends_again_the_events_since_a_time<S: TaskStore>(store: S) -> Verdict {
    let at_ = topic_at(Some("acme"), "orders");
    store
        .put_topic(at_.clone(), TopicSpec::default(), at(0))
        .await
        .step("put")?;
    subscribe(&store, &at_, "late", Some(&["order.*"]), true).await?;
    for (n, kind) in [
        (1, "order.placed"),
        (2, "user.created"),
        (3, "order.paid"),
        (4, "order.shipped"),
    ] {
        let key = format!("k{n}");
        store
            .publish(
                event(&at_, kind, "{}", &key)?,
                format!("ev{n}"),
                at(n * 1000),
            )
            .await
            .step("publish")?;
    }
    let replayed = store
        .replay(at_.clone(), "late".into(), at(2000), at(5000))
        .await
        .step("replay")?;
    let keys = async |deliveries: &[tc_model::topic::Delivery]| -> Result<Vec<String>, String> {
        let mut keys = Vec::new();
        for d in deliveries {
            keys.push(
                store
                    .get(d.task_id, Scope::Admin)
                    .await
                    .step("get")?
                    .idempotency_key,
            );
        }
        Ok(keys)
    };
    ensure_eq!(
        keys(&replayed).await?,
        vec!["k3:late:replay:1", "k4:late:replay:1"],
        "first replay"
    );
    let again = store
        .replay(at_.clone(), "late".into(), at(4000), at(6000))
        .await
        .step("again")?;
    ensure_eq!(
        keys(&again).await?,
        vec!["k4:late:replay:2"],
        "second replay"
    );
    let event = store.event(at_.clone(), "ev4".into()).await.step("event")?;
    ensure_eq!(event.tasks.len(), 3, "the event's deliveries");
    let unknown = store.replay(at_, "nope".into(), at(0), at(7000)).await;
    ensure_eq!(
        unknown,
        Err(StoreError::NotFound),
        "an unknown subscription"
    );
    Ok(())
}

/// Two tenants' topics of one name are two topics: each lists its own,
/// publishes to its own subscriptions, and its tasks are its tenant's.
pub async fn topics_are_each_tenant_s_own<S: TaskStore>(store: S) -> Verdict {
    for tenant in ["a", "b"] {
        let at_ = topic_at(Some(tenant), "orders");
        store
            .put_topic(at_.clone(), TopicSpec::default(), at(0))
            .await
            .step("put")?;
        subscribe(&store, &at_, &format!("s-{tenant}"), None, true).await?;
    }
    let a = topic_at(Some("a"), "orders");
    let published = store
        .publish(event(&a, "x.y", "{}", "k")?, "ev-a".into(), at(1))
        .await
        .step("publish")?;
    ensure_eq!(published.event.tasks.len(), 1, "a's deliveries");
    let task = store
        .get(published.event.tasks[0].task_id, Scope::Admin)
        .await
        .step("get")?;
    ensure_eq!(task.tenant.as_deref(), Some("a"), "the task's tenant");
    let b_event = store
        .event(topic_at(Some("b"), "orders"), "ev-a".into())
        .await;
    ensure_eq!(b_event, Err(StoreError::NotFound), "b reads a's event");
    let listed = store.topics(Some("b".into())).await.step("b's topics")?;
    ensure_eq!(listed.len(), 1, "b's topics");
    ensure_eq!(listed[0].at.tenant.as_deref(), Some("b"), "b's topic");
    Ok(())
}
