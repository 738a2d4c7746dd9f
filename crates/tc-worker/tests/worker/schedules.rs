//! The schedules' firing loop on tokio's paused clock and the reference
//! store: when it fires, what `overlap: skip` holds back, and what
//! `catch_up` does after a downtime (a worker shut down, time passing, a
//! new worker). Every wait is a paused-clock sleep: it ends once all that
//! was due before it has run.

use std::sync::Arc;
use std::time::Duration;

use tc_downstream::fake::{FakeDownstream, Script};
use tc_model::schedule::{
    CatchUp, CronPattern, Overlap, Recurrence, ScheduleSpec, TaskTemplate, Zone,
};
use tc_model::store::{ListQuery, Schedules, Tasks};
use tc_model::tenant::Scope;
use tc_model::{FirstRun, Limits, NewTask, Timestamp};
use tc_testkit::memory_store::MemoryStore;
use tc_worker::{Clock, Worker, WorkerConfig, WorkerMetrics};

/// 2026-01-01T00:00:30Z: half a minute before the first firing of an
/// every-minute schedule.
const START: Timestamp = Timestamp::from_millis(1_767_225_630_000);

struct Rig {
    store: Arc<MemoryStore>,
    downstream: Arc<FakeDownstream>,
    clock: Clock,
}

impl Rig {
    fn new() -> Rig {
        Rig {
            store: Arc::new(MemoryStore::new()),
            downstream: Arc::new(FakeDownstream::new(Script::new())),
            clock: Clock::starting_at(START),
        }
    }

    fn worker(&self) -> Worker<MemoryStore> {
        self.worker_allowing(&[])
    }

    /// A worker whose allow-list is `prefixes` (empty: every url).
    fn worker_allowing(&self, prefixes: &[&str]) -> Worker<MemoryStore> {
        Worker::spawn(
            Arc::clone(&self.store),
            Arc::clone(&self.downstream),
            WorkerConfig {
                jitter_seed: Some(1),
                allow_url_prefixes: prefixes.iter().map(|p| (*p).to_owned()).collect(),
                ..WorkerConfig::default()
            },
            self.clock.clone(),
            WorkerMetrics::default(),
        )
    }

    async fn create(&self, overlap: Overlap, catch_up: CatchUp, delay: Duration) {
        let task = NewTask::new(
            "http://downstream.test/tick".into(),
            b"{}".to_vec(),
            "template".into(),
            3,
            Duration::from_secs(5),
            &Limits::default(),
        )
        .and_then(|t| t.with_first_run(FirstRun::After(delay)))
        .unwrap();
        self.create_of(task, overlap, catch_up).await;
    }

    /// An every-minute schedule `tick` of `task`.
    async fn create_of(&self, task: NewTask, overlap: Overlap, catch_up: CatchUp) {
        let spec = ScheduleSpec {
            name: "tick".into(),
            when: Recurrence {
                cron: CronPattern::parse("* * * * *").unwrap(),
                zone: Zone::UTC,
            },
            task: TaskTemplate::of(task),
            paused: false,
            overlap,
            catch_up,
        };
        self.store
            .create_schedule(spec, self.clock.now())
            .await
            .unwrap();
    }

    /// The keys of every task, in creation order.
    async fn keys(&self) -> Vec<String> {
        let page = self
            .store
            .list(
                ListQuery {
                    limit: 1000,
                    ..ListQuery::default()
                },
                Scope::Admin,
            )
            .await
            .unwrap();
        page.tasks.into_iter().map(|t| t.idempotency_key).collect()
    }

    /// Sleeps on the paused clock until `START + secs`.
    async fn until(&self, secs: u64) {
        let at = START.saturating_add(Duration::from_secs(secs));
        tokio::time::sleep(at.duration_since(self.clock.now())).await;
    }
}

