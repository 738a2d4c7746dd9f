//! The topic rules as tables: names, event types and patterns, a topic's
//! settings, what an event's tasks are, and when a repeat is the same event.

use std::time::Duration;

use super::event::{NewEvent, WEBHOOK_ID};
use super::*;
use crate::{FirstRun, Limits, State};

fn topic(tenant: Option<&str>) -> TopicRef {
    TopicRef::new(tenant.map(str::to_owned), "orders").unwrap()
}

fn subscription(types: Option<&[&str]>, enabled: bool) -> Subscription {
    let types = EventTypes::parse(types.map(|l| l.iter().map(|s| (*s).to_owned()).collect()));
    let mut spec =
        SubscriptionSpec::new("https://hooks.example/in".into(), types.unwrap()).unwrap();
    spec.enabled = enabled;
    Subscription::created(
        "sub-1".into(),
        topic(Some("acme")),
        spec,
        Timestamp::from_millis(1),
    )
}

fn event(event_type: &str, json: &str) -> NewEvent {
    NewEvent::new(
        topic(Some("acme")),
        event_type.into(),
        json.as_bytes().to_vec(),
        "evt-1".into(),
        5,
        Duration::from_secs(10),
        &Limits::default(),
    )
    .unwrap()
}

#[test]
fn event_types_match_names_and_patterns() {
    fn check(list: Option<&[&str]>, event_type: &str, expected: bool) {
        let sub = subscription(list, true);
        assert_eq!(sub.takes(event_type), expected, "{list:?} ~ {event_type}");
    }
    check(None, "invoice.paid", true);
    check(Some(&["invoice.paid"]), "invoice.paid", true);
    check(Some(&["invoice.paid"]), "invoice.voided", false);
    check(Some(&["invoice.*"]), "invoice.paid", true);
    check(Some(&["invoice.*"]), "invoice.line.added", true);
    check(Some(&["invoice.*"]), "invoice", false);
    check(Some(&["invoice.*"]), "invoices.paid", false);
    check(Some(&["*"]), "anything", true);
    check(Some(&["user.created", "invoice.*"]), "user.created", true);
}

#[test]
fn a_disabled_subscription_takes_no_event() {
    assert!(!subscription(None, false).takes("invoice.paid"));
}

#[test]
fn bad_event_types_name_their_field() {
    fn check(list: &[&str]) {
        let list = Some(list.iter().map(|s| (*s).to_owned()).collect());
        let e = EventTypes::parse(list).unwrap_err();
        assert_eq!(e.field, "event_types");
    }
    check(&[]);
    check(&["Invoice.paid"]);
    check(&["invoice..paid"]);
    check(&["invoice.*.paid"]);
    check(&["invoice*"]);
    check(&["in voice"]);
    check(&[&"a".repeat(MAX_EVENT_TYPE_BYTES + 1)]);
    let many: Vec<String> = (0..=MAX_EVENT_TYPES).map(|i| format!("t{i}")).collect();
    assert!(EventTypes::parse(Some(many)).is_err());
}

#[test]
fn event_types_round_trip_through_their_stored_text() {
    for list in [None, Some(vec!["a.b".to_owned(), "c.*".to_owned()])] {
        let types = EventTypes::parse(list).unwrap();
        assert_eq!(
            EventTypes::from_stored(types.to_stored().as_deref()),
            Ok(types)
        );
    }
}

#[test]
fn topic_settings_are_checked_field_by_field() {
    fn check(description: &str, callback: Option<&str>, after: Option<u64>, field: &str) {
        let e = TopicSpec::new(description.into(), callback.map(str::to_owned), after);
        assert_eq!(
            e.map_err(|e| e.field),
            Err(field),
            "{description} {callback:?} {after:?}"
        );
    }
    check(
        &"d".repeat(MAX_DESCRIPTION_BYTES + 1),
        None,
        None,
        "description",
    );
    check("", Some("ftp://x"), None, "callback_url");
    check("", None, Some(0), "disable_after_s");
    check(
        "",
        None,
        Some(MAX_DISABLE_AFTER.as_secs() + 1),
        "disable_after_s",
    );
    let spec = TopicSpec::new("x".into(), None, None).unwrap();
    assert_eq!(spec.disable_after, DEFAULT_DISABLE_AFTER);
    assert!(TopicRef::new(None, "Orders").is_err());
    assert!(TopicRef::new(None, "orders-eu_1").is_ok());
}

