//! Completions of many attempts in one statement: `UPDATE … FROM unnest(…)`
//! with the guards of a single complete (the task still running, with the
//! same attempt), re-checked by PostgreSQL on the row's newest version when
//! the update waited for a concurrent writer (a cancel, a recovery).
//!
//! What a completion writes is [`Written`], built by [`written`] from the
//! outcome alone: the statement binds its fields as arrays and contains no
//! rule of its own beyond "a retry keeps the finish time and the result".
//! That is the one place to replace with tc-model's effect-as-data when it
//! lands.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use deadpool_postgres::{GenericClient, Pool};
use tc_model::completion::CompletionEffect;
use tc_model::store::{Completion, Guarded, StoreError};
use tc_model::{State, TaskId, Timestamp, transit};

use crate::error::db;
use crate::moves::count_moves;
use crate::rows::parse_state;
use crate::write_ops;

/// One completion asked for.
pub(crate) struct Asked {
    pub(crate) id: TaskId,
    pub(crate) attempt: u32,
    pub(crate) outcome: Completion,
    /// The caller's now (for the retry delay).
    pub(crate) now_ms: i64,
    /// The statement's time: the caller's now, or NULL for the database's.
    pub(crate) now: Option<i64>,
}

/// What a completion writes on the task (and its history row).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Written {
    /// The state the task moves to.
    pub(crate) state: State,
    /// The try's status; on the task it replaces the last one only when
    /// set (a timeout keeps the last answered status).
    pub(crate) http_status: Option<i32>,
    /// The downstream's body and type: written on success only.
    pub(crate) result: Option<Vec<u8>>,
    pub(crate) content_type: Option<String>,
    /// Why the try failed; NULL on success.
    pub(crate) error: Option<String>,
    /// For a retry, the next due time as a delay from now.
    pub(crate) delay_ms: Option<i64>,
}

/// The effect of `outcome` (see [`Written`]); `now_ms` is the caller's now.
/// The rule is tc-model's [`CompletionEffect`]: this only puts its fields in
/// the statement's columns (the finish and due times as the statement's own
/// time, so that the database clock can stamp them).
pub(crate) fn written(outcome: &Completion, now_ms: i64) -> Written {
    let effect = CompletionEffect::of(outcome.clone(), Timestamp::from_millis(now_ms));
    let (result, content_type) = match effect.result {
        Some((result, content_type)) => (Some(result), content_type),
        None => (None, None),
    };
    Written {
        state: effect.state,
        http_status: effect.http_status.map(i32::from),
        result,
        content_type,
        error: effect.error,
        delay_ms: effect
            .next_run_at
            .map(|at| at.as_millis().saturating_sub(now_ms)),
    }
}

/// The statement: one row of `unnest` per completion. Tasks are reached
/// by `t.id = ANY($1)` (an index lookup per id whatever the plan: a
/// generic plan of the join alone scanned every running task). The try's
/// history row is written here, once (schema step 19), or the open row a
/// node of schema 16 wrote at its claim is closed. A retry keeps the
/// finish time and the result; the others close the task and count its
/// end (`ended`, 1 for a terminal state). `$10` picks the rows it may change:
/// false, those whose completion
/// makes no callback (every retry, every task without a `callback_url`),
/// on a connection in autocommit; true, the ends that make one, in a
/// transaction that then inserts the callbacks ([`crate::write_ops::ended`]).
/// It counts the tasks it moved itself ([`count_moves`]).
pub(crate) const COMPLETE_MANY: &str = concat!(
    "\
WITH i AS (
    SELECT * FROM unnest($1::bytea[], $2::int[], $3::text[], $4::int[], $5::bytea[],
                         $6::text[], $7::text[], $8::bigint[], $9::bigint[], $11::int[])
        AS i(id, attempt, state, http_status, result, content_type, error, delay_ms, now_ms,
             ended)
), done AS (
    UPDATE tasks t SET state = i.state,
        http_status = coalesce(i.http_status, t.http_status),
        result = CASE WHEN i.state = 'success' THEN i.result ELSE t.result END,
        result_content_type = CASE WHEN i.state = 'success' THEN i.content_type
                                   ELSE t.result_content_type END,
        error = i.error,
        finished_at = CASE WHEN i.state = 'pending' THEN t.finished_at
                           ELSE tc_now_ms(i.now_ms) END,
        updated_at = tc_now_ms(i.now_ms),
        lease_until = NULL,
        next_run_at = CASE WHEN i.state = 'pending' THEN tc_now_ms(i.now_ms) + i.delay_ms
                           ELSE NULL END,
        ends = t.ends + i.ended
    FROM i
    WHERE t.id = ANY($1) AND t.id = i.id AND t.state = 'running' AND t.attempt = i.attempt
      AND (i.ended = 1 AND t.callback_url IS NOT NULL) = $10
    RETURNING t.id, t.pos, t.started_at, t.state, t.destination, t.next_run_at, t.tenant,
              t.flow_key, t.priority
), moves AS (
    SELECT pos, 'running'::text AS from_state, state AS to_state, destination,
           next_run_at AS due, tenant, flow_key, priority
    FROM done
)",
    count_moves!(),
    ", closed AS (
    UPDATE attempts a SET finished_at = tc_now_ms(i.now_ms), http_status = i.http_status,
        error = i.error, duration_ms = greatest(tc_now_ms(i.now_ms) - a.started_at, 0)
    FROM i JOIN done d ON d.id = i.id
    WHERE a.task_id = ANY($1) AND a.task_id = i.id AND a.n = i.attempt
      AND a.finished_at IS NULL
    RETURNING a.task_id
), written AS (
    INSERT INTO attempts (task_id, n, started_at, finished_at, http_status, error, duration_ms)
    SELECT i.id, i.attempt, coalesce(d.started_at, tc_now_ms(i.now_ms)), tc_now_ms(i.now_ms),
           i.http_status, i.error,
           greatest(tc_now_ms(i.now_ms) - coalesce(d.started_at, tc_now_ms(i.now_ms)), 0)
    FROM i JOIN done d ON d.id = i.id
    WHERE i.id NOT IN (SELECT task_id FROM closed)
)
SELECT id, pos FROM done"
);

