//! Bulk cancel and retry: a snapshot, the tasks it covers chunk by chunk,
//! and each chunk's writes.

use deadpool_postgres::{Client, GenericClient, Transaction};
use tc_model::completion::CancelEffect;
use tc_model::store::{BulkAction, StoreError, TaskFilter};
use tc_model::tenant::quota::{Admission, RetryQuota};
use tc_model::{State, TaskId, transit};

use crate::error::db;
use crate::filter::FilterSql;
use crate::moves::count_moves;
use crate::rows::{self};

use super::{admit_retry, ended, lock_tenants, mark_inserting};

/// A bulk action's horizon: the snapshot of the transactions that had
/// committed when it started. A task is covered only if the transaction
/// that inserted it (its position's upper bits) is visible in it.
pub(crate) async fn bulk_snapshot(client: &Client) -> Result<String, StoreError> {
    let stmt = client
        .prepare_cached("SELECT pg_current_snapshot()::text")
        .await
        .map_err(db)?;
    client
        .query_one(&stmt, &[])
        .await
        .map_err(db)?
        .try_get(0)
        .map_err(db)
}

/// The covered tasks of one bulk step: up to `n` after `after`, inserted
/// by transactions visible in `snapshot`.
pub(crate) async fn bulk_covered(
    tx: &Transaction<'_>,
    filter: &TaskFilter,
    snapshot: &str,
    after: i64,
    n: i64,
) -> Result<Vec<(i64, TaskId)>, StoreError> {
    let filter = FilterSql::new(filter, 4);
    let stmt = tx
        .prepare_cached(&format!(
            "SELECT pos, id FROM tasks \
             WHERE {driving} AND {rest} AND pos > $1 \
             AND pg_visible_in_snapshot((pos / 65536)::text::xid8, $2::text::pg_snapshot) \
             ORDER BY pos LIMIT $3",
            driving = filter.driving,
            rest = filter.rest,
        ))
        .await
        .map_err(db)?;
    let rows = tx
        .query(&stmt, &filter.params(&[&after, &snapshot, &n]))
        .await
        .map_err(db)?;
    rows.iter()
        .map(|row| {
            let id: Vec<u8> = row.try_get(1).map_err(db)?;
            Ok((row.try_get(0).map_err(db)?, rows::parse_id(id)?))
        })
        .collect()
}

/// What one bulk step changed.
pub(crate) struct BulkApplied {
    /// How many tasks it changed.
    pub(crate) applied: u64,
    /// The tasks it canceled while they were running.
    pub(crate) canceled_running: Vec<TaskId>,
    /// A retry's tasks the allow-list no longer admits.
    pub(crate) refused_url: u64,
}

/// A bulk retry of the tasks at `positions` still in one of `states`, each
/// admitted by `quota` (its tenant's `max_pending`, counted under the
/// tenant's lock, taken before the rows' locks as every writer takes
/// them). Answers how many it retried.
pub(super) async fn bulk_retry(
    tx: &Transaction<'_>,
    positions: &[i64],
    states: &[&str],
    now: Option<i64>,
    admit: &mut RetryAdmit<'_>,
) -> Result<(u64, u64), StoreError> {
    // Tenants never change: read before their locks.
    let tenants_of = tx
        .prepare_cached("SELECT DISTINCT tenant FROM tasks WHERE pos = ANY($1) AND tenant <> ''")
        .await
        .map_err(db)?;
    let tenants: Vec<String> = tx
        .query(&tenants_of, &[&positions])
        .await
        .map_err(db)?
        .iter()
        .map(|row| row.try_get(0).map_err(db))
        .collect::<Result<_, _>>()?;
    let names: Vec<&str> = tenants.iter().map(String::as_str).collect();
    lock_tenants(tx, &names).await?;
    let lock = tx
        .prepare_cached(
            "SELECT pos, tenant, url, callback_url FROM tasks \
             WHERE pos = ANY($1) AND state = ANY($2) ORDER BY pos FOR UPDATE",
        )
        .await
        .map_err(db)?;
    let mut admitted: Vec<i64> = Vec::new();
    let mut refused_url = 0;
    for row in tx.query(&lock, &[&positions, &states]).await.map_err(db)? {
        let tenant: String = row.try_get(1).map_err(db)?;
        let url: String = row.try_get(2).map_err(db)?;
        let callback_url: Option<String> = row.try_get(3).map_err(db)?;
        if tc_model::urls_allowed(&url, callback_url.as_deref(), admit.allowed_urls).is_err() {
            refused_url += 1;
            continue;
        }
        if admit_retry(tx, &tenant, admit.quota).await? == Admission::Admitted {
            admitted.push(row.try_get(0).map_err(db)?);
        }
    }
    let stmt = tx
        .prepare_cached(
            // The rows are this transaction's (locked above): `was` reads
            // each one's state before the update.
            concat!(
                "WITH was AS ( \
                     SELECT pos, state FROM tasks WHERE pos = ANY($2) \
                 ), moves AS ( \
                     UPDATE tasks t SET state = 'pending', attempts_before_retry = t.attempt, \
                                        error = NULL, http_status = NULL, result = NULL, \
                                        result_content_type = NULL, finished_at = NULL, \
                                        lease_until = NULL, next_run_at = tc_now_ms($1), \
                                        updated_at = tc_now_ms($1) \
                     FROM was WHERE t.pos = ANY($2) AND t.pos = was.pos \
                     RETURNING t.pos, was.state AS from_state, t.state AS to_state, t.destination, \
                               t.next_run_at AS due, t.tenant, t.flow_key, t.priority \
                 )",
                count_moves!(),
                "SELECT 1 FROM moves"
            ),
        )
        .await
        .map_err(db)?;
    let applied = tx.execute(&stmt, &[&now, &admitted]).await.map_err(db)?;
    Ok((applied, refused_url))
}

