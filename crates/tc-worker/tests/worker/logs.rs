//! The worker's log events are a public interface: their names and fields are
//! checked here from the JSON a subscriber writes.

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tc_downstream::fake::{FakeDownstream, Script};
use tc_model::store::Schedules;
use tc_testkit::memory_store::MemoryStore;
use tc_testkit::worker_scenarios::{Rig, run};
use tracing::Dispatch;
use tracing::subscriber::NoSubscriber;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

/// Runs `work` with a JSON subscriber and returns every event it logged.
async fn events_during(work: impl std::future::Future<Output = ()>) -> Vec<Value> {
    // tracing decides once per event site whether anyone wants its events,
    // when a thread first reaches it; while one dispatcher is registered it
    // asks only that thread's. The scenarios of this binary run on other
    // threads with none, and would mark a site this test needs as unwanted:
    // a second dispatcher, registered first, makes tracing ask every one.
    let _ask_every_dispatcher = Dispatch::new(NoSubscriber::default());
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_writer(captured.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    work.await;
    let bytes = captured.0.lock().unwrap().clone();
    String::from_utf8(bytes)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Runs `scenario` with a JSON subscriber and returns every event it logged.
async fn events_of(scenario: &str) -> Vec<Value> {
    events_during(async {
        let store = Arc::new(MemoryStore::new());
        let script = Script::new();
        let rig = Rig::new(
            store,
            Arc::new(FakeDownstream::new(Arc::clone(&script))),
            script,
            "http://downstream.test",
        )
        .with_other_host("http://other.test")
        .on_paused_clock();
        run(scenario, &rig).await.unwrap();
    })
    .await
}

/// Checks that the first event named `name` has every field in `fields`,
/// and returns it.
fn check<'a>(events: &'a [Value], name: &str, fields: &[&str]) -> &'a Value {
    let event = events
        .iter()
        .find(|e| e["message"] == name)
        .unwrap_or_else(|| panic!("no {name} event in {events:#?}"));
    for field in fields {
        assert!(!event[field].is_null(), "{name} lacks {field}: {event}");
    }
    event
}

#[tokio::test(start_paused = true)]
async fn an_attempt_logs_start_retry_and_done_with_their_fields() {
    let events = events_of("server_error_then_success").await;
    let start = check(
        &events,
        "task_start",
        &["task_id", "attempt", "method", "origin", "path"],
    );
    assert!(
        start.get("url").is_none(),
        "no full url (it may carry a query): {start}"
    );
    assert_eq!(start["attempt"], 1);
    // Every line names the try the same way: `attempt`, the try's number
    // (on task_retry and task_done, the one that just ended).
    let retried = check(
        &events,
        "task_retry",
        &[
            "task_id",
            "reason",
            "delay_ms",
            "attempt",
            "duration_ms",
            "http_status",
        ],
    );
    assert_eq!(
        (
            retried["reason"].as_str(),
            retried["http_status"].as_u64(),
            retried["attempt"].as_u64()
        ),
        (Some("http_503"), Some(503), Some(1))
    );
    let done = check(
        &events,
        "task_done",
        &["task_id", "state", "attempt", "duration_ms", "http_status"],
    );
    assert_eq!(
        (done["state"].as_str(), done["attempt"].as_u64()),
        (Some("success"), Some(2))
    );
    for event in [&start, &retried, &done] {
        assert!(
            event.get("retry").is_none(),
            "one name for the try: {event}"
        );
    }
    assert_eq!(start["task_id"], done["task_id"]);
}

