//! A task's end and what follows it: the callbacks an end creates, cancel,
//! delete, prune, and a retry by hand (admitted against the tenant's quota).

use deadpool_postgres::{GenericClient, Transaction};
use tc_model::callback;
use tc_model::completion::CancelEffect;
use tc_model::store::StoreError;
use tc_model::tenant::quota::{Admission, RetryQuota};
use tc_model::tenant::{Acting, Scope};
use tc_model::{State, Task, TaskId};

use crate::error::db;
use crate::moves::count_moves;
use crate::read_ops;
use crate::rows::{self, task_columns};

use super::{
    Inserted, check_acting, close_attempt, insert_batch, load_pos, lock_head, lock_tenants, new_id,
};

/// What the ends of the tasks at `positions` create, after the write that
/// ended them (and counted their ends), in the same transaction (which
/// took the insert marker first, [`mark_inserting`]): each
/// one's callback, when tc-model's rule ([`callback::task_for`]) makes one,
/// inserted as a batch submit would, and its parent pointed at it. A key
/// already taken (a client's task with that key) is the callback: the
/// parent names that task. `now_ms` is the caller's now (the ids' time).
pub(crate) async fn ended<C: GenericClient>(
    client: &C,
    positions: &[i64],
    now_ms: tc_model::Timestamp,
    now: Option<i64>,
    callback_bytes: usize,
) -> Result<(), StoreError> {
    if positions.is_empty() {
        return Ok(());
    }
    let stmt = client
        .prepare_cached(concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE pos = ANY($1) ORDER BY pos"
        ))
        .await
        .map_err(db)?;
    let mut parents: Vec<(i64, Task)> = Vec::with_capacity(positions.len());
    for row in client.query(&stmt, &[&positions]).await.map_err(db)? {
        let stored = rows::task_from_row(&row)?;
        parents.push((stored.pos, stored.task));
    }
    let mut tasks: Vec<Task> = parents.iter().map(|(_, t)| t.clone()).collect();
    read_ops::fill_attempts(client, &mut tasks).await?;
    let (mut made_for, mut news, mut ids) = (Vec::new(), Vec::new(), Vec::new());
    for ((pos, _), parent) in parents.iter().zip(&tasks) {
        let id = new_id(now_ms);
        if let Some(new) = callback::task_for(parent, id, callback_bytes) {
            made_for.push(*pos);
            news.push(new);
            ids.push(id);
        }
    }
    if news.is_empty() {
        return Ok(());
    }
    // Callbacks carry no pending limit: the end they report has happened.
    let inserted = insert_batch(client, &news, &ids, &[], now).await?;
    let made: Vec<Vec<u8>> = inserted
        .iter()
        .map(|i| match i {
            Inserted::Created(task) | Inserted::Existing(task) => Ok(task.id.as_bytes().to_vec()),
            Inserted::OverQuota(_) | Inserted::CredentialGone => Err(StoreError::Unavailable(
                "a callback was refused for its tenant's quota or key".into(),
            )),
        })
        .collect::<Result<_, _>>()?;
    let point = client
        .prepare_cached(
            "UPDATE tasks t SET callback_task_id = u.callback \
             FROM unnest($1::bigint[], $2::bytea[]) AS u(pos, callback) WHERE t.pos = u.pos",
        )
        .await
        .map_err(db)?;
    client
        .execute(&point, &[&made_for, &made])
        .await
        .map_err(db)?;
    Ok(())
}

/// Takes the insert marker (`tc_task_pos`, schema step 8) for a
/// transaction that may insert callbacks after it wrote other rows: it must
/// say so before its first write, so that a listing waits for it.
pub(crate) async fn mark_inserting<C: GenericClient>(client: &C) -> Result<(), StoreError> {
    let stmt = client
        .prepare_cached("SELECT tc_task_pos(0)")
        .await
        .map_err(db)?;
    client.query_one(&stmt, &[]).await.map_err(db)?;
    Ok(())
}

/// A cancel's write: the task at `$2` to `$4` (tc-model's `CancelEffect`,
/// its error `$3` when it gives one) from `$5`, counted
/// ([`count_moves`]).
const CANCEL: &str = concat!(
    "WITH moves AS ( \
         UPDATE tasks SET state = $4, finished_at = tc_now_ms($1), \
                          updated_at = tc_now_ms($1), lease_until = NULL, \
                          next_run_at = NULL, ends = ends + 1, \
                          error = coalesce($3, error) \
         WHERE pos = $2 \
         RETURNING pos, $5::text AS from_state, state AS to_state, destination, \
                   next_run_at AS due, tenant, flow_key, priority \
     )",
    count_moves!(),
    "SELECT 1 FROM moves"
);

