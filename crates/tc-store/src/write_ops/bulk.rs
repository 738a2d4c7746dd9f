//! Bulk cancel and retry, one chunk of a snapshot's tasks at a time.

use rusqlite::Connection;
use tc_model::store::{BULK_CHUNK, BulkAction, StoreError};
use tc_model::tenant::Acting;
use tc_model::tenant::quota::{Admission, RetryQuota};
use tc_model::{State, TaskId, Timestamp};

use crate::filter::FilterSql;
use crate::rows::{self, db, parse_state};

use super::{admit_retry, cancel, check_acting, delete, reclaim_free_pages, retry_seq};

/// One transaction's share of a bulk action.
#[derive(Debug, Default)]
pub(crate) struct BulkChunk {
    /// The covered tasks this step reached, in seq order.
    pub(crate) matched: Vec<TaskId>,
    /// How many of them the action changed.
    pub(crate) applied: u64,
    /// Those that were running when canceled.
    pub(crate) canceled_running: Vec<TaskId>,
    /// The last seq reached.
    pub(crate) last: Option<i64>,
    /// A retry's tasks the allow-list no longer admits.
    pub(crate) refused_url: u64,
}

/// One bulk transaction's bounds and what it is made with.
pub(crate) struct BulkStep<'a> {
    pub(crate) action: BulkAction,
    pub(crate) filter: &'a FilterSql,
    /// The seq range (`after`, `horizon`].
    pub(crate) after: i64,
    pub(crate) horizon: i64,
    pub(crate) now: Timestamp,
    pub(crate) callback_bytes: usize,
    /// The tenant's key it is made with, checked live.
    pub(crate) acting: Option<&'a Acting>,
    /// A retry's allow-list (empty: every url).
    pub(crate) allowed_urls: &'a [String],
}

/// Applies the step's action to the first [`BULK_CHUNK`] tasks its filter
/// covers in its seq range, skipping those it does not apply to, and a
/// retry's tasks that `quota` does not admit.
pub(crate) fn bulk_chunk(
    conn: &Connection,
    step: &BulkStep<'_>,
    quota: &mut RetryQuota,
) -> Result<BulkChunk, StoreError> {
    let BulkStep {
        action,
        filter,
        after,
        horizon,
        now,
        callback_bytes,
        acting,
        allowed_urls,
    } = *step;
    if let Some(acting) = acting {
        check_acting(conn, acting)?;
    }
    quota.new_transaction();
    let covered = covered_tasks(conn, filter, after, horizon)?;
    let mut chunk = BulkChunk::default();
    for (seq, id, state, tenant, url, callback_url) in covered {
        let id = rows::parse_id(id)?;
        let state = parse_state(&state)?;
        chunk.last = Some(seq);
        chunk.matched.push(id);
        if !action.applies_to(state) {
            continue;
        }
        match action {
            BulkAction::Retry => {
                if tc_model::urls_allowed(&url, callback_url.as_deref(), allowed_urls).is_err() {
                    chunk.refused_url += 1;
                    continue;
                }
                if admit_retry(conn, &tenant, quota)? != Admission::Admitted {
                    continue;
                }
                let destination = tc_model::destination_of(&url);
                retry_seq(conn, (seq, state, &destination), now, now)?;
            }
            BulkAction::Cancel => {
                cancel(
                    conn,
                    &id,
                    &tc_model::tenant::Scope::Admin,
                    now,
                    callback_bytes,
                )?;
                if state == State::Running {
                    chunk.canceled_running.push(id);
                }
            }
            BulkAction::Delete => delete(conn, &id, &tc_model::tenant::Scope::Admin)?,
        }
        chunk.applied += 1;
    }
    if action == BulkAction::Delete {
        reclaim_free_pages(conn)?;
    }
    Ok(chunk)
}

/// A covered task as a bulk step reads it: seq, id, state, tenant, url and
/// callback url.
type Covered = (i64, Vec<u8>, String, String, String, Option<String>);

/// The filter's tasks in the seq range (`after`, `horizon`], a chunk at
/// most, in seq order.
fn covered_tasks(
    conn: &Connection,
    filter: &FilterSql,
    after: i64,
    horizon: i64,
) -> Result<Vec<Covered>, StoreError> {
    let sql = format!(
        "SELECT seq, id, state, tenant, url, callback_url FROM {table} \
         WHERE {driving} AND {rest} AND seq > :after AND seq <= :horizon \
         ORDER BY seq LIMIT :n",
        table = filter.table,
        driving = filter.driving,
        rest = filter.rest,
    );
    let n = i64::try_from(BULK_CHUNK).unwrap_or(i64::MAX);
    conn.prepare_cached(&sql)
        .map_err(db)?
        .query_map(
            &filter.params(&[(":after", &after), (":horizon", &horizon), (":n", &n)])[..],
            |row| row.try_into(),
        )
        .map_err(db)?
        .collect::<Result<_, _>>()
        .map_err(db)
}
