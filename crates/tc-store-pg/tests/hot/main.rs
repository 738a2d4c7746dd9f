//! A task's row stays on its page through its claim and its end: both
//! updates are HOT (no index of `tasks` names a column they change, and
//! the page keeps room for the new versions), so neither writes an entry
//! in any of the table's four indexes. A claim takes a page's tasks and
//! more in one statement, so the page must hold a new version of every one
//! of them before any old one can be pruned; the ends, made at once, need
//! the claim's old versions pruned while other ends pin the page.
//!
//! The test is a binary of its own (cargo runs test binaries one after
//! another) and uses a database of its own: run beside the other
//! PostgreSQL tests, their statements held pruning off (33 to 94 of the
//! 200 rows left their page, measured), which is what this test must not
//! depend on.

#![allow(clippy::unwrap_used)]

// The PostgreSQL tests' shared setup; this test uses part of it.
#[allow(dead_code)]
#[path = "../pg/support.rs"]
mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tc_model::Timestamp;
use tc_model::destination::ClaimGate;
use tc_model::store::Tasks;
use tc_store_pg::{PgConfig, PgStore};
use tc_testkit::ClaimDue;

use crate::support::{Raw, database, new_task, succeed_at_once};

/// Each task's page, by id.
const PAGES: &str = "SELECT id, (ctid::text::point)[0]::bigint FROM tasks";

async fn pages(raw: &Raw) -> BTreeMap<Vec<u8>, i64> {
    let rows = raw.client().query(PAGES, &[]).await.unwrap();
    rows.iter().map(|row| (row.get(0), row.get(1))).collect()
}

/// `url` with its database replaced by `name`.
fn url_of(url: &str, name: &str) -> String {
    let (base, rest) = url.rsplit_once('/').unwrap();
    let query = rest
        .split_once('?')
        .map_or(String::new(), |(_, q)| format!("?{q}"));
    format!("{base}/{name}{query}")
}

#[tokio::test]
async fn a_claim_and_an_end_leave_every_task_on_its_page() {
    let Some(db) = database().await else { return };
    let name = format!("tc_hot_{:016x}", fastrand::u64(..));
    let admin = Raw::connect(&db, None, None).await;
    admin
        .execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let store = Arc::new(
        PgStore::open(&url_of(db.url(), &name), PgConfig::default())
            .await
            .unwrap(),
    );
    let raw = Raw::connect(&db, Some(&name), None).await;
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
        ended += succeed_at_once(&store, claimed, now).await;
    }
    assert_eq!(ended, 200);
    let after = pages(&raw).await;
    let moved = before
        .iter()
        .filter(|(id, page)| after.get(*id) != Some(page));
    assert_eq!(moved.count(), 0, "tasks that left their page (not HOT)");
    store.close();
    drop(store);
    drop(raw);
    admin
        .execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .await
        .unwrap();
}