#[tokio::test(start_paused = true)]
async fn a_failure_logs_its_error_and_interruptions_and_skips_are_named() {
    let events = events_of("client_error_not_retried").await;
    let done = check(
        &events,
        "task_done",
        &["task_id", "state", "attempt", "duration_ms", "error"],
    );
    assert_eq!(
        (done["state"].as_str(), done["error"].as_str()),
        (Some("failed"), Some("http_400"))
    );

    let events = events_of("shutdown_returns_in_flight_to_pending").await;
    // Ctrl-C says how many calls it waits for, and for how long.
    let draining = check(&events, "shutdown_draining", &["in_flight", "grace_ms"]);
    assert!(
        draining["in_flight"].as_u64() >= Some(1),
        "a call was in flight: {draining}"
    );
    check(&events, "task_interrupted", &["task_id", "duration_ms"]);

    let events = events_of("cancel_claimed_not_started").await;
    check(&events, "task_skip_canceled", &["task_id"]);
}

#[tokio::test(start_paused = true)]
async fn destination_backoff_and_breaker_events_carry_their_fields() {
    let events = events_of("retry_after_holds_the_whole_destination").await;
    let backoff = check(
        &events,
        "destination_backoff",
        &["destination", "backoff_ms"],
    );
    assert_eq!(
        (
            backoff["destination"].as_str(),
            backoff["backoff_ms"].as_u64()
        ),
        (Some("downstream.test:80"), Some(30_000))
    );

    // Three failures open it for 30 s; the first probe fails and reopens it
    // for 60 s with a fourth failure; the second probe closes it.
    let events = events_of("breaker_opens_holds_without_attempts_probes_and_closes").await;
    let opened: Vec<_> = events
        .iter()
        .filter(|e| e["message"] == "destination_breaker_opened")
        .map(|e| {
            (
                e["destination"].as_str(),
                e["failures"].as_u64(),
                e["open_ms"].as_u64(),
            )
        })
        .collect();
    assert_eq!(
        opened,
        [
            (Some("downstream.test:80"), Some(3), Some(30_000)),
            (Some("downstream.test:80"), Some(4), Some(60_000)),
        ]
    );
    let closed = check(
        &events,
        "destination_breaker_closed",
        &["destination", "failures"],
    );
    assert_eq!(closed["destination"], "downstream.test:80");
}

