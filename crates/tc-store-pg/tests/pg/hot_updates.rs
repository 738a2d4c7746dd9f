//! A task's row stays on its page through its claim and its end: both
//! updates are HOT (no index of `tasks` names a column they change, and
//! the page keeps room for the new versions), so neither writes an entry
//! in any of the table's four indexes. A claim takes a page's tasks and
//! more in one statement, so the page must hold a new version of every one
//! of them before any old one can be pruned.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tc_model::destination::ClaimGate;
use tc_model::store::{Completion, Guarded, Tasks, Work};
use tc_model::{State, Timestamp};
use tc_store_pg::{PgConfig, PgStore};
use tc_testkit::ClaimDue;

use crate::support::{Raw, database, new_task};

/// Each task's page, by id.
const PAGES: &str = "SELECT id, (ctid::text::point)[0]::bigint FROM tasks";

async fn pages(raw: &Raw) -> BTreeMap<Vec<u8>, i64> {
    let rows = raw.client().query(PAGES, &[]).await.unwrap();
    rows.iter().map(|row| (row.get(0), row.get(1))).collect()
}

#[tokio::test]
async fn a_claim_and_an_end_leave_every_task_on_its_page() {
    let Some(db) = database().await else { return };
    let schema = db.fresh_schema();
    let config = PgConfig {
        schema: Some(schema.clone()),
        ..PgConfig::default()
    };
    let store = Arc::new(PgStore::open(db.url(), config).await.unwrap());
    let raw = Raw::connect(&db, None, Some(&schema)).await;
    let now = Timestamp::default();
    // Submitted one by one from 32 callers, as a node's requests come.
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..32 {
        let store = Arc::clone(&store);
        callers.spawn(async move {
            for k in (caller..200).step_by(32) {
                store
                    .submit(new_task(&format!("h-{k}")), now)
                    .await
                    .unwrap();
            }
        });
    }
    callers.join_all().await;
    let before = pages(&raw).await;
    assert_eq!(before.len(), 200);
    let mut ended = 0;
    for _ in 0..20 {
        let claimed = store
            .claim_due(32, now, Duration::from_secs(60), ClaimGate::default())
            .await
            .unwrap();
        // Ended at once, as a worker's calls end.
        let mut ends = tokio::task::JoinSet::new();
        for task in claimed {
            let store = Arc::clone(&store);
            ends.spawn(async move {
                let success = Completion::Success {
                    http_status: 200,
                    result: b"{}".to_vec(),
                    content_type: None,
                };
                store.complete(task.id, task.attempt, success, now).await
            });
        }
        for answer in ends.join_all().await {
            assert_eq!(answer.unwrap(), Guarded::Applied(State::Success));
            ended += 1;
        }
    }
    assert_eq!(ended, 200);
    let after = pages(&raw).await;
    let moved = before
        .iter()
        .filter(|(id, page)| after.get(*id) != Some(page));
    assert_eq!(moved.count(), 0, "tasks that left their page (not HOT)");
    store.close();
    db.cleanup().await.unwrap();
}
