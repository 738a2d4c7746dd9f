//! An event through the worker on any store: published to a
//! topic, it makes a task for the subscription whose types match and none
//! for the other, and its call carries `webhook-id` (the event's id, the
//! one signed) and `event-type`; a subscription's own signing secrets
//! sign its calls; a subscriber failing for its topic's `disable_after_s`
//! is disabled.

use std::time::Duration;

use tc_downstream::fake::{Reply, Step};
use tc_downstream::{Downstream, webhook_signature};
use tc_model::destination::DestinationUpdate;
use tc_model::signing::SigningSecrets;
use tc_model::store::TaskStore;
use tc_model::topic::event::NewEvent;
use tc_model::topic::{EventTypes, SubscriptionSpec, TopicRef, TopicSpec};
use tc_model::{Limits, State, destination_of};

use super::{Rig, stop, wait_all_terminal, wait_terminal};
use tc_model::tenant::Scope;

const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

async fn subscribe<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
    at: &TopicRef,
    id: &str,
    path: &str,
    pattern: &str,
) -> Result<(), String> {
    let types = EventTypes::parse(Some(vec![pattern.to_owned()])).map_err(|e| e.to_string())?;
    let spec = SubscriptionSpec::new(rig.url(path), types).map_err(|e| e.to_string())?;
    rig.store
        .create_subscription(at.clone(), id.to_owned(), spec, rig.clock.now())
        .await
        .map_err(|e| format!("subscribe: {e}"))?;
    Ok(())
}

/// One event, two subscriptions of which one takes it: one call, to that
/// one, with the event's id as `webhook-id` (signed over it, the
/// destination having a secret) and its `event-type`.
pub(super) async fn an_event_reaches_each_matching_subscriber_with_its_id_and_type<
    S: TaskStore,
    D: Downstream,
>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let at = TopicRef {
        tenant: None,
        name: "orders".to_owned(),
    };
    let now = rig.clock.now();
    rig.store
        .put_topic(at.clone(), TopicSpec::default(), now)
        .await
        .map_err(|e| format!("put_topic: {e}"))?;
    let secrets = SigningSecrets::parse(&[SECRET]).map_err(|e| format!("fixture: {e}"))?;
    let update = DestinationUpdate {
        signing_secrets: Some(secrets.clone()),
        ..DestinationUpdate::default()
    };
    rig.store
        .update_destination(destination_of(&rig.url("/")), update, now)
        .await
        .map_err(|e| format!("update_destination: {e}"))?;
    subscribe(rig, &at, "sub-orders", "/orders-hook", "order.*").await?;
    subscribe(rig, &at, "sub-users", "/users-hook", "user.*").await?;
    rig.script
        .plan("/orders-hook", [Step::Reply(Reply::status(200))]);

    let worker = rig.spawn_worker(rig.config());
    let mut events = worker.control().subscribe();
    let event = NewEvent::new(
        at,
        "order.placed".to_owned(),
        br#"{"order":7}"#.to_vec(),
        "order-7".to_owned(),
        3,
        Duration::from_secs(2),
        &Limits::default(),
    )
    .map_err(|e| format!("fixture: {e}"))?;
    let published = rig
        .store
        .publish(event, "event-7".to_owned(), rig.clock.now())
        .await
        .map_err(|e| format!("publish: {e}"))?;
    let tasks = &published.event.tasks;
    ensure!(
        tasks.len() == 1 && tasks[0].subscription == "sub-orders",
        "one task, for the matching subscription: {tasks:?}"
    );
    worker.control().task_submitted();
    let ended = wait_terminal(&mut events, tasks[0].task_id).await?;
    stop(worker).await?;
    ensure!(
        ended.state == State::Success,
        "the call succeeds: {ended:?}"
    );

    let calls = rig.script.calls("/orders-hook");
    ensure!(calls.len() == 1, "one call: {}", calls.len());
    let call = &calls[0];
    let header = |name: &str| call.header(name).unwrap_or("");
    ensure!(
        header("webhook-id") == "event-7" && header("event-type") == "order.placed",
        "webhook-id {:?}, event-type {:?}",
        call.header("webhook-id"),
        call.header("event-type")
    );
    let ids = call
        .headers
        .iter()
        .filter(|(n, _)| n == "webhook-id")
        .count();
    ensure!(ids == 1, "webhook-id sent {ids} times");
    let timestamp: i64 = header("webhook-timestamp")
        .parse()
        .map_err(|_| format!("webhook-timestamp {:?}", call.header("webhook-timestamp")))?;
    let keys: Vec<&[u8]> = secrets.iter().map(|s| s.key()).collect();
    let expected = webhook_signature(&keys, "event-7", timestamp, &call.body);
    ensure!(
        header("webhook-signature") == expected,
        "signed over the event's id: {:?}",
        call.header("webhook-signature")
    );
    let others = rig.script.calls("/users-hook");
    ensure!(others.is_empty(), "the other subscriber was called");
    Ok(())
}

const OWN_SECRET: &str = "whsec_Eer8TRcpJKHDJXIhuwHjOAlHoNVAhIMf";

