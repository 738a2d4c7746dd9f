//! Claims in priority order: higher priority first
//! within a destination, a task counting one level higher for each aging
//! period it waited (tc-model's [`tc_model::priority::claim_key`], written
//! here in SQL as `next_run_at - priority * aging`).
//!
//! Tasks without a priority (0) keep the claim's oldest-due-first
//! statement, which skips rows another node locked and reads on. A claim
//! first asks `queue_prioritized` (schema step 22: the due tasks of
//! priority above 0) whether the destination has any, one seek into an
//! index that is empty unless priorities are used; only then does it run
//! [`claim`], which merges the oldest tasks of priority 0 with every due
//! task of a higher one by the key.

use std::time::Duration;

use deadpool_postgres::Transaction;
use tc_model::Task;
use tc_model::store::StoreError;

use crate::error::db;
use crate::rows::{self, millis, task_columns};
use crate::write_ops::claim_tail;

/// Whether destination `$2` has due tasks of priority above 0 (of tenant
/// `$3`, when not NULL).
pub(crate) const HAS_PRIORITIZED: &str = "SELECT EXISTS (SELECT 1 FROM queue \
     WHERE state = 'pending' AND priority > 0 AND destination = $2 \
       AND next_run_at <= tc_now_ms($1) \
       AND ($3::text IS NULL OR tenant = $3))";

/// Whether `destination` has due tasks of priority above 0 (of `tenant`,
/// when given: `''` for the tasks without one).
pub(crate) async fn has_prioritized(
    tx: &Transaction<'_>,
    destination: &str,
    tenant: Option<&str>,
    now: Option<i64>,
) -> Result<bool, StoreError> {
    let stmt = tx.prepare_cached(HAS_PRIORITIZED).await.map_err(db)?;
    tx.query_one(&stmt, &[&now, &destination, &tenant])
        .await
        .map_err(db)?
        .try_get(0)
        .map_err(db)
}

/// The claim statement by the key: `$5` the aging in ms, `$tenant` a test
/// of the tenant column (with `$6`) or nothing.
macro_rules! claim_by_key {
    ($tenant:literal) => {
        concat!(
            "WITH cand AS ( \
                 (SELECT pos, next_run_at AS k FROM queue \
                  WHERE state = 'pending' AND destination = $4 ",
            $tenant,
            "      AND next_run_at <= tc_now_ms($1) AND priority = 0 \
                  ORDER BY next_run_at, pos LIMIT $2) \
                 UNION ALL \
                 (SELECT pos, next_run_at - priority::bigint * $5 FROM queue \
                  WHERE state = 'pending' AND priority > 0 AND destination = $4 ",
            $tenant,
            "      AND next_run_at <= tc_now_ms($1)) \
             ), due AS ( \
                 SELECT t.pos, t.next_run_at FROM cand JOIN tasks t ON t.pos = cand.pos \
                 WHERE t.state = 'pending' \
                 ORDER BY cand.k, cand.pos LIMIT $2 \
                 FOR UPDATE OF t SKIP LOCKED",
            claim_tail!()
        )
    };
}

/// Moves up to `n` due pending tasks of `destination` (of `tenant`'s, when
/// given) to running, by the key.
pub(crate) async fn claim(
    tx: &Transaction<'_>,
    destination: &str,
    tenant: Option<&str>,
    n: usize,
    now: Option<i64>,
    lease: Duration,
    aging: Duration,
) -> Result<Vec<Task>, StoreError> {
    let limit = i64::try_from(n).unwrap_or(i64::MAX);
    let aging = millis(aging);
    let found = match tenant {
        None => {
            let stmt = tx.prepare_cached(claim_by_key!("")).await.map_err(db)?;
            tx.query(&stmt, &[&now, &limit, &millis(lease), &destination, &aging])
                .await
                .map_err(db)?
        }
        Some(tenant) => {
            let stmt = tx
                .prepare_cached(claim_by_key!("AND tenant = $6"))
                .await
                .map_err(db)?;
            tx.query(
                &stmt,
                &[&now, &limit, &millis(lease), &destination, &aging, &tenant],
            )
            .await
            .map_err(db)?
        }
    };
    found
        .iter()
        .map(|row| rows::task_from_row(row).map(|s| s.task))
        .collect()
}