/// The completions of `asked` that `COMPLETE_MANY` applied with `$10 =
/// callbacks`, by task id, with the task's position.
async fn apply<C: GenericClient + ?Sized>(
    client: &C,
    asked: &[&Asked],
    callbacks: bool,
) -> Result<HashMap<Vec<u8>, i64>, StoreError> {
    let effects: Vec<Written> = asked
        .iter()
        .map(|a| written(&a.outcome, a.now_ms))
        .collect();
    let ids: Vec<&[u8]> = asked.iter().map(|a| a.id.as_bytes().as_slice()).collect();
    let attempts: Vec<i32> = asked
        .iter()
        .map(|a| i32::try_from(a.attempt).unwrap_or(i32::MAX))
        .collect();
    let states: Vec<&str> = effects.iter().map(|w| w.state.as_str()).collect();
    let statuses: Vec<Option<i32>> = effects.iter().map(|w| w.http_status).collect();
    let results: Vec<Option<&[u8]>> = effects.iter().map(|w| w.result.as_deref()).collect();
    let types: Vec<Option<&str>> = effects.iter().map(|w| w.content_type.as_deref()).collect();
    let errors: Vec<Option<&str>> = effects.iter().map(|w| w.error.as_deref()).collect();
    let delays: Vec<Option<i64>> = effects.iter().map(|w| w.delay_ms).collect();
    let nows: Vec<Option<i64>> = asked.iter().map(|a| a.now).collect();
    // An end (a terminal state) is counted: tc-model's reading of the state.
    let ended: Vec<i32> = effects
        .iter()
        .map(|w| i32::from(w.state.is_terminal()))
        .collect();
    let stmt = client.prepare_cached(COMPLETE_MANY).await.map_err(db)?;
    let rows = client
        .query(
            &stmt,
            &[
                &ids, &attempts, &states, &statuses, &results, &types, &errors, &delays, &nows,
                &callbacks, &ended,
            ],
        )
        .await
        .map_err(db)?;
    let mut applied = HashMap::with_capacity(rows.len());
    for row in rows {
        let id: Vec<u8> = row.try_get(0).map_err(db)?;
        applied.insert(id, row.try_get::<_, i64>(1).map_err(db)?);
    }
    Ok(applied)
}

/// Applies every completion of `asked` (ids must be distinct: the batcher
/// splits repeats into later statements) and answers each in order:
/// applied, lost (with the state now) or not found. One statement in
/// autocommit for the completions that make no callback; those it left
/// (ends that make a callback, or lost ones) go through one transaction
/// that applies the ends making a callback and inserts their callbacks
/// (`callback_bytes` of a result at most), so a parent never ends without
/// its callback.
pub(crate) async fn complete_many(
    client: &mut deadpool_postgres::Object,
    asked: &[&Asked],
    callback_bytes: usize,
) -> Result<Vec<Result<Guarded, StoreError>>, StoreError> {
    let mut applied = apply(&*client, asked, false).await?;
    let rest: Vec<&Asked> = asked
        .iter()
        .copied()
        .filter(|a| !applied.contains_key(a.id.as_bytes().as_slice()))
        .collect();
    // When the second round fails, those of the first stay answered as
    // applied (they are committed) and only the rest hear of the failure.
    let mut second_failed = None;
    if !rest.is_empty() {
        match ends_with_callbacks(client, &rest, callback_bytes).await {
            Ok(ended) => applied.extend(ended),
            Err(e) => second_failed = Some(e),
        }
    }
    let ids: Vec<&[u8]> = asked.iter().map(|a| a.id.as_bytes().as_slice()).collect();
    // The others moved on (or never were): read the state they are in now.
    let missed: Vec<&[u8]> = ids
        .iter()
        .copied()
        .filter(|id| !applied.contains_key(*id))
        .collect();
    let mut now_in: HashMap<Vec<u8>, State> = HashMap::new();
    if !missed.is_empty() {
        let stmt = client
            .prepare_cached("SELECT id, state FROM tasks WHERE id = ANY($1)")
            .await
            .map_err(db)?;
        for row in client.query(&stmt, &[&missed]).await.map_err(db)? {
            let id: Vec<u8> = row.try_get(0).map_err(db)?;
            let state: String = row.try_get(1).map_err(db)?;
            now_in.insert(id, parse_state(&state)?);
        }
    }
    Ok(asked
        .iter()
        .zip(&ids)
        .map(|(a, id)| {
            if applied.contains_key(*id) {
                let to = written(&a.outcome, a.now_ms).state;
                Ok(Guarded::Applied(transit(State::Running, to)?))
            } else if let Some(e) = &second_failed {
                Err(e.clone())
            } else {
                now_in
                    .get(*id)
                    .map(|s| Guarded::Lost(*s))
                    .ok_or(StoreError::NotFound)
            }
        })
        .collect())
}