#[test]
fn an_events_task_carries_its_id_type_and_subscription_headers() {
    let mut sub = subscription(None, true);
    sub.spec.headers = crate::Headers::parse([("x-team".to_owned(), "a".to_owned())]).unwrap();
    let new = event("invoice.paid", r#"{"n":1}"#)
        .with_first_run(FirstRun::After(Duration::from_secs(5)))
        .unwrap();
    let task = new.task_for("evt-id", &sub);
    assert_eq!(task.idempotency_key(), "evt-1:sub-1");
    assert_eq!(task.url(), "https://hooks.example/in");
    assert_eq!(task.tenant(), Some("acme"));
    assert_eq!(task.headers().get(WEBHOOK_ID), Some("evt-id"));
    assert_eq!(task.headers().get("event-type"), Some("invoice.paid"));
    assert_eq!(task.headers().get("x-team"), Some("a"));
    assert_eq!(task.max_attempts(), 5);
    assert_eq!(task.first_run(), FirstRun::After(Duration::from_secs(5)));
    let stored = new.stored("evt-id".into(), Timestamp::from_millis(9));
    let replay = stored.replay_task(&sub, 2);
    assert_eq!(replay.idempotency_key(), "evt-1:sub-1:replay:2");
    assert_eq!(replay.first_run(), FirstRun::Now);
}

#[test]
fn a_repeat_is_the_same_event_unless_its_payload_differs() {
    let stored = event("invoice.paid", r#"{"a":1,"b":2}"#).stored("e".into(), Timestamp::default());
    fn check(new: NewEvent, stored: &event::Event, expected: &[&str]) {
        assert_eq!(new.differing_fields(stored), expected);
    }
    check(event("invoice.paid", r#"{"b":2, "a":1}"#), &stored, &[]);
    check(event("invoice.paid", r#"{"a":2}"#), &stored, &["json"]);
    check(
        event("invoice.voided", r#"{"a":1,"b":2}"#),
        &stored,
        &["event_type"],
    );
    let later = event("invoice.paid", r#"{"a":1,"b":2}"#)
        .with_first_run(FirstRun::After(Duration::from_secs(1)))
        .unwrap();
    check(later, &stored, &["delay_ms"]);
}

#[test]
fn bad_events_name_their_field() {
    fn check(event_type: &str, key: &str, attempts: u32, timeout_ms: u64, field: &str) {
        let e = NewEvent::new(
            topic(None),
            event_type.into(),
            b"{}".to_vec(),
            key.into(),
            attempts,
            Duration::from_millis(timeout_ms),
            &Limits::default(),
        );
        assert_eq!(e.map_err(|e| e.field), Err(field));
    }
    check("Bad", "k", 1, 1000, "event_type");
    check("a.b", "", 1, 1000, "idempotency_key");
    check(
        "a.b",
        &"k".repeat(event::MAX_EVENT_KEY_BYTES + 1),
        1,
        1000,
        "idempotency_key",
    );
    check("a.b", "k", 0, 1000, "max_attempts");
    check("a.b", "k", 1, 0, "timeout_ms");
}

#[test]
fn enabling_again_forgets_failures() {
    let mut sub = subscription(None, false);
    sub.failing_since = Some(Timestamp::from_millis(5));
    sub.disabled_reason = Some(DISABLED_REASON.into());
    let update = SubscriptionUpdate {
        enabled: Some(true),
        ..SubscriptionUpdate::default()
    };
    let sub = sub.updated(update, Timestamp::from_millis(9));
    assert!(sub.spec.enabled);
    assert_eq!((sub.failing_since, sub.disabled_reason), (None, None));
    assert_eq!(sub.updated_at, Timestamp::from_millis(9));
    let delivery = Delivery {
        subscription: sub.id.clone(),
        task_id: crate::TaskId::new(Timestamp::default(), [0; 10]),
        state: State::Pending,
    };
    assert_eq!(delivery.subscription, "sub-1");
}