/// A subscription with signing secrets of its own: its call is signed with
/// them, not with its destination's; another subscription on the same
/// destination without any is signed with the destination's.
pub(super) async fn a_subscriptions_own_secrets_sign_its_calls<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let at = TopicRef {
        tenant: None,
        name: "bills".to_owned(),
    };
    let now = rig.clock.now();
    rig.store
        .put_topic(at.clone(), TopicSpec::default(), now)
        .await
        .map_err(|e| format!("put_topic: {e}"))?;
    let dest = SigningSecrets::parse(&[SECRET]).map_err(|e| format!("fixture: {e}"))?;
    let own = SigningSecrets::parse(&[OWN_SECRET]).map_err(|e| format!("fixture: {e}"))?;
    let update = DestinationUpdate {
        signing_secrets: Some(dest.clone()),
        ..DestinationUpdate::default()
    };
    rig.store
        .update_destination(destination_of(&rig.url("/")), update, now)
        .await
        .map_err(|e| format!("update_destination: {e}"))?;
    let mut spec =
        SubscriptionSpec::new(rig.url("/own"), EventTypes::all()).map_err(|e| e.to_string())?;
    spec.signing_secrets = own.clone();
    rig.store
        .create_subscription(at.clone(), "sub-own".to_owned(), spec, now)
        .await
        .map_err(|e| format!("subscribe: {e}"))?;
    subscribe(rig, &at, "sub-plain", "/plain", "*").await?;
    rig.script.plan("/own", [Step::Reply(Reply::status(200))]);
    rig.script.plan("/plain", [Step::Reply(Reply::status(200))]);

    let worker = rig.spawn_worker(rig.config());
    let mut events = worker.control().subscribe();
    let event = NewEvent::new(
        at,
        "bill.sent".to_owned(),
        br#"{"bill":1}"#.to_vec(),
        "bill-1".to_owned(),
        1,
        Duration::from_secs(2),
        &Limits::default(),
    )
    .map_err(|e| format!("fixture: {e}"))?;
    let published = rig
        .store
        .publish(event, "event-b1".to_owned(), rig.clock.now())
        .await
        .map_err(|e| format!("publish: {e}"))?;
    worker.control().task_submitted();
    let ids: Vec<_> = published.event.tasks.iter().map(|d| d.task_id).collect();
    // Both, in whatever order they end.
    wait_all_terminal(&mut events, &ids).await?;
    stop(worker).await?;
    for (path, secrets) in [("/own", &own), ("/plain", &dest)] {
        let calls = rig.script.calls(path);
        ensure!(calls.len() == 1, "{path}: {} calls", calls.len());
        let call = &calls[0];
        let timestamp: i64 = call
            .header("webhook-timestamp")
            .unwrap_or("")
            .parse()
            .map_err(|_| {
                format!(
                    "{path}: webhook-timestamp {:?}",
                    call.header("webhook-timestamp")
                )
            })?;
        let keys: Vec<&[u8]> = secrets.iter().map(|s| s.key()).collect();
        let expected = webhook_signature(&keys, "event-b1", timestamp, &call.body);
        ensure!(
            call.header("webhook-signature") == Some(expected.as_str()),
            "{path}: signed with the wrong secrets: {:?}",
            call.header("webhook-signature")
        );
    }
    Ok(())
}

/// A subscriber that answers only 500s for longer than its topic's
/// `disable_after_s` (1 s) is disabled by the worker's own tries: its task,
/// waiting for a retry, is canceled with `subscription_disabled`, and the
/// topic's `callback_url` receives `subscription.disabled`.
pub(super) async fn a_subscriber_failing_past_disable_after_is_disabled<
    S: TaskStore,
    D: Downstream,
>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let at = TopicRef {
        tenant: None,
        name: "alerts".to_owned(),
    };
    let spec =
        TopicSpec::new(String::new(), Some(rig.url("/ops")), Some(1)).map_err(|e| e.to_string())?;
    rig.store
        .put_topic(at.clone(), spec, rig.clock.now())
        .await
        .map_err(|e| format!("put_topic: {e}"))?;
    subscribe(rig, &at, "sub-dead", "/dead", "*").await?;
    rig.script.plan(
        "/dead",
        std::iter::repeat_n(Step::Reply(Reply::status(500)), 100),
    );
    let mut config = rig.config();
    // The notice goes to the same host: its breaker must not hold it.
    config.breaker.failures = 1000;
    let worker = rig.spawn_worker(config);
    let mut events = worker.control().subscribe();
    let event = NewEvent::new(
        at.clone(),
        "alert.raised".to_owned(),
        b"{}".to_vec(),
        "alert-1".to_owned(),
        100,
        Duration::from_secs(2),
        &Limits::default(),
    )
    .map_err(|e| format!("fixture: {e}"))?;
    let published = rig
        .store
        .publish(event, "event-a1".to_owned(), rig.clock.now())
        .await
        .map_err(|e| format!("publish: {e}"))?;
    worker.control().task_submitted();
    let noticed = async {
        while rig.script.calls("/ops").is_empty() {
            let _ = events.recv().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), noticed)
        .await
        .map_err(|_| "no notice reached the callback_url".to_owned())?;
    stop(worker).await?;

    let subs = rig
        .store
        .subscriptions(at)
        .await
        .map_err(|e| format!("subscriptions: {e}"))?;
    ensure!(
        !subs[0].spec.enabled
            && subs[0].disabled_reason.as_deref() == Some("subscription_disabled"),
        "disabled: {:?}",
        subs[0]
    );
    let task = rig
        .store
        .get(published.event.tasks[0].task_id, Scope::Admin)
        .await
        .map_err(|e| format!("get: {e}"))?;
    ensure!(
        task.state == State::Canceled && task.error.as_deref() == Some("subscription_disabled"),
        "the subscriber's task: {:?} {:?}",
        task.state,
        task.error
    );
    let tries = rig.script.calls("/dead").len();
    ensure!(tries >= 2, "failed tries before the disable: {tries}");
    let notice = &rig.script.calls("/ops")[0];
    let body: serde_json::Value =
        serde_json::from_slice(&notice.body).map_err(|e| format!("notice: {e}"))?;
    ensure!(
        body["type"] == "subscription.disabled" && body["subscription"] == "sub-dead",
        "the notice: {body}"
    );
    Ok(())
}
