//! Upgrading a schema that holds many tasks while a node of the previous
//! version keeps serving: a step that fills a column for every row does it
//! in batches, never under one long table lock.

use std::collections::BTreeMap;

use tc_model::State;
use tc_model::store::Tasks;
use tc_store_pg::{PgConfig, PgStore};

use crate::support::{Raw, database};

/// The urls the old rows carry: the destination each must end with is
/// `tc_model::destination_of` of it.
const URLS: [&str; 5] = [
    "http://Example.COM/a",
    "https://user:secret@api.example.org/x?y=1",
    "http://127.0.0.1:8080/p",
    "https://[::1]:9443/q",
    "HTTP://host.test:81",
];

/// An insert of a pending task as a version-4 node writes one (no
/// destination column yet).
fn old_insert(key: &str) -> String {
    format!(
        "INSERT INTO tasks (id, idempotency_key, state, url, body, max_attempts, timeout_ns, \
                            created_at, updated_at, next_run_at) \
         VALUES (uuid_send(gen_random_uuid()), '{key}', 'pending', '{}', '\\x7b7d', 3, \
                 1000000000, 0, 0, 0)",
        URLS[1]
    )
}

/// 200,000 tasks written by a version-4 node; a current node opens the
/// schema and upgrades it (step 5 fills every task's destination) while
/// the version-4 node goes on submitting, reading and canceling. The old
/// node's statements keep completing during the upgrade (under one long
/// lock they would wait for all of it); afterwards every task, old or
/// submitted meanwhile, has the destination its url names, and the state
/// counts are right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_fills_200000_tasks_in_batches_while_an_older_node_serves() {
    let Some(db) = database().await else { return };
    let schema = db.schema_at(4).await.unwrap();
    let old = Raw::connect_old(&db, &schema).await;
    let urls = URLS
        .iter()
        .map(|u| format!("'{u}'"))
        .collect::<Vec<_>>()
        .join(", ");
    // Four transactions: positions within one count up to 65,535.
    for part in 0..4 {
        old.execute(&format!(
            "INSERT INTO tasks (id, idempotency_key, state, url, body, max_attempts, timeout_ns, \
                                created_at, updated_at, next_run_at, finished_at) \
             SELECT uuid_send(gen_random_uuid()), 'old-' || g, \
                    (ARRAY['pending', 'success', 'failed'])[1 + g % 3], \
                    (ARRAY[{urls}])[1 + g % {}], '\\x7b7d', 3, 1000000000, g, g, \
                    CASE WHEN g % 3 = 0 THEN g END, CASE WHEN g % 3 <> 0 THEN g END \
             FROM generate_series({}, {}) AS g",
            URLS.len(),
            part * 50_000 + 1,
            (part + 1) * 50_000
        ))
        .await
        .unwrap();
    }

    let upgrade = tokio::spawn({
        let (url, schema) = (db.url().to_owned(), schema.clone());
        async move {
            PgStore::open(
                &url,
                PgConfig {
                    schema: Some(schema),
                    pool_size: 2,
                    ..PgConfig::default()
                },
            )
            .await
        }
    });
    // The old node serves: a submit, a read and a cancel per round.
    let mut rounds_during_upgrade = 0u32;
    let mut submitted = 0i64;
    for n in 0..100_000u32 {
        if upgrade.is_finished() {
            break;
        }
        // Until the fence of schema step 25 refuses the old node's writes.
        let fenced = |e: &String| e.contains("schema 25");
        match old.execute(&old_insert(&format!("during-{n}"))).await {
            Ok(()) => submitted += 1,
            Err(e) if fenced(&e) => break,
            Err(e) => panic!("{e}"),
        }
        let read = old
            .client()
            .query_one(
                "SELECT state FROM tasks WHERE idempotency_key = $1",
                &[&format!("old-{}", 3 * n + 3)],
            )
            .await
            .unwrap();
        assert_eq!(read.get::<_, String>(0), "pending");
        match old
            .execute(&format!(
                "UPDATE tasks SET state = 'canceled' WHERE idempotency_key = 'old-{}'",
                3 * n + 3
            ))
            .await
        {
            Ok(()) => {}
            Err(e) if fenced(&e) => break,
            Err(e) => panic!("{e}"),
        }
        if !upgrade.is_finished() {
            rounds_during_upgrade += 1;
        }
    }
    let store = upgrade.await.unwrap().unwrap();
    assert!(
        rounds_during_upgrade >= 10,
        "the old node answered only {rounds_during_upgrade} rounds while the upgrade ran"
    );

    let mut destinations: BTreeMap<String, i64> = BTreeMap::new();
    for row in old
        .client()
        .query(
            "SELECT url, destination, count(*) FROM tasks GROUP BY url, destination",
            &[],
        )
        .await
        .unwrap()
    {
        let (url, destination): (String, String) = (row.get(0), row.get(1));
        assert_eq!(destination, tc_model::destination_of(&url), "{url}");
        *destinations.entry(destination).or_default() += row.get::<_, i64>(2);
    }
    let total: i64 = destinations.values().sum();
    assert_eq!(total, 200_000 + submitted, "{destinations:?}");

    let counts = store.count_by_state().await.unwrap();
    for row in old
        .client()
        .query("SELECT state, count(*) FROM tasks GROUP BY state", &[])
        .await
        .unwrap()
    {
        let state: State = row.get::<_, String>(0).parse().unwrap();
        assert_eq!(counts.get(state) as i64, row.get::<_, i64>(1), "{state}");
    }
    drop(store);
    db.cleanup().await.unwrap();
}