#[tokio::test(start_paused = true)]
async fn no_header_value_or_secret_is_ever_logged() {
    let events = events_of("outbound_calls_carry_headers_and_signatures_on_every_try").await;
    let start = check(
        &events,
        "task_start",
        &["task_id", "attempt", "method", "origin", "path"],
    );
    assert!(
        events.iter().any(|e| e["method"] == "PUT"),
        "the PUT task's start: {start}"
    );
    let text: String = events.iter().map(|e| format!("{e}\n")).collect();
    for secret in [
        "Bearer",
        "acme",
        "whsec_",
        "C2FVsBQIhrscChlQIMV",
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",
        "v1,",
    ] {
        assert!(!text.contains(secret), "{secret:?} logged:\n{text}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_task_s_log_lines_carry_its_trace_id() {
    let events = events_of("trace_context_reaches_every_try").await;
    for name in ["task_start", "task_retry", "task_done"] {
        let event = check(&events, name, &["task_id", "trace_id"]);
        assert_eq!(
            event["trace_id"], "0af7651916cd43dd8448eb211c80319c",
            "{name}"
        );
        // No tracer: no span, so no span id.
        assert!(event.get("span_id").is_none(), "{name}: {event}");
    }
}

/// A schedule's firing and a skip (`overlap: skip`, the first task still
/// pending) log what fired, when, and which task.
#[tokio::test(start_paused = true)]
async fn schedule_firings_and_skips_carry_their_fields() {
    use std::time::Duration;
    use tc_model::schedule::{
        CatchUp, CronPattern, Overlap, Recurrence, ScheduleSpec, TaskTemplate, Zone,
    };

    let events = events_during(async {
        let store = Arc::new(MemoryStore::new());
        // 2026-01-01T00:00:30Z.
        let clock =
            tc_worker::Clock::starting_at(tc_model::Timestamp::from_millis(1_767_225_630_000));
        let task = tc_model::NewTask::new(
            "http://downstream.test/tick".into(),
            b"{}".to_vec(),
            "template".into(),
            3,
            Duration::from_secs(5),
            &tc_model::Limits::default(),
        )
        .and_then(|t| t.with_first_run(tc_model::FirstRun::After(Duration::from_secs(600))))
        .unwrap();
        let spec = ScheduleSpec {
            name: "tick".into(),
            when: Recurrence {
                cron: CronPattern::parse("* * * * *").unwrap(),
                zone: Zone::UTC,
            },
            task: TaskTemplate::of(task),
            paused: false,
            overlap: Overlap::Skip,
            catch_up: CatchUp::None,
        };
        store.create_schedule(spec, clock.now()).await.unwrap();
        let worker = tc_worker::Worker::spawn(
            Arc::clone(&store),
            Arc::new(FakeDownstream::new(Script::new())),
            tc_worker::WorkerConfig::default(),
            clock,
            tc_worker::WorkerMetrics::default(),
        );
        tokio::time::sleep(Duration::from_secs(100)).await;
        worker.shutdown().await.unwrap();
    })
    .await;
    let fired = check(
        &events,
        "schedule_fired",
        &["schedule", "fire_time", "task_id", "created"],
    );
    assert_eq!(
        (fired["schedule"].as_str(), fired["fire_time"].as_str()),
        (Some("tick"), Some("2026-01-01T00:01:00Z"))
    );
    let skipped = check(
        &events,
        "schedule_skipped",
        &["schedule", "fire_time", "previous_task_id", "state"],
    );
    assert_eq!(
        (skipped["fire_time"].as_str(), skipped["state"].as_str()),
        (Some("2026-01-01T00:02:00Z"), Some("pending"))
    );
    assert_eq!(skipped["previous_task_id"], fired["task_id"]);
}

/// A firing the allow-list refuses logs the schedule, the fire
/// time and the refusal, which names the field and never the url.
#[tokio::test(start_paused = true)]
async fn a_refused_firing_carries_its_fields() {
    use std::time::Duration;
    use tc_model::schedule::{
        CatchUp, CronPattern, Overlap, Recurrence, ScheduleSpec, TaskTemplate, Zone,
    };

    let events = events_during(async {
        let store = Arc::new(MemoryStore::new());
        // 2026-01-01T00:00:30Z.
        let clock =
            tc_worker::Clock::starting_at(tc_model::Timestamp::from_millis(1_767_225_630_000));
        let task = tc_model::NewTask::new(
            "http://downstream.test/tick?token=s3cret".into(),
            b"{}".to_vec(),
            "template".into(),
            3,
            Duration::from_secs(5),
            &tc_model::Limits::default(),
        )
        .unwrap();
        let spec = ScheduleSpec {
            name: "tick".into(),
            when: Recurrence {
                cron: CronPattern::parse("* * * * *").unwrap(),
                zone: Zone::UTC,
            },
            task: TaskTemplate::of(task),
            paused: false,
            overlap: Overlap::Allow,
            catch_up: CatchUp::None,
        };
        store.create_schedule(spec, clock.now()).await.unwrap();
        let worker = tc_worker::Worker::spawn(
            Arc::clone(&store),
            Arc::new(FakeDownstream::new(Script::new())),
            tc_worker::WorkerConfig {
                allow_url_prefixes: vec!["http://elsewhere.test/".into()],
                ..tc_worker::WorkerConfig::default()
            },
            clock,
            tc_worker::WorkerMetrics::default(),
        );
        tokio::time::sleep(Duration::from_secs(40)).await;
        worker.shutdown().await.unwrap();
    })
    .await;
    let refused = check(
        &events,
        "schedule_refused",
        &["schedule", "fire_time", "error"],
    );
    assert_eq!(
        (
            refused["schedule"].as_str(),
            refused["fire_time"].as_str(),
            refused["error"].as_str()
        ),
        (
            Some("tick"),
            Some("2026-01-01T00:01:00Z"),
            Some("url: not under any allowed prefix of this server")
        )
    );
    let text = serde_json::to_string(&events).unwrap();
    assert!(
        !text.contains("s3cret"),
        "a url's query never reaches a log"
    );
}