/// What a bulk retry admits: its tenants' quotas and the allow-list.
pub(crate) struct RetryAdmit<'a> {
    pub(crate) quota: &'a mut RetryQuota,
    /// The allow-list (empty: every url).
    pub(crate) allowed_urls: &'a [String],
}

/// Applies `action` to the tasks at `positions` still in a state it applies
/// to (read again under the row locks: a worker may have moved them since
/// the scan), in one statement. Rows are locked in position order, so two
/// bulk steps never wait on each other in a cycle, and a single write waits
/// at most for this statement, and only on a task it changes. A running
/// task's cancel is announced on `channel`, as a single cancel's is.
pub(crate) async fn bulk_apply(
    tx: &Transaction<'_>,
    action: BulkAction,
    positions: &[i64],
    (now_ms, now): (tc_model::Timestamp, Option<i64>),
    channel: &str,
    callback_bytes: usize,
    admit: &mut RetryAdmit<'_>,
) -> Result<BulkApplied, StoreError> {
    let from: Vec<State> = State::ALL
        .into_iter()
        .filter(|s| action.applies_to(*s))
        .collect();
    let names: Vec<&str> = from.iter().map(|s| s.as_str()).collect();
    match action {
        BulkAction::Retry => {
            for state in &from {
                tc_model::retry_by_hand(*state).map_err(|e| StoreError::NotRetryable(e.from))?;
            }
            let (applied, refused_url) = bulk_retry(tx, positions, &names, now, admit).await?;
            Ok(BulkApplied {
                applied,
                canceled_running: Vec::new(),
                refused_url,
            })
        }
        BulkAction::Cancel => {
            for state in &from {
                transit(*state, State::Canceled)?;
            }
            bulk_cancel(
                tx,
                positions,
                &names,
                (now_ms, now),
                channel,
                callback_bytes,
            )
            .await
        }
        BulkAction::Delete => bulk_delete(tx, positions, &names).await,
    }
}

