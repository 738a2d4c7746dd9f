//! Three nodes on one PostgreSQL database fire one schedule: each node's
//! worker runs its own firing loop, on the system clock, against the
//! database in its production (database-clock) mode. The schedule fires
//! every second (a six-field pattern, which only tc-model's
//! `CronPattern::parse_with_seconds` takes: the API refuses it), so a few
//! seconds of real time hold several firings, each of which every node
//! may submit: exactly one task per fire time must exist.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tc_downstream::fake::{FakeDownstream, Script};
use tc_model::schedule::{
    CatchUp, CronPattern, Overlap, Recurrence, ScheduleSpec, TaskTemplate, Zone,
};
use tc_model::store::{ListQuery, TaskFilter};
use tc_model::store::{Schedules, Tasks};
use tc_store_pg::{PgConfig, PgStore};
use tc_worker::{Clock, Worker, WorkerConfig, WorkerMetrics};

use crate::support::{database, new_task};
use tc_model::tenant::Scope;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_firing_every_second_make_one_task_per_firing() {
    let Some(db) = database().await else { return };
    let schema = db.fresh_schema();
    let config = || PgConfig {
        schema: Some(schema.clone()),
        pool_size: 4,
        ..PgConfig::default()
    };
    let mut stores = Vec::new();
    for _ in 0..3 {
        stores.push(Arc::new(PgStore::open(db.url(), config()).await.unwrap()));
    }
    let clock = Clock::system();
    let spec = ScheduleSpec {
        name: "every-second".into(),
        when: Recurrence {
            cron: CronPattern::parse_with_seconds("* * * * * *").unwrap(),
            zone: Zone::UTC,
        },
        task: TaskTemplate::of(new_task("template")),
        paused: false,
        overlap: Overlap::Allow,
        catch_up: CatchUp::None,
    };
    stores[0].create_schedule(spec, clock.now()).await.unwrap();
    let downstream = Arc::new(FakeDownstream::new(Script::new()));
    let workers: Vec<Worker<PgStore>> = stores
        .iter()
        .map(|store| {
            Worker::spawn(
                Arc::clone(store),
                Arc::clone(&downstream),
                WorkerConfig {
                    poll_interval: Duration::from_millis(100),
                    ..WorkerConfig::default()
                },
                clock.clone(),
                WorkerMetrics::default(),
            )
        })
        .collect();
    // Real time is what this test is about: four seconds of firings.
    tokio::time::sleep(Duration::from_secs(4)).await;
    for worker in workers {
        worker.shutdown().await.unwrap();
    }

    let page = stores[1]
        .list(
            ListQuery {
                filter: TaskFilter::default(),
                limit: 1000,
                ..ListQuery::default()
            },
            Scope::Admin,
        )
        .await
        .unwrap();
    let keys: Vec<&str> = page
        .tasks
        .iter()
        .map(|t| t.idempotency_key.as_str())
        .filter(|k| k.starts_with("schedule:every-second:"))
        .collect();
    let distinct: BTreeSet<&str> = keys.iter().copied().collect();
    assert_eq!(keys.len(), page.tasks.len(), "only the schedule's tasks");
    assert_eq!(
        keys.len(),
        distinct.len(),
        "one task per fire time: {keys:?}"
    );
    assert!(
        keys.len() >= 3,
        "four seconds hold at least three firings: {keys:?}"
    );
    for key in &keys {
        let time = key.trim_start_matches("schedule:every-second:");
        assert!(
            time.len() == 20 && time.ends_with('Z'),
            "a whole second, RFC 3339 UTC: {key}"
        );
    }
    // The record names the latest firing, whichever node wrote last.
    let schedule = stores[2].schedule("every-second".into()).await.unwrap();
    let latest = distinct.iter().next_back().unwrap();
    let recorded = tc_model::schedule::firing_key("every-second", schedule.last_run_at.unwrap());
    assert_eq!(&recorded.as_str(), latest);
    let task = stores[2]
        .get(schedule.last_task_id.unwrap(), Scope::Admin)
        .await
        .unwrap();
    assert_eq!(task.idempotency_key, recorded);
    drop(stores);
    db.cleanup().await.unwrap();
}
