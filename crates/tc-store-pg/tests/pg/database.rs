//! What only PostgreSQL shows: schemas that are refused untouched, two nodes
//! migrating at once, the database's clock, and notifications between two
//! stores on one schema (two nodes).

use std::time::Duration;

use tc_model::store::Completion;
use tc_model::store::{Destinations, Schedules, Tasks, Work};
use tc_model::{State, Timestamp};
use tc_store_pg::testing::TestDatabase;
use tc_store_pg::{OpenError, PgConfig, PgEvent, PgStore};
use tokio::sync::broadcast;

use crate::support::{database, new_task};
use tc_model::tenant::Scope;
use tc_testkit::ClaimDue;

const LEASE: Duration = Duration::from_secs(30);

fn config(schema: &str) -> PgConfig {
    PgConfig {
        schema: Some(schema.to_owned()),
        pool_size: 4,
        ..PgConfig::default()
    }
}

/// The schema's tables and the version row, as text, to show nothing moved.
async fn snapshot(db: &TestDatabase, schema: &str) -> String {
    // Written into a table of the test schema by the database itself, read
    // back through a store-independent query.
    let url = db.url().to_owned();
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let driver = tokio::spawn(connection);
    let rows = client
        .query(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = $1 ORDER BY 1",
            &[&schema],
        )
        .await
        .unwrap();
    let mut text: Vec<String> = rows.iter().map(|r| r.get::<_, String>(0)).collect();
    if text.iter().any(|t| t == "taskcenter_schema") {
        let rows = client
            .query(
                &format!("SELECT application || ':' || version FROM {schema}.taskcenter_schema"),
                &[],
            )
            .await
            .unwrap();
        text.extend(rows.iter().map(|r| r.get::<_, String>(0)));
    }
    drop(client);
    let _ = driver.await;
    text.join(",")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_and_newer_schemas_are_refused_untouched() {
    let Some(db) = database().await else { return };
    let check = |setup: String, want: fn(&OpenError) -> bool| {
        let db = &db;
        async move {
            let schema = db.fresh_schema();
            db.execute(&format!(
                "CREATE SCHEMA {schema}; SET search_path = {schema}; {setup}"
            ))
            .await
            .unwrap();
            let before = snapshot(db, &schema).await;
            let refused = PgStore::open(db.url(), config(&schema)).await;
            match refused {
                Err(e) => assert!(want(&e), "{setup}: wrong refusal {e}"),
                Ok(_) => panic!("{setup}: opened"),
            }
            assert_eq!(snapshot(db, &schema).await, before, "{setup}: touched");
        }
    };
    check(
        "CREATE TABLE invoices (id int); CREATE TABLE tasks (x text);".into(),
        |e| matches!(e, OpenError::ForeignSchema { version: None, .. }),
    )
    .await;
    check(
        "CREATE TABLE taskcenter_schema (application text, version int); \
         INSERT INTO taskcenter_schema VALUES ('someone-else', 1);"
            .into(),
        |e| {
            matches!(
                e,
                OpenError::ForeignSchema {
                    version: Some(1),
                    ..
                }
            )
        },
    )
    .await;
    check(
        "CREATE TABLE taskcenter_schema (application text, version int); \
         INSERT INTO taskcenter_schema VALUES ('taskcenter', 99);"
            .into(),
        |e| matches!(e, OpenError::NewerSchema { found: 99, .. }),
    )
    .await;
    db.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_starting_together_migrate_once_and_reopen_keeps_tasks() {
    let Some(db) = database().await else { return };
    let schema = db.fresh_schema();
    let opens: Vec<_> = (0..4)
        .map(|_| {
            let (url, config) = (db.url().to_owned(), config(&schema));
            tokio::spawn(async move { PgStore::open(&url, config).await })
        })
        .collect();
    let mut stores = Vec::new();
    for open in opens {
        stores.push(open.await.unwrap().unwrap());
    }
    assert_eq!(
        snapshot(&db, &schema).await,
        format!(
            "api_keys,attempts,destination_holds,destination_tokens,destinations,due_marks,event_tasks,events,flow_keys,pending_destinations,queue,schedules,server_keys,subscriptions,task_count_deltas,task_count_totals,taskcenter_schema,tasks,tenants,topics,taskcenter:{}",
            tc_store_pg::SCHEMA_VERSION
        )
    );
    let task = stores[0]
        .submit(new_task("kept"), Timestamp::default())
        .await
        .unwrap()
        .task;
    drop(stores);
    let reopened = PgStore::open(db.url(), config(&schema)).await.unwrap();
    assert_eq!(
        reopened
            .get(task.id, Scope::Admin)
            .await
            .unwrap()
            .idempotency_key,
        "kept"
    );
    drop(reopened);
    db.cleanup().await.unwrap();
}

/// A schema of version 6 (before methods, headers and signing secrets)
/// with a task and a destination's settings is upgraded in place: the task
/// is a POST with no headers, the settings are kept, and the destination
/// takes headers and secrets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_6_schema_is_upgraded_in_place() {
    let Some(db) = database().await else { return };
    let schema = db.schema_at(6).await.unwrap();
    db.execute(&format!(
        "SET search_path TO {schema};
         INSERT INTO tasks (id, idempotency_key, state, url, body, max_attempts, timeout_ns,
                            created_at, updated_at, next_run_at, destination)
         VALUES ('\\x0190f3a2000070008000000000000001', 'old', 'pending',
                 'http://127.0.0.1:9/old', '\\x7b7d', 3, 1000000000, 0, 0, 0, '127.0.0.1:9');
         INSERT INTO destinations (destination, max_in_flight, updated_at)
         VALUES ('127.0.0.1:9', 4, 0);"
    ))
    .await
    .unwrap();

    let store = PgStore::open(db.url(), config(&schema)).await.unwrap();
    let old = store
        .get(
            "0190f3a2-0000-7000-8000-000000000001".parse().unwrap(),
            Scope::Admin,
        )
        .await
        .unwrap();
    assert_eq!(old.idempotency_key, "old");
    assert_eq!((old.method, old.headers.len()), (tc_model::Method::Post, 0));
    let destination = store.destination("127.0.0.1:9".into()).await.unwrap();
    assert_eq!(destination.settings.max_in_flight, Some(4));
    assert!(
        destination.settings.headers.is_empty() && destination.settings.signing_secrets.is_empty()
    );
    let headers =
        tc_model::Headers::parse([("authorization".to_owned(), "Bearer t".to_owned())]).unwrap();
    let secrets =
        tc_model::signing::SigningSecrets::parse(&["whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"])
            .unwrap();
    let updated = store
        .update_destination(
            "127.0.0.1:9".into(),
            tc_model::destination::DestinationUpdate {
                headers: Some(headers.clone()),
                signing_secrets: Some(secrets.clone()),
                ..Default::default()
            },
            Timestamp::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        (
            updated.settings.max_in_flight,
            &updated.settings.headers,
            &updated.settings.signing_secrets
        ),
        (Some(4), &headers, &secrets)
    );
    // Step 10 found the old pending task's destination: a claim's walk
    // meets it through its due time, and its count is one pending.
    assert_eq!((updated.pending, updated.running), (1, 0));
    let claimed = store
        .claim_due(
            1,
            Timestamp::default(),
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].idempotency_key, "old");
    drop(store);
    assert_eq!(
        snapshot(&db, &schema).await,
        format!(
            "api_keys,attempts,destination_holds,destination_tokens,destinations,due_marks,event_tasks,events,flow_keys,pending_destinations,queue,schedules,server_keys,subscriptions,task_count_deltas,task_count_totals,taskcenter_schema,tasks,tenants,topics,taskcenter:{}",
            tc_store_pg::SCHEMA_VERSION
        )
    );
    db.cleanup().await.unwrap();
}