fn keys(times: &[&str]) -> Vec<String> {
    times
        .iter()
        .map(|t| format!("schedule:tick:2026-01-01T{t}Z"))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn an_every_minute_schedule_fires_at_each_minute_once() {
    let rig = Rig::new();
    rig.create(Overlap::Allow, CatchUp::None, Duration::ZERO)
        .await;
    let worker = rig.worker();
    rig.until(29).await;
    assert_eq!(rig.keys().await, keys(&[]), "before the first minute");
    // A second after: the loop's timer and this one would end at the
    // same instant, in either order.
    rig.until(31).await;
    assert_eq!(rig.keys().await, keys(&["00:01:00"]));
    rig.until(190).await;
    assert_eq!(
        rig.keys().await,
        keys(&["00:01:00", "00:02:00", "00:03:00"])
    );
    let schedule = rig.store.schedule("tick".into()).await.unwrap();
    assert_eq!(
        schedule.last_run_at,
        Some(START.saturating_add(Duration::from_secs(150)))
    );
    worker.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn overlap_skip_holds_firings_while_the_last_task_is_not_finished() {
    let rig = Rig::new();
    // Each task waits 10 minutes before its first try: it stays pending.
    rig.create(Overlap::Skip, CatchUp::None, Duration::from_secs(600))
        .await;
    let worker = rig.worker();
    rig.until(190).await;
    assert_eq!(
        rig.keys().await,
        keys(&["00:01:00"]),
        "02:00, 03:00 skipped"
    );
    let last = rig.store.schedule("tick".into()).await.unwrap();
    let first = last.last_task_id.unwrap();
    rig.store
        .cancel(first, Scope::Admin, rig.clock.now())
        .await
        .unwrap();
    rig.until(250).await;
    assert_eq!(
        rig.keys().await,
        keys(&["00:01:00", "00:04:00"]),
        "the first task ended: 04:00 fires"
    );
    worker.shutdown().await.unwrap();
}

/// A worker fires 00:01, stops; nothing runs from 00:01:10 to 00:05:30.
async fn downtime(catch_up: CatchUp) -> (Rig, Worker<MemoryStore>) {
    let rig = Rig::new();
    rig.create(Overlap::Allow, catch_up, Duration::ZERO).await;
    let worker = rig.worker();
    rig.until(40).await;
    worker.shutdown().await.unwrap();
    assert_eq!(rig.keys().await, keys(&["00:01:00"]));
    rig.until(300).await;
    let restarted = rig.worker();
    (rig, restarted)
}

#[tokio::test(start_paused = true)]
async fn catch_up_latest_fires_the_most_recent_missed_time_once() {
    let (rig, worker) = downtime(CatchUp::Latest).await;
    rig.until(301).await;
    assert_eq!(
        rig.keys().await,
        keys(&["00:01:00", "00:05:00"]),
        "02:00 to 04:00 missed, 05:00 caught up"
    );
    rig.until(340).await;
    assert_eq!(
        rig.keys().await,
        keys(&["00:01:00", "00:05:00", "00:06:00"])
    );
    worker.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn catch_up_none_skips_the_missed_times() {
    let (rig, worker) = downtime(CatchUp::None).await;
    rig.until(329).await;
    assert_eq!(rig.keys().await, keys(&["00:01:00"]), "nothing caught up");
    rig.until(340).await;
    assert_eq!(rig.keys().await, keys(&["00:01:00", "00:06:00"]));
    worker.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_paused_schedule_does_not_fire_and_a_change_wakes_the_loop() {
    let rig = Rig::new();
    rig.create(Overlap::Allow, CatchUp::None, Duration::ZERO)
        .await;
    let worker = rig.worker();
    rig.store
        .update_schedule(
            "tick".into(),
            tc_model::schedule::ScheduleChange::Paused(true),
            rig.clock.now(),
        )
        .await
        .unwrap();
    worker.control().schedules_changed();
    rig.until(130).await;
    assert_eq!(rig.keys().await, keys(&[]), "paused");
    rig.store
        .update_schedule(
            "tick".into(),
            tc_model::schedule::ScheduleChange::Paused(false),
            rig.clock.now(),
        )
        .await
        .unwrap();
    worker.control().schedules_changed();
    rig.until(190).await;
    assert_eq!(
        rig.keys().await,
        keys(&["00:03:00"]),
        "resumed: no catch-up"
    );
    worker.shutdown().await.unwrap();
}

/// A schedule made before the allow-list was narrowed fires
/// nothing outside it. Each case: the template's callback url, the
/// worker's allow-list, and the field its refusal names. The refused
/// firing creates no task and is the schedule's `last_error`; once a
/// worker allows the urls, the next firing submits and clears it.
#[tokio::test(start_paused = true)]
async fn a_firing_outside_the_allow_list_creates_no_task_and_is_recorded() {
    async fn check(callback: Option<&str>, prefixes: &[&str], field: &str) {
        let rig = Rig::new();
        let mut task = NewTask::new(
            "http://downstream.test/tick".into(),
            b"{}".to_vec(),
            "template".into(),
            3,
            Duration::from_secs(5),
            &Limits::default(),
        )
        // Pending until the test ends: no callback is made.
        .and_then(|t| t.with_first_run(FirstRun::After(Duration::from_secs(600))))
        .unwrap();
        if let Some(url) = callback {
            let on = tc_model::callback::CallbackOn::parse(["success"]).unwrap();
            task = task.with_callback(tc_model::callback::Callback::new(url.into(), on).unwrap());
        }
        rig.create_of(task, Overlap::Allow, CatchUp::None).await;
        let narrowed = rig.worker_allowing(prefixes);
        rig.until(31).await;
        assert_eq!(rig.keys().await, keys(&[]), "{field}: no task");
        let schedule = rig.store.schedule("tick".into()).await.unwrap();
        let error = schedule.last_error.expect("the refusal is recorded");
        assert_eq!(
            (error.code.as_str(), error.message.as_str(), error.at),
            (
                "url_not_allowed",
                format!("{field}: not under any allowed prefix of this server").as_str(),
                START.saturating_add(Duration::from_secs(30)),
            ),
            "{field}"
        );
        assert_eq!(schedule.last_run_at, None, "{field}: nothing fired");
        narrowed.shutdown().await.unwrap();

        let widened = rig.worker_allowing(&["http://downstream.test/", "http://hooks.test/"]);
        rig.until(91).await;
        assert_eq!(rig.keys().await, keys(&["00:02:00"]), "{field}: fired");
        let schedule = rig.store.schedule("tick".into()).await.unwrap();
        assert_eq!(schedule.last_error, None, "{field}: a firing clears it");
        widened.shutdown().await.unwrap();
    }
    check(None, &["http://other.test/"], "url").await;
    check(
        Some("http://hooks.test/done"),
        &["http://downstream.test/"],
        "callback_url",
    )
    .await;
}
