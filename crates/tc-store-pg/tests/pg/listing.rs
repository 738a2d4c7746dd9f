//! Listing on PostgreSQL while other transactions run: a page never waits
//! for, nor hides tasks behind, a transaction that inserts no task, in this
//! database or another; it never hands out a cursor past a task that an
//! insert still in flight may commit.

use tc_model::store::Tasks;
use tc_model::store::{Cursor, ListQuery, Page, TaskFilter};
use tc_model::{Task, Timestamp};
use tc_store_pg::testing::TestDatabase;
use tc_store_pg::{PgConfig, PgStore};

use crate::support::{Raw, database, new_task};
use tc_model::tenant::Scope;

async fn list(store: &PgStore, filter: TaskFilter, after: Option<Cursor>) -> Page {
    store
        .list(
            ListQuery {
                filter,
                limit: 10,
                after,
                ..ListQuery::default()
            },
            Scope::Admin,
        )
        .await
        .unwrap()
}

fn keys(tasks: &[Task]) -> Vec<&str> {
    tasks.iter().map(|t| t.idempotency_key.as_str()).collect()
}

async fn open(db: &TestDatabase) -> (PgStore, String) {
    let schema = db.fresh_schema();
    let store = PgStore::open(
        db.url(),
        PgConfig {
            schema: Some(schema.clone()),
            pool_size: 4,
            ..PgConfig::default()
        },
    )
    .await
    .unwrap();
    (store, schema)
}

/// An open transaction that took an id and then idles, in another database
/// or in this one, hides nothing: every committed task is listed at once,
/// on a page that says it is the last, and a key finds its task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_transaction_that_inserts_no_task_hides_nothing() {
    let Some(db) = database().await else { return };
    let check = |database: &'static str| {
        let db = &db;
        async move {
            let (store, _) = open(db).await;
            let idle = Raw::connect(db, Some(database), None).await;
            idle.execute("BEGIN; SELECT pg_current_xact_id();")
                .await
                .unwrap();
            let now = Timestamp::default();
            for key in ["a", "b", "c"] {
                store.submit(new_task(key), now).await.unwrap();
            }
            let page = list(&store, TaskFilter::default(), None).await;
            assert_eq!(keys(&page.tasks), ["a", "b", "c"], "idle in {database}");
            assert_eq!(page.next, None, "idle in {database}: the last page");
            let by_key = list(
                &store,
                TaskFilter {
                    idempotency_key: Some("b".into()),
                    ..TaskFilter::default()
                },
                None,
            )
            .await;
            assert_eq!(keys(&by_key.tasks), ["b"], "idle in {database}");
            assert_eq!(by_key.next, None, "idle in {database}");
            idle.execute("ROLLBACK").await.unwrap();
        }
    };
    check("postgres").await;
    check("test").await;
    db.cleanup().await.unwrap();
}

/// A task committed after an insert that is still in flight (and has the
/// lower position) is held back, not skipped: once that insert commits,
/// the listing from the cursor it handed out shows both, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_behind_an_insert_in_flight_is_held_back_never_skipped() {
    let Some(db) = database().await else { return };
    let (store, schema) = open(&db).await;
    let now = Timestamp::default();
    store.submit(new_task("first"), now).await.unwrap();
    let inserting = Raw::connect(&db, None, Some(&schema)).await;
    inserting
        .execute(&format!("BEGIN; {}", Raw::insert_task_sql("slow")))
        .await
        .unwrap();
    store.submit(new_task("after"), now).await.unwrap();

    let page = list(&store, TaskFilter::default(), None).await;
    assert_eq!(
        keys(&page.tasks),
        ["first"],
        "stops before the insert in flight"
    );
    let cursor = page.next.expect("more may follow");

    inserting.execute("COMMIT").await.unwrap();
    let page = list(&store, TaskFilter::default(), Some(cursor)).await;
    assert_eq!(keys(&page.tasks), ["slow", "after"]);
    assert_eq!(page.next, None);
    db.cleanup().await.unwrap();
}

/// The rule that lets a listing pass over other transactions: tasks are
/// inserted by a transaction's first write. One that wrote before (and so
/// had its id before it could say it inserts tasks) is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_that_wrote_before_cannot_insert_tasks() {
    let Some(db) = database().await else { return };
    let (store, schema) = open(&db).await;
    let raw = Raw::connect(&db, None, Some(&schema)).await;
    let refused = raw
        .execute(&format!(
            "BEGIN; SELECT pg_current_xact_id(); {}",
            Raw::insert_task_sql("late")
        ))
        .await
        .unwrap_err();
    assert!(
        refused.contains("first write of a transaction"),
        "{refused}"
    );
    raw.execute("ROLLBACK").await.unwrap();
    raw.execute(&format!("BEGIN; {}; COMMIT", Raw::insert_task_sql("first")))
        .await
        .unwrap();
    let page = list(&store, TaskFilter::default(), None).await;
    assert_eq!(keys(&page.tasks), ["first"]);
    db.cleanup().await.unwrap();
}