/// A schema of version 9 (before trace contexts) with a task is upgraded in
/// place: the old task has no trace context and is still claimed; a new
/// task keeps the one it was submitted with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_9_schema_is_upgraded_in_place() {
    let Some(db) = database().await else { return };
    let schema = db.schema_at(9).await.unwrap();
    db.execute(&format!(
        "SET search_path TO {schema};
         INSERT INTO tasks (id, idempotency_key, state, url, body, max_attempts, timeout_ns,
                            created_at, updated_at, next_run_at, destination, method)
         VALUES ('\\x0190f3a2000070008000000000000001', 'old', 'pending',
                 'http://127.0.0.1:9/old', '\\x7b7d', 3, 1000000000, 0, 0, 0, '127.0.0.1:9',
                 'PUT');"
    ))
    .await
    .unwrap();

    let store = PgStore::open(db.url(), config(&schema)).await.unwrap();
    let old = store
        .get(
            "0190f3a2-0000-7000-8000-000000000001".parse().unwrap(),
            Scope::Admin,
        )
        .await
        .unwrap();
    assert_eq!((old.method, &old.trace), (tc_model::Method::Put, &None));
    let context = tc_model::TraceContext::from_headers(
        Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        Some("congo=t61rcWkgMzE"),
    )
    .unwrap();
    let new = tc_model::NewTask::new(
        "http://127.0.0.1:9/new".into(),
        b"{}".to_vec(),
        "new".into(),
        1,
        std::time::Duration::from_secs(1),
        &tc_model::Limits::default(),
    )
    .unwrap()
    .with_trace(context.clone());
    let created = store.submit(new, Timestamp::default()).await.unwrap().task;
    assert_eq!(
        store.get(created.id, Scope::Admin).await.unwrap().trace,
        Some(context)
    );
    // The upgraded schema takes schedules (step 13), kept across a reopen
    // with their firing record.
    let spec = tc_model::schedule::ScheduleSpec {
        name: "nightly".into(),
        when: tc_model::schedule::Recurrence {
            cron: tc_model::schedule::CronPattern::parse("30 2 * * *").unwrap(),
            zone: tc_model::schedule::Zone::parse("America/New_York").unwrap(),
        },
        task: tc_model::schedule::TaskTemplate::of(new_task("template")),
        paused: true,
        overlap: tc_model::schedule::Overlap::Skip,
        catch_up: tc_model::schedule::CatchUp::Latest,
    };
    let made = store
        .create_schedule(spec, Timestamp::from_millis(5))
        .await
        .unwrap();
    assert!(
        store
            .record_firing("nightly".into(), Timestamp::from_millis(9), created.id)
            .await
            .unwrap()
    );
    drop(store);
    let store = PgStore::open(db.url(), config(&schema)).await.unwrap();
    let kept = store.schedule("nightly".into()).await.unwrap();
    assert_eq!(kept.spec, made.spec);
    assert_eq!(
        (kept.last_run_at, kept.last_task_id),
        (Some(Timestamp::from_millis(9)), Some(created.id))
    );
    drop(store);
    assert_eq!(
        snapshot(&db, &schema).await,
        format!(
            "api_keys,attempts,destination_holds,destination_tokens,destinations,due_marks,event_tasks,events,flow_keys,pending_destinations,queue,schedules,server_keys,subscriptions,task_count_deltas,task_count_totals,taskcenter_schema,tasks,tenants,topics,taskcenter:{}",
            tc_store_pg::SCHEMA_VERSION
        )
    );
    db.cleanup().await.unwrap();
}