/// A bulk cancel of the tasks at `positions` in the states `names`: one
/// statement moves them, closes the running ones' tries, and answers which
/// were running (their workers are told on `channel`) and which ask for a
/// callback (made in the same transaction).
async fn bulk_cancel(
    tx: &Transaction<'_>,
    positions: &[i64],
    names: &[&str],
    (now_ms, now): (tc_model::Timestamp, Option<i64>),
    channel: &str,
    callback_bytes: usize,
) -> Result<BulkApplied, StoreError> {
    mark_if_callbacks(tx, positions).await?;
    let stmt = tx
        .prepare_cached(concat!(
            "WITH locked AS ( \
                 SELECT pos, state AS was, attempt FROM tasks \
                 WHERE pos = ANY($2) AND state = ANY($3) ORDER BY pos FOR UPDATE \
             ), moved AS ( \
                 UPDATE tasks t SET state = 'canceled', finished_at = tc_now_ms($1), \
                                    updated_at = tc_now_ms($1), lease_until = NULL, \
                                    next_run_at = NULL, ends = t.ends + 1, \
                                    error = CASE WHEN l.was = 'running' THEN $4 \
                                                 ELSE t.error END \
                 FROM locked l WHERE t.pos = ANY($2) AND t.pos = l.pos \
                 RETURNING t.id, l.was, l.attempt, t.pos, t.started_at, \
                           t.callback_url IS NOT NULL AS asks_callback, t.state, \
                           t.destination, t.next_run_at, t.tenant, t.flow_key, t.priority \
             ), moves AS ( \
                 SELECT pos, was AS from_state, state AS to_state, destination, \
                        next_run_at AS due, tenant, flow_key, priority \
                 FROM moved \
             )",
            count_moves!(),
            ", closed AS ( \
                 UPDATE attempts a SET finished_at = tc_now_ms($1), error = $4, \
                                       duration_ms = greatest(tc_now_ms($1) - a.started_at, 0) \
                 FROM moved m \
                 WHERE a.task_id = ANY (ARRAY(SELECT id FROM moved)) \
                   AND m.was = 'running' AND a.task_id = m.id AND a.n = m.attempt \
                   AND a.finished_at IS NULL \
                 RETURNING a.task_id \
             ), written AS ( \
                 INSERT INTO attempts (task_id, n, started_at, finished_at, error, \
                                       duration_ms) \
                 SELECT m.id, m.attempt, coalesce(m.started_at, tc_now_ms($1)), \
                        tc_now_ms($1), $4, \
                        greatest(tc_now_ms($1) - coalesce(m.started_at, tc_now_ms($1)), 0) \
                 FROM moved m \
                 WHERE m.was = 'running' AND m.id NOT IN (SELECT task_id FROM closed) \
             ) \
             SELECT id, was = 'running', pos, asks_callback FROM moved",
        ))
        .await
        .map_err(db)?;
    // What a canceled running task and its try carry, from the one rule
    // (a pending task keeps its error: the statement's CASE).
    let running_error = CancelEffect::of(State::Running, now_ms)?.and_then(|e| e.error);
    let rows = tx
        .query(&stmt, &[&now, &positions, &names, &running_error])
        .await
        .map_err(db)?;
    let mut canceled_running = Vec::new();
    let mut with_callback = Vec::new();
    for row in &rows {
        if row.try_get::<_, bool>(1).map_err(db)? {
            canceled_running.push(rows::parse_id(row.try_get(0).map_err(db)?)?);
        }
        if row.try_get::<_, bool>(3).map_err(db)? {
            with_callback.push(row.try_get::<_, i64>(2).map_err(db)?);
        }
    }
    ended(tx, &with_callback, now_ms, now, callback_bytes).await?;
    notify_canceled(tx, channel, &canceled_running).await?;
    Ok(BulkApplied {
        applied: rows.len() as u64,
        canceled_running,
        refused_url: 0,
    })
}

/// Takes the insert marker when any task at `positions` asks for a
/// callback: callbacks are fixed at submit, so known before the first write.
async fn mark_if_callbacks(tx: &Transaction<'_>, positions: &[i64]) -> Result<(), StoreError> {
    let asks = tx
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM tasks \
                            WHERE pos = ANY($1) AND callback_url IS NOT NULL)",
        )
        .await
        .map_err(db)?;
    let any_callback: bool = tx
        .query_one(&asks, &[&positions])
        .await
        .map_err(db)?
        .try_get(0)
        .map_err(db)?;
    if any_callback {
        mark_inserting(tx).await?;
    }
    Ok(())
}

/// Tells every node's worker on `channel` that these running tasks were
/// canceled.
async fn notify_canceled(
    tx: &Transaction<'_>,
    channel: &str,
    canceled_running: &[TaskId],
) -> Result<(), StoreError> {
    if canceled_running.is_empty() {
        return Ok(());
    }
    let notify = tx
        .prepare_cached("SELECT pg_notify($1, id) FROM unnest($2::text[]) AS id")
        .await
        .map_err(db)?;
    let ids: Vec<String> = canceled_running.iter().map(TaskId::to_string).collect();
    tx.execute(&notify, &[&channel, &ids]).await.map_err(db)?;
    Ok(())
}

/// A bulk delete of the tasks at `positions` in the states `names`, their
/// tries with them.
async fn bulk_delete(
    tx: &Transaction<'_>,
    positions: &[i64],
    names: &[&str],
) -> Result<BulkApplied, StoreError> {
    let stmt = tx
        .prepare_cached(concat!(
            "WITH locked AS ( \
                 SELECT pos, id FROM tasks WHERE pos = ANY($1) AND state = ANY($2) \
                 ORDER BY pos FOR UPDATE \
             ), gone AS ( \
                 DELETE FROM attempts a USING locked WHERE a.task_id = locked.id \
             ), moves AS ( \
                 DELETE FROM tasks t USING locked WHERE t.pos = locked.pos \
                 RETURNING t.pos, t.state AS from_state, NULL::text AS to_state, t.destination, \
                           NULL::bigint AS due, t.tenant, t.flow_key, t.priority \
             )",
            count_moves!(),
            "SELECT 1 FROM moves"
        ))
        .await
        .map_err(db)?;
    let applied = tx.execute(&stmt, &[&positions, &names]).await.map_err(db)?;
    Ok(BulkApplied {
        applied,
        canceled_running: Vec::new(),
        refused_url: 0,
    })
}