/// What a cancel did.
pub(crate) struct Canceled {
    /// The task after the cancel.
    pub(crate) task: Task,
    /// Whether a try was running (somewhere) when it was canceled.
    pub(crate) was_running: bool,
}

/// Pending or running → canceled; a terminal task is returned unchanged. A
/// running task's cancel is announced on `channel` in the same transaction,
/// so every node hears of it once it is committed.
pub(crate) async fn cancel(
    tx: &Transaction<'_>,
    id: &TaskId,
    scope: &Scope,
    (now_ms, now): (tc_model::Timestamp, Option<i64>),
    channel: &str,
    callback_bytes: usize,
) -> Result<Canceled, StoreError> {
    // A task's callback is fixed at its submit: read before any lock, so
    // that a cancel that will insert one says so before its first write.
    let asks = tx
        .prepare_cached("SELECT callback_url IS NOT NULL FROM tasks WHERE id = $1")
        .await
        .map_err(db)?;
    let asks_callback = tx
        .query_opt(&asks, &[&id.as_bytes().as_slice()])
        .await
        .map_err(db)?
        .map(|row| row.try_get::<_, bool>(0))
        .transpose()
        .map_err(db)?
        .unwrap_or(false);
    if asks_callback {
        mark_inserting(tx).await?;
    }
    let head = lock_head(tx, id).await?;
    if !scope.owns_stored(&head.tenant) {
        return Err(StoreError::NotFound);
    }
    let Some(effect) = CancelEffect::of(head.state, now_ms)? else {
        return Ok(Canceled {
            task: load_pos(tx, head.pos).await?,
            was_running: false,
        });
    };
    let stmt = tx.prepare_cached(CANCEL).await.map_err(db)?;
    tx.execute(
        &stmt,
        &[
            &now,
            &head.pos,
            &effect.error,
            &effect.state.as_str(),
            &head.state.as_str(),
        ],
    )
    .await
    .map_err(db)?;
    let was_running = effect.ends_a_try();
    if was_running {
        close_attempt(tx, id, head.attempt, now, None, effect.error).await?;
        let notify = tx
            .prepare_cached("SELECT pg_notify($1, $2)")
            .await
            .map_err(db)?;
        tx.execute(&notify, &[&channel, &id.to_string()])
            .await
            .map_err(db)?;
    }
    if asks_callback {
        ended(tx, &[head.pos], now_ms, now, callback_bytes).await?;
    }
    Ok(Canceled {
        task: load_pos(tx, head.pos).await?,
        was_running,
    })
}

/// Deletes a finished task with its history; its key is free again.
pub(crate) async fn delete(
    tx: &Transaction<'_>,
    id: &TaskId,
    scope: &Scope,
) -> Result<(), StoreError> {
    let head = lock_head(tx, id).await?;
    if !scope.owns_stored(&head.tenant) {
        return Err(StoreError::NotFound);
    }
    if !head.state.is_terminal() {
        return Err(StoreError::NotTerminal(head.state));
    }
    let attempts = tx
        .prepare_cached("DELETE FROM attempts WHERE task_id = $1")
        .await
        .map_err(db)?;
    tx.execute(&attempts, &[&id.as_bytes().as_slice()])
        .await
        .map_err(db)?;
    let task = tx
        .prepare_cached(concat!(
            "WITH moves AS ( \
                 DELETE FROM tasks WHERE pos = $1 \
                 RETURNING pos, state AS from_state, NULL::text AS to_state, destination, \
                           NULL::bigint AS due, tenant, flow_key, priority \
             )",
            count_moves!(),
            "SELECT 1 FROM moves"
        ))
        .await
        .map_err(db)?;
    tx.execute(&task, &[&head.pos]).await.map_err(db)?;
    Ok(())
}

/// Deletes up to `limit` tasks in terminal `state` finished more than
/// `older_than_ms` before now (the store's clock), with their attempts.
/// Rows another transaction holds are skipped, not waited for.
pub(crate) async fn prune(
    tx: &Transaction<'_>,
    state: State,
    older_than_ms: i64,
    now: Option<i64>,
    limit: i64,
) -> Result<usize, StoreError> {
    if !state.is_terminal() || limit <= 0 {
        return Ok(0);
    }
    let stmt = tx
        .prepare_cached(concat!(
            "WITH doomed AS ( \
                 SELECT pos, id FROM tasks \
                 WHERE state = $2 AND finished_at < tc_now_ms($1) - $3 \
                 ORDER BY pos LIMIT $4 FOR UPDATE SKIP LOCKED \
             ), gone AS ( \
                 DELETE FROM attempts WHERE task_id IN (SELECT id FROM doomed) \
             ), moves AS ( \
                 DELETE FROM tasks WHERE pos IN (SELECT pos FROM doomed) \
                 RETURNING pos, state AS from_state, NULL::text AS to_state, destination, \
                           NULL::bigint AS due, tenant, flow_key, priority \
             )",
            count_moves!(),
            "SELECT 1 FROM moves",
        ))
        .await
        .map_err(db)?;
    let deleted = tx
        .execute(&stmt, &[&now, &state.as_str(), &older_than_ms, &limit])
        .await
        .map_err(db)?;
    Ok(usize::try_from(deleted).unwrap_or(usize::MAX))
}