/// A schema of version 11 (before callbacks) with a running task is
/// upgraded in place: the old task asks for no callback, ends without one
/// and counts its end; a new task with a callback gets it when canceled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_11_schema_is_upgraded_in_place() {
    let Some(db) = database().await else { return };
    let schema = db.schema_at(11).await.unwrap();
    db.execute(&format!(
        "SET search_path TO {schema};
         INSERT INTO tasks (id, idempotency_key, state, url, body, max_attempts, timeout_ns,
                            created_at, updated_at, next_run_at, destination, method)
         VALUES ('\\x0190f3a2000070008000000000000002', 'old', 'pending',
                 'http://127.0.0.1:9/old', '\\x7b7d', 3, 1000000000, 0, 0, 0, '127.0.0.1:9',
                 'POST');"
    ))
    .await
    .unwrap();

    let store = PgStore::open(db.url(), config(&schema)).await.unwrap();
    let id = "0190f3a2-0000-7000-8000-000000000002".parse().unwrap();
    let old = store.get(id, Scope::Admin).await.unwrap();
    assert_eq!(
        (
            &old.callback,
            old.callback_of,
            old.callback_task_id,
            old.ends
        ),
        (&None, None, None, 0)
    );
    let canceled = store
        .cancel(id, Scope::Admin, Timestamp::default())
        .await
        .unwrap();
    assert_eq!((canceled.ends, canceled.callback_task_id), (1, None));
    let new = tc_model::NewTask::new(
        "http://127.0.0.1:9/new".into(),
        b"{}".to_vec(),
        "new".into(),
        1,
        std::time::Duration::from_secs(1),
        &tc_model::Limits::default(),
    )
    .unwrap()
    .with_callback(
        tc_model::callback::Callback::new(
            "http://127.0.0.1:9/done".into(),
            tc_model::callback::CallbackOn::parse(["canceled"]).unwrap(),
        )
        .unwrap(),
    );
    let created = store.submit(new, Timestamp::default()).await.unwrap().task;
    let canceled = store
        .cancel(created.id, Scope::Admin, Timestamp::default())
        .await
        .unwrap();
    let callback = store
        .get(canceled.callback_task_id.expect("a callback"), Scope::Admin)
        .await
        .unwrap();
    assert_eq!(callback.callback_of, Some(created.id));
    assert_eq!(callback.idempotency_key, format!("callback:{}", created.id));
    drop(store);
    db.cleanup().await.unwrap();
}

