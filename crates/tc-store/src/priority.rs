//! The due tasks of one destination in claim order:
//! higher priority first, a task counting one level higher for each aging
//! period it waited (tc-model's [`tc_model::priority::claim_key`], written
//! here in SQL as `next_run_at - priority * aging`).
//!
//! Tasks without a priority (0) keep the oldest-due-first order of the
//! due indexes, so the claim first asks `tasks_prioritized` (schema step
//! 25: the due tasks of priority above 0) whether the destination has any:
//! one seek into an index that is empty unless priorities are used. Only
//! then does it merge the oldest `limit` tasks of priority 0 with every due
//! task of a higher one, by the key.

use std::time::Duration;

use rusqlite::{Connection, params};
use tc_model::Timestamp;
use tc_model::store::StoreError;

use crate::rows::db;

/// Whether `destination` (the tasks of `tenant`, when given; `''` for
/// those without one) has due tasks of priority above 0.
const HAS_PRIORITIZED: &str = "SELECT EXISTS ( \
     SELECT 1 FROM tasks INDEXED BY tasks_prioritized \
     WHERE state = 'pending' AND priority > 0 AND destination = ?1 AND next_run_at <= ?2 \
       AND (?3 IS NULL OR tenant = ?3))";

/// Up to `?3` due tasks of `?1` by the key, aging `?4` ms per level.
const BY_KEY: &str = "SELECT seq, state FROM ( \
     SELECT * FROM (SELECT seq, state, next_run_at AS k FROM tasks \
                    INDEXED BY tasks_due_by_destination \
                    WHERE state = 'pending' AND destination = ?1 AND next_run_at <= ?2 \
                      AND priority = 0 \
                    ORDER BY next_run_at, seq LIMIT ?3) \
     UNION ALL \
     SELECT seq, state, next_run_at - priority * ?4 AS k FROM tasks \
     INDEXED BY tasks_prioritized \
     WHERE state = 'pending' AND priority > 0 AND destination = ?1 AND next_run_at <= ?2) \
     ORDER BY k, seq LIMIT ?3";

/// [`BY_KEY`] for the tasks of tenant `?5` alone, those without a flow key:
/// a tenant's lane is taken this way only when none of its keyed tasks is
/// due there (the claim's key level takes those).
const BY_KEY_OF_TENANT: &str = "SELECT seq, state FROM ( \
     SELECT * FROM (SELECT seq, state, next_run_at AS k FROM tasks \
                    INDEXED BY tasks_due_unkeyed \
                    WHERE state = 'pending' AND flow_key = '' AND destination = ?1 AND tenant = ?5 \
                      AND next_run_at <= ?2 AND priority = 0 \
                    ORDER BY next_run_at, seq LIMIT ?3) \
     UNION ALL \
     SELECT seq, state, next_run_at - priority * ?4 AS k FROM tasks \
     INDEXED BY tasks_prioritized \
     WHERE state = 'pending' AND priority > 0 AND destination = ?1 AND next_run_at <= ?2 \
       AND tenant = ?5 AND flow_key = '') \
     ORDER BY k, seq LIMIT ?3";

/// Up to `limit` due tasks of `destination` (of `tenant`'s, when given) in
/// claim order, each with its seq and state.
pub(crate) fn due_of(
    conn: &Connection,
    destination: &str,
    tenant: Option<&str>,
    now: Timestamp,
    limit: usize,
    aging: Duration,
) -> Result<Vec<(i64, String)>, StoreError> {
    let prioritized: bool = conn
        .prepare_cached(HAS_PRIORITIZED)
        .map_err(db)?
        .query_row(params![destination, now.as_millis(), tenant], |row| {
            row.get(0)
        })
        .map_err(db)?;
    if !prioritized {
        return match tenant {
            None => crate::destinations::due_of(conn, destination, now, limit),
            Some(tenant) => crate::write_ops::due_of_tenant(conn, destination, tenant, now, limit),
        };
    }
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let aging = i64::try_from(aging.as_millis()).unwrap_or(i64::MAX);
    let read = |row: &rusqlite::Row<'_>| Ok((row.get(0)?, row.get(1)?));
    let found = match tenant {
        None => conn
            .prepare_cached(BY_KEY)
            .map_err(db)?
            .query_map(params![destination, now.as_millis(), limit, aging], read)
            .map_err(db)?
            .collect::<rusqlite::Result<_>>(),
        Some(tenant) => conn
            .prepare_cached(BY_KEY_OF_TENANT)
            .map_err(db)?
            .query_map(
                params![destination, now.as_millis(), limit, aging, tenant],
                read,
            )
            .map_err(db)?
            .collect::<rusqlite::Result<_>>(),
    };
    found.map_err(db)
}