/// The second round of [`complete_many`]: in one transaction that takes
/// the insert marker first, the completions of `rest` that end a task
/// asking for a callback, then their callbacks. Those applied, by id.
async fn ends_with_callbacks(
    client: &mut deadpool_postgres::Object,
    rest: &[&Asked],
    callback_bytes: usize,
) -> Result<HashMap<Vec<u8>, i64>, StoreError> {
    let tx = client.transaction().await.map_err(db)?;
    write_ops::mark_inserting(&tx).await?;
    let ended = apply(&tx, rest, true).await?;
    if !ended.is_empty() {
        let positions: Vec<i64> = ended.values().copied().collect();
        // The callbacks' ids take the latest caller's now; in database
        // mode the rows' times are the statement's own.
        let now_ms = rest.iter().map(|a| a.now_ms).max().unwrap_or(0);
        let now = rest.iter().find_map(|a| a.now);
        write_ops::ended(
            &tx,
            &positions,
            Timestamp::from_millis(now_ms),
            now,
            callback_bytes,
        )
        .await?;
    }
    tx.commit().await.map_err(db)?;
    Ok(ended)
}

/// One flush of the completion batcher: [`complete_many`] on a pooled
/// connection, a task asked twice going into a later statement (one
/// statement would update it once).
pub(crate) async fn flush(
    pool: Pool,
    states_changed: Arc<AtomicBool>,
    asked: Vec<Asked>,
    callback_bytes: usize,
) -> Result<Vec<Result<Guarded, StoreError>>, StoreError> {
    let mut client = pool.get().await.map_err(crate::error::pool)?;
    let mut answers: Vec<Option<Result<Guarded, StoreError>>> =
        asked.iter().map(|_| None).collect();
    let mut rest: Vec<usize> = (0..asked.len()).collect();
    while !rest.is_empty() {
        let mut seen = HashSet::new();
        let (now, later): (Vec<usize>, Vec<usize>) =
            rest.into_iter().partition(|&i| seen.insert(asked[i].id));
        rest = later;
        let round: Vec<&Asked> = now.iter().map(|&i| &asked[i]).collect();
        let got = complete_many(&mut client, &round, callback_bytes).await?;
        states_changed.store(true, Ordering::Relaxed);
        for (i, answer) in now.into_iter().zip(got) {
            answers[i] = Some(answer);
        }
    }
    Ok(answers
        .into_iter()
        .map(|a| a.unwrap_or(Err(StoreError::NotFound)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tc_model::Timestamp;

    fn check(outcome: Completion, want: Written) {
        assert_eq!(written(&outcome, 1_000), want, "{outcome:?}");
    }

    #[test]
    fn each_outcome_writes_its_effect() {
        check(
            Completion::Success {
                http_status: 200,
                result: b"ok".to_vec(),
                content_type: Some("text/plain".into()),
            },
            Written {
                state: State::Success,
                http_status: Some(200),
                result: Some(b"ok".to_vec()),
                content_type: Some("text/plain".into()),
                error: None,
                delay_ms: None,
            },
        );
        check(
            Completion::Retry {
                next_run_at: Timestamp::from_millis(1_500),
                reason: "timeout".into(),
                http_status: None,
            },
            Written {
                state: State::Pending,
                http_status: None,
                result: None,
                content_type: None,
                error: Some("timeout".into()),
                delay_ms: Some(500),
            },
        );
        check(
            Completion::Failed {
                reason: "http_400".into(),
                http_status: Some(400),
            },
            Written {
                state: State::Failed,
                http_status: Some(400),
                result: None,
                content_type: None,
                error: Some("http_400".into()),
                delay_ms: None,
            },
        );
    }
}