/// A node whose clock is an hour off neither steals a live lease nor stamps
/// its own time: in database mode every time is the database's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_and_due_times_follow_the_database_clock() {
    let Some(db) = database().await else { return };
    let schema = db.fresh_schema();
    let behind = Timestamp::from_millis(0);
    let ahead = Timestamp::from_millis(4_000_000_000_000);
    let store = PgStore::open(db.url(), config(&schema)).await.unwrap();
    let wall = Timestamp::from_millis(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64,
    );

    // Submitted by a node whose clock reads 1970: stamped and due by the database.
    let task = store.submit(new_task("a"), behind).await.unwrap().task;
    let skew = task.created_at.as_millis() - wall.as_millis();
    assert!(
        skew.abs() < 60_000,
        "created_at is the database's now: {skew} ms off"
    );
    let claimed = store
        .claim_due(
            10,
            behind,
            LEASE,
            tc_model::destination::ClaimGate::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        claimed.len(),
        1,
        "due by the database's clock, not the caller's"
    );
    let lease =
        claimed[0].lease_until.unwrap().as_millis() - claimed[0].started_at.unwrap().as_millis();
    assert_eq!(lease, 30_000);

    // A node whose clock is far ahead does not see the lease as expired.
    assert_eq!(store.recover_expired(ahead).await.unwrap(), 0);
    assert_eq!(
        store.get(task.id, Scope::Admin).await.unwrap().state,
        State::Running
    );

    // A retry "in 10 s" by the caller's clock is due 10 s after the database's now.
    let done = store
        .complete(
            task.id,
            1,
            Completion::Retry {
                next_run_at: behind.saturating_add(Duration::from_secs(10)),
                reason: "http_503".into(),
                http_status: Some(503),
            },
            behind,
        )
        .await
        .unwrap();
    assert_eq!(done, tc_model::store::Guarded::Applied(State::Pending));
    let retried = store.get(task.id, Scope::Admin).await.unwrap();
    let delay = retried.next_run_at.unwrap().as_millis() - retried.updated_at.as_millis();
    assert_eq!(delay, 10_000);
    assert!(
        store
            .claim_due(
                10,
                ahead,
                LEASE,
                tc_model::destination::ClaimGate::default()
            )
            .await
            .unwrap()
            .is_empty(),
        "not due yet by the database's clock"
    );
    // next_due speaks the system clock: about 10 s from now.
    let due = store.next_due().await.unwrap().unwrap();
    let from_now = due.as_millis() - wall.as_millis();
    assert!(
        (5_000..70_000).contains(&from_now),
        "next_due {from_now} ms from now"
    );
    drop(store);
    db.cleanup().await.unwrap();
}

