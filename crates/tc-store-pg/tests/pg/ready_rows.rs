//! A destination's `pending_destinations` row is written when what claims
//! read of it changes, not on every claim: a claim that leaves the
//! destination ready writes no new version of the row (each one cost two
//! index entries), nor does the fold of a later due mark; a claim that
//! leaves only tasks due later takes the row out of the ready set with
//! their time, and the next claim at that time finds them.

use std::time::Duration;

use tc_model::destination::ClaimGate;
use tc_model::store::Tasks;
use tc_model::{FirstRun, Timestamp};
use tc_store_pg::{PgClock, PgConfig, PgStore};
use tc_testkit::ClaimDue;

use crate::support::{Raw, database, new_task};

/// The row's version (its place and the transaction that wrote it), and
/// what it says.
const ROW: &str = "SELECT ctid::text || ' ' || xmin::text, ready, next_due \
                   FROM pending_destinations WHERE destination = '127.0.0.1:9'";

async fn row(raw: &Raw) -> (String, bool, i64) {
    let row = raw.client().query_one(ROW, &[]).await.unwrap();
    (row.get(0), row.get(1), row.get(2))
}

#[tokio::test]
async fn a_ready_destination_s_row_is_written_only_when_it_leaves_the_ready_set() {
    let Some(db) = database().await else { return };
    let schema = db.fresh_schema();
    let config = PgConfig {
        schema: Some(schema.clone()),
        clock: PgClock::Caller,
        ..PgConfig::default()
    };
    let store = PgStore::open(db.url(), config).await.unwrap();
    let raw = Raw::connect(&db, None, Some(&schema)).await;
    let at = Timestamp::from_millis;
    let claim = |n: usize, now: i64| {
        store.claim_due(n, at(now), Duration::from_secs(60), ClaimGate::default())
    };
    for k in 0..3 {
        store
            .submit(new_task(&format!("now-{k}")), at(10))
            .await
            .unwrap();
    }
    let later = new_task("later")
        .with_first_run(FirstRun::At(at(5_000)))
        .unwrap();
    store.submit(later, at(10)).await.unwrap();
    assert_eq!(claim(1, 20).await.unwrap().len(), 1);
    let (version, ready, _) = row(&raw).await;
    assert!(ready);
    // Two tasks still due: the row stays ready, unwritten.
    assert_eq!(claim(1, 30).await.unwrap().len(), 1);
    assert_eq!(row(&raw).await.0, version);
    // A new due task: its mark folds into the ready row, which stays unwritten.
    store.submit(new_task("again"), at(40)).await.unwrap();
    assert_eq!(claim(1, 50).await.unwrap().len(), 1);
    assert_eq!(row(&raw).await.0, version);
    // The last due ones taken: only the later task is left, not due yet.
    assert_eq!(claim(5, 60).await.unwrap().len(), 1);
    let (moved, ready, next_due) = row(&raw).await;
    assert_ne!(moved, version);
    assert_eq!((ready, next_due), (false, 5_000));
    assert!(claim(5, 4_999).await.unwrap().is_empty());
    let last = claim(5, 5_000).await.unwrap();
    assert_eq!(
        last.iter()
            .map(|t| t.idempotency_key.as_str())
            .collect::<Vec<_>>(),
        ["later"]
    );
    store.close();
    drop(store);
    db.cleanup().await.unwrap();
}