/// Failed or canceled → pending, due `delay_ms` after now, with a fresh
/// budget of tries (the tries so far become `attempts_before_retry`); made
/// with `acting`'s key (checked live, the task its tenant's), under the
/// task's tenant's `max_pending` (counted under the tenant's lock, as a
/// submit counts).
pub(crate) async fn retry(
    tx: &Transaction<'_>,
    id: &TaskId,
    delay_ms: i64,
    now: Option<i64>,
    acting: Option<&Acting>,
) -> Result<Task, StoreError> {
    // A task's tenant never changes: read before the tenant's lock, which
    // comes before the row's (the order every writer takes them in).
    let tenant = tenant_of(tx, id).await?;
    if let Some(acting) = acting {
        if acting.tenant != tenant {
            return Err(StoreError::NotFound);
        }
        check_acting(tx, acting).await?;
    }
    if !tenant.is_empty() {
        lock_tenants(tx, &[tenant.as_str()]).await?;
    }
    let head = lock_head(tx, id).await?;
    tc_model::retry_by_hand(head.state).map_err(|e| StoreError::NotRetryable(e.from))?;
    if let Admission::OverPending(limit) =
        admit_retry(tx, &tenant, &mut RetryQuota::default()).await?
    {
        return Err(StoreError::QuotaExceeded { limit });
    }
    let stmt = tx
        .prepare_cached(concat!(
            "WITH moves AS ( \
                     UPDATE tasks SET state = 'pending', attempts_before_retry = attempt, \
                                      error = NULL, http_status = NULL, result = NULL, \
                                      result_content_type = NULL, finished_at = NULL, \
                                      lease_until = NULL, next_run_at = tc_now_ms($1) + $3, \
                                      updated_at = tc_now_ms($1) \
                     WHERE pos = $2 \
                     RETURNING pos, $4::text AS from_state, state AS to_state, destination, \
                               next_run_at AS due, tenant, flow_key, priority \
                 )",
            count_moves!(),
            "SELECT 1 FROM moves"
        ))
        .await
        .map_err(db)?;
    tx.execute(&stmt, &[&now, &head.pos, &delay_ms, &head.state.as_str()])
        .await
        .map_err(db)?;
    load_pos(tx, head.pos).await
}

/// The task's tenant as stored (`''` for none), or [`StoreError::NotFound`].
pub(super) async fn tenant_of(tx: &Transaction<'_>, id: &TaskId) -> Result<String, StoreError> {
    let stmt = tx
        .prepare_cached("SELECT tenant FROM tasks WHERE id = $1")
        .await
        .map_err(db)?;
    tx.query_opt(&stmt, &[&id.as_bytes().as_slice()])
        .await
        .map_err(db)?
        .ok_or(StoreError::NotFound)?
        .try_get(0)
        .map_err(db)
}

/// Whether `quota` admits one more retry of a task of `tenant` (as stored):
/// its `max_pending` and open tasks are read once per transaction, under
/// the tenant's lock, which the caller holds ([`lock_tenants`]).
pub(super) async fn admit_retry(
    tx: &Transaction<'_>,
    tenant: &str,
    quota: &mut RetryQuota,
) -> Result<Admission, StoreError> {
    if !quota.knows(tenant) {
        let limit_of = tx
            .prepare_cached("SELECT max_pending FROM tenants WHERE name = $1")
            .await
            .map_err(db)?;
        let limit: Option<i64> = tx
            .query_opt(&limit_of, &[&tenant])
            .await
            .map_err(db)?
            .map(|row| row.try_get(0))
            .transpose()
            .map_err(db)?
            .flatten();
        let open = match limit {
            Some(cap) => {
                let count = tx
                    .prepare_cached(
                        "SELECT count(*) FROM (SELECT 1 FROM queue \
                             WHERE tenant = $1 AND tenant <> '' LIMIT $2) AS s",
                    )
                    .await
                    .map_err(db)?;
                let n: i64 = tx
                    .query_one(&count, &[&tenant, &cap])
                    .await
                    .map_err(db)?
                    .try_get(0)
                    .map_err(db)?;
                n.unsigned_abs()
            }
            None => 0,
        };
        quota.learn(tenant, limit.map(i64::unsigned_abs), open);
    }
    Ok(quota.admit(tenant))
}