async fn next_event(events: &mut broadcast::Receiver<PgEvent>, want: PgEvent) {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match events.recv().await {
                Ok(event) if event == want => return,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => panic!("events ended: {e}"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {want:?} within 10 s"));
}

/// Two stores on one schema are two nodes: a submit on A wakes B, a cancel
/// of a running task on A tells B, a cancel of a pending one tells nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submits_and_cancels_are_announced_to_other_nodes() {
    let Some(db) = database().await else { return };
    let schema = db.fresh_schema();
    let a = PgStore::open(db.url(), config(&schema)).await.unwrap();
    let b = PgStore::open(db.url(), config(&schema)).await.unwrap();
    let mut heard = b.subscribe();
    // The listener's own Wake after connecting says it is listening.
    next_event(&mut heard, PgEvent::Wake).await;

    let now = Timestamp::default();
    let running = a.submit(new_task("run"), now).await.unwrap().task;
    next_event(&mut heard, PgEvent::Wake).await;
    let pending = a.submit(new_task("wait"), now).await.unwrap().task;
    let claimed = b
        .claim_due(1, now, LEASE, tc_model::destination::ClaimGate::default())
        .await
        .unwrap();
    assert_eq!(claimed[0].id, running.id);

    a.cancel(pending.id, Scope::Admin, now).await.unwrap();
    a.cancel(running.id, Scope::Admin, now).await.unwrap();
    let mut cancels = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), async {
        while cancels.is_empty() {
            if let Ok(PgEvent::Canceled(id)) = heard.recv().await {
                cancels.push(id);
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(
        cancels,
        vec![running.id],
        "only the running task's cancel is announced"
    );
    drop((a, b));
    db.cleanup().await.unwrap();
}

/// A node never hears its own submit's wake-up (its worker was told
/// in-process; the echo cost a claim that found nothing), while the other
/// node does. Deterministic through PostgreSQL's delivery order: A's
/// listener gets every notification in commit order, so had A heard its
/// submit's wake-up it would come before the cancel announced after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_does_not_hear_its_own_wake_up() {
    let Some(db) = database().await else { return };
    let schema = db.fresh_schema();
    // Each listener's own Wake after connecting says it is listening.
    let a = PgStore::open(db.url(), config(&schema)).await.unwrap();
    let mut a_heard = a.subscribe();
    next_event(&mut a_heard, PgEvent::Wake).await;
    let b = PgStore::open(db.url(), config(&schema)).await.unwrap();
    let mut b_heard = b.subscribe();
    next_event(&mut b_heard, PgEvent::Wake).await;

    let now = Timestamp::default();
    let task = a.submit(new_task("run"), now).await.unwrap().task;
    // B heard it, so the wake-up was committed and delivered.
    next_event(&mut b_heard, PgEvent::Wake).await;
    let claimed = a
        .claim_due(1, now, LEASE, tc_model::destination::ClaimGate::default())
        .await
        .unwrap();
    assert_eq!(claimed[0].id, task.id);
    a.cancel(task.id, Scope::Admin, now).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), a_heard.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first, PgEvent::Canceled(task.id), "A heard its own wake-up");
    drop((a, b));
    db.cleanup().await.unwrap();
}
