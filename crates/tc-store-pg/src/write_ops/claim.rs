//! Claim and hold: the claim (the walk under the destinations' limits, then
//! tc-model's share-out answered by statements), the heartbeat that extends leases, a release, and the recovery
//! of expired leases.

use std::collections::HashMap;
use std::time::Duration;

use deadpool_postgres::{Client, GenericClient, Transaction};
use tc_model::claim::{Ask, ClaimSequence, ClaimWalk, Lane, Take};
use tc_model::destination::{ClaimGate, DestinationSettings};
use tc_model::store::{Guarded, LeaseLost, StoreError};
use tc_model::{State, Task, TaskId, transit};

use crate::destinations::{claim_limits, fold_and_promote, settle, walk_ready};
use crate::error::db;
use crate::flow_keys::Keyed;
use crate::moves::count_moves;
use crate::rows::{self, millis, parse_state, task_columns};

use super::{INTERRUPTED, close_attempt, ended, guard, mark_inserting};

/// What the claim answers, before its due time is put on the caller's
/// clock.
pub(crate) struct Claimed {
    pub(crate) tasks: Vec<Task>,
    pub(crate) cursor: Option<String>,
    /// The earliest due time not yet come, and the store's clock when read.
    pub(crate) resume_after: (Option<i64>, i64),
}

/// The claim: see the port's `claim`.
pub(crate) async fn claim(
    tx: &Transaction<'_>,
    n: usize,
    now: Option<i64>,
    lease: Duration,
    gate: &ClaimGate,
) -> Result<Claimed, StoreError> {
    // The settings read and the fold are sent together (tokio-postgres
    // pipelines queries polled at once; the server runs them in order):
    // one round trip instead of three, since the claim loop is serial and
    // a drain is bound by its round trips.
    let (limits, ()) = tokio::try_join!(claim_limits(tx), fold_and_promote(tx, now),)?;
    let limits: HashMap<String, DestinationSettings> = limits.into_iter().collect();
    // A capped destination's room is known only once its row is locked
    // (below): the walk meets it without counting it towards enough.
    let is_capped = |name: &str| {
        limits
            .get(name)
            .is_some_and(|s| !s.paused && s.max_in_flight.is_some())
            && gate.allowance(name) != Some(0)
    };
    let mut walk = ClaimWalk::new(n, gate);
    walk_ready(tx, gate.after.as_deref(), |name| {
        if is_capped(name) {
            walk.visit_unsure(name);
            false
        } else {
            walk.visit(name, gate.claim_allowance(name, limits.get(name), 0))
        }
    })
    .await?;
    let (candidates, cursor) = walk.finish();
    let candidates = capped_rooms(tx, candidates, gate, &limits, is_capped).await?;
    let mut keyed = Keyed::new(now, gate.aging(), gate.held_keys.clone());
    let mut claimed = Vec::with_capacity(n);
    let mut asked: Vec<String> = Vec::new();
    // The share-out is tc-model's; this loop only answers its asks.
    let mut sequence = ClaimSequence::new(n, candidates, gate);
    while let Some(ask) = sequence.next_ask() {
        match ask {
            Ask::DueTenants { destination } => {
                sequence.due_tenants(due_tenants(tx, &destination, now).await?);
            }
            Ask::KeysInPlay {
                destination,
                tenant,
            } => {
                let keys = keyed.in_play(tx, &destination, tenant.as_deref()).await?;
                sequence.keys_in_play(keys);
            }
            Ask::Take(take) => {
                let got = take_due(tx, &take, &mut keyed, (lease, gate.aging())).await?;
                sequence.took(got.len());
                claimed.extend(got);
                asked.push(take.destination);
            }
        }
    }
    keyed.charge(tx).await?;
    asked.sort_unstable();
    asked.dedup();
    let resume_after = settle(tx, &asked, now).await?;
    Ok(Claimed {
        tasks: claimed,
        cursor,
        resume_after,
    })
}

/// The tasks a claim's [`Take`] moves to running: a tenant's lane shared
/// between its flow keys by `keyed`, or a lane's due tasks by priority,
/// oldest first.
async fn take_due(
    tx: &Transaction<'_>,
    take: &Take,
    keyed: &mut Keyed,
    (lease, aging): (Duration, Duration),
) -> Result<Vec<Task>, StoreError> {
    let (destination, want, now) = (take.destination.as_str(), take.want, keyed.now());
    match &take.lane {
        Lane::Keys(tenant) => keyed.claim(tx, destination, tenant, want, lease).await,
        Lane::Tenant(tenant) => {
            claim_of_tenant(tx, destination, tenant, want, now, lease, aging).await
        }
        Lane::Any => claim_of(tx, destination, want, now, lease, aging).await,
    }
}

/// The walk's `candidates` with the room of each capped one (`is_capped`)
/// known: its row locked and its running tasks counted
/// ([`lock_and_count_running`]).
async fn capped_rooms(
    tx: &Transaction<'_>,
    candidates: Vec<(String, Option<usize>)>,
    gate: &ClaimGate,
    limits: &HashMap<String, DestinationSettings>,
    is_capped: impl Fn(&str) -> bool,
) -> Result<Vec<(String, Option<usize>)>, StoreError> {
    let capped: Vec<&str> = candidates
        .iter()
        .map(|(name, _)| name.as_str())
        .filter(|name| is_capped(name))
        .collect();
    let running = lock_and_count_running(tx, &capped).await?;
    Ok(candidates
        .into_iter()
        .map(|(name, allowed)| {
            if is_capped(&name) {
                let busy = running.get(&name).copied().unwrap_or(0);
                let allowed = gate.claim_allowance(&name, limits.get(&name), busy);
                (name, allowed)
            } else {
                (name, allowed)
            }
        })
        .collect())
}

/// The running tasks of each destination in `$1` ([`lock_and_count_running`]).
pub(crate) const COUNT_RUNNING: &str = "SELECT destination, count(*) FROM queue \
     WHERE state = 'running' AND destination = ANY($1) GROUP BY destination";

/// Locks the `capped` destinations' rows (in name order, as every claim
/// does) and counts each one's running tasks: a capped destination's room
/// is only known under its lock.
async fn lock_and_count_running(
    tx: &Transaction<'_>,
    capped: &[&str],
) -> Result<HashMap<String, u64>, StoreError> {
    let mut running: HashMap<String, u64> = HashMap::new();
    if !capped.is_empty() {
        let lock = tx
            .prepare_cached(
                "SELECT destination FROM destinations WHERE destination = ANY($1) \
                 ORDER BY destination FOR UPDATE",
            )
            .await
            .map_err(db)?;
        tx.query(&lock, &[&capped]).await.map_err(db)?;
        let count = tx.prepare_cached(COUNT_RUNNING).await.map_err(db)?;
        for row in tx.query(&count, &[&capped]).await.map_err(db)? {
            let busy: i64 = row.try_get(1).map_err(db)?;
            running.insert(row.try_get(0).map_err(db)?, busy.unsigned_abs());
        }
    }
    Ok(running)
}

/// The claim's statement: takes up to `$2` due pending tasks of the
/// destination `$4` that also pass `$tenant` (a test of the tenant column,
/// or nothing), oldest due first. Their tries' history rows are written
/// when the tries end (schema step 19), not here.
macro_rules! claim_sql {
    ($tenant:literal) => {
        concat!(
            "WITH due AS ( \
                 SELECT q.pos, q.next_run_at FROM queue q JOIN tasks t ON t.pos = q.pos \
                 WHERE q.state = 'pending' AND q.destination = $4 ",
            $tenant,
            " AND q.next_run_at <= tc_now_ms($1) AND t.state = 'pending' \
                 ORDER BY q.next_run_at, q.pos LIMIT $2 \
                 FOR UPDATE OF t SKIP LOCKED",
            claim_tail!()
        )
    };
}

/// What every claim statement does with its `due` rows (the positions and
/// due times it locked): moves them to running, counts them
/// ([`crate::moves::count_moves`]) and answers them.
macro_rules! claim_tail {
    () => {
        concat!(
            "), claimed AS ( \
                 UPDATE tasks t SET state = 'running', attempt = t.attempt + 1, \
                                    started_at = tc_now_ms($1), \
                                    lease_until = tc_now_ms($1) + $3, \
                                    next_run_at = NULL, updated_at = tc_now_ms($1) \
                 FROM due WHERE t.pos = due.pos \
                 RETURNING due.next_run_at AS was_due, ",
            "t.pos, t.id, t.state, t.url, t.body, t.idempotency_key, t.attempt, \
             t.max_attempts, t.timeout_ns, t.http_status, t.result, t.result_content_type, \
             t.error, t.created_at, t.updated_at, t.started_at, t.finished_at, \
             t.next_run_at, t.lease_until, t.attempts_before_retry, t.schedule_at, \
             t.schedule_delay_ms, t.destination, t.method, t.headers, t.trace_context, \
             t.callback_url, t.callback_on, t.callback_of, t.callback_task_id, t.ends, \
             t.tenant, t.topic, t.event_id, t.subscription, t.priority, t.flow_key \
             ), moves AS ( \
                 SELECT pos, 'pending'::text AS from_state, state AS to_state, destination, \
                        NULL::bigint AS due, tenant, flow_key, priority \
                 FROM claimed \
             )",
            $crate::moves::count_moves!(),
            "SELECT ",
            task_columns!(),
            ", was_due FROM claimed ORDER BY was_due, pos"
        )
    };
}
pub(crate) use claim_tail;

/// The claim's statement for tasks of any tenant ([`claim_of`]).
pub(crate) const CLAIM: &str = claim_sql!("");

/// The claim's statement for one named tenant's tasks, `$5`
/// ([`claim_of_tenant`]). `tenant <> ''` written out: the partial index's
/// predicate, for the planner (a generic plan does not know the value).
pub(crate) const CLAIM_OF_TENANT: &str = claim_sql!("AND q.tenant = $5 AND q.tenant <> ''");

/// Moves up to `n` due pending tasks of `destination`, oldest due first,
/// to running. Rows another claimer has locked are skipped, not waited for.
pub(crate) async fn claim_of(
    tx: &Transaction<'_>,
    destination: &str,
    n: usize,
    now: Option<i64>,
    lease: Duration,
    aging: Duration,
) -> Result<Vec<Task>, StoreError> {
    transit(State::Pending, State::Running)?;
    if crate::priority::has_prioritized(tx, destination, None, now).await? {
        return crate::priority::claim(tx, destination, None, n, now, lease, aging).await;
    }
    let stmt = tx.prepare_cached(CLAIM).await.map_err(db)?;
    let limit = i64::try_from(n).unwrap_or(i64::MAX);
    let found = tx
        .query(&stmt, &[&now, &limit, &millis(lease), &destination])
        .await
        .map_err(db)?;
    claimed_tasks(&found)
}

/// The claimed tasks of a claim statement's rows, without their histories
/// (the port's claim carries none).
pub(crate) fn claimed_tasks(found: &[tokio_postgres::Row]) -> Result<Vec<Task>, StoreError> {
    found
        .iter()
        .map(|row| rows::task_from_row(row).map(|s| s.task))
        .collect()
}

/// [`due_tenants`]' statement: `$1` the caller's now, `$2` the destination.
/// The tasks without a tenant are looked for in due order (`queue_due`):
/// an `EXISTS` alone was planned as a scan of the whole queue once it was
/// analyzed (the planner counting on an early match).
pub(crate) const DUE_TENANTS: &str = "WITH RECURSIVE named AS ( \
         (SELECT tenant FROM queue \
          WHERE state = 'pending' AND tenant <> '' AND destination = $2 \
            AND next_run_at <= tc_now_ms($1) \
          ORDER BY tenant LIMIT 1) \
         UNION ALL \
         SELECT (SELECT t.tenant FROM queue t \
                 WHERE t.state = 'pending' AND t.tenant <> '' AND t.destination = $2 \
                   AND t.tenant > named.tenant AND t.next_run_at <= tc_now_ms($1) \
                 ORDER BY t.tenant LIMIT 1) \
         FROM named WHERE named.tenant IS NOT NULL \
     ) \
     SELECT tenant FROM named WHERE tenant IS NOT NULL \
     UNION ALL \
     SELECT '' WHERE ( \
         SELECT 1 FROM queue \
         WHERE state = 'pending' AND destination = $2 AND tenant = '' \
           AND next_run_at <= tc_now_ms($1) \
         ORDER BY next_run_at LIMIT 1) IS NOT NULL";

/// The tenants with due tasks on `destination`, as stored (`''`,
/// [`tc_model::tenant::NO_TENANT`], for tasks without one): the named
/// ones by a skip scan of `queue_due_by_tenant` (one index seek per
/// tenant, however deep its backlog), tasks without a tenant by
/// `queue_due`.
pub(super) async fn due_tenants(
    tx: &Transaction<'_>,
    destination: &str,
    now: Option<i64>,
) -> Result<Vec<String>, StoreError> {
    let stmt = tx.prepare_cached(DUE_TENANTS).await.map_err(db)?;
    tx.query(&stmt, &[&now, &destination])
        .await
        .map_err(db)?
        .iter()
        .map(|row| row.try_get(0).map_err(db))
        .collect()
}

/// [`claim_of`] for one tenant's tasks (`''`: those without a tenant).
#[allow(clippy::too_many_arguments)]
pub(super) async fn claim_of_tenant(
    tx: &Transaction<'_>,
    destination: &str,
    tenant: &str,
    n: usize,
    now: Option<i64>,
    lease: Duration,
    aging: Duration,
) -> Result<Vec<Task>, StoreError> {
    transit(State::Pending, State::Running)?;
    if crate::priority::has_prioritized(tx, destination, Some(tenant), now).await? {
        let tenant = Some(tenant);
        return crate::priority::claim(tx, destination, tenant, n, now, lease, aging).await;
    }
    let limit = i64::try_from(n).unwrap_or(i64::MAX);
    let found = if tenant.is_empty() {
        let stmt = tx
            .prepare_cached(claim_sql!("AND q.tenant = ''"))
            .await
            .map_err(db)?;
        tx.query(&stmt, &[&now, &limit, &millis(lease), &destination])
            .await
            .map_err(db)?
    } else {
        let stmt = tx.prepare_cached(CLAIM_OF_TENANT).await.map_err(db)?;
        tx.query(
            &stmt,
            &[&now, &limit, &millis(lease), &destination, &tenant],
        )
        .await
        .map_err(db)?
    };
    claimed_tasks(&found)
}

/// Extends the lease of each `(id, attempt)` still running with that very
/// attempt, `RETURNING` the pairs it extended; the others are read back in
/// one more statement (a fresh snapshot: their states as they are now). So
/// a tick is one statement, two when leases were lost, however many pairs.
pub(crate) async fn heartbeat(
    client: &Client,
    running: &[(TaskId, u32)],
    now: Option<i64>,
    lease: Duration,
) -> Result<Vec<LeaseLost>, StoreError> {
    let mut running = running.to_vec();
    running.sort_unstable();
    running.dedup();
    let ids: Vec<&[u8]> = running
        .iter()
        .map(|(id, _)| id.as_bytes().as_slice())
        .collect();
    let attempts: Vec<i32> = running
        .iter()
        .map(|(_, n)| i32::try_from(*n).unwrap_or(i32::MAX))
        .collect();
    let stmt = client
        .prepare_cached(
            // Never shortens a lease: a late heartbeat must not hand a task to
            // recovery earlier than the lease it already had.
            "UPDATE tasks t SET lease_until = greatest(coalesce(t.lease_until, tc_now_ms($1) + $4), \
                                                       tc_now_ms($1) + $4) \
             FROM unnest($2::bytea[], $3::integer[]) AS r(id, attempt) \
             WHERE t.id = r.id AND t.attempt = r.attempt AND t.state = 'running' \
             RETURNING t.id, t.attempt",
        )
        .await
        .map_err(db)?;
    let mut extended = std::collections::HashSet::with_capacity(running.len());
    for row in client
        .query(&stmt, &[&now, &ids, &attempts, &millis(lease)])
        .await
        .map_err(db)?
    {
        let attempt: i32 = row.try_get(1).map_err(db)?;
        extended.insert((
            rows::parse_id(row.try_get(0).map_err(db)?)?,
            u32::try_from(attempt).unwrap_or(0),
        ));
    }
    let lost: Vec<(TaskId, u32)> = running
        .into_iter()
        .filter(|pair| !extended.contains(pair))
        .collect();
    if lost.is_empty() {
        return Ok(Vec::new());
    }
    let stmt = client
        .prepare_cached("SELECT id, state FROM tasks WHERE id = ANY($1)")
        .await
        .map_err(db)?;
    let lost_ids: Vec<&[u8]> = lost
        .iter()
        .map(|(id, _)| id.as_bytes().as_slice())
        .collect();
    let mut states = HashMap::with_capacity(lost.len());
    for row in client.query(&stmt, &[&lost_ids]).await.map_err(db)? {
        let state: String = row.try_get(1).map_err(db)?;
        states.insert(
            rows::parse_id(row.try_get(0).map_err(db)?)?,
            parse_state(&state)?,
        );
    }
    Ok(lost
        .into_iter()
        .map(|(id, attempt)| LeaseLost {
            id,
            attempt,
            state: states.get(&id).copied(),
        })
        .collect())
}

/// Running → pending without using up the attempt, if still on `attempt`.
pub(crate) async fn release(
    tx: &Transaction<'_>,
    id: &TaskId,
    attempt: u32,
    now: Option<i64>,
) -> Result<Guarded, StoreError> {
    let head = match guard(tx, id, attempt).await? {
        Ok(head) => head,
        Err(lost) => return Ok(lost),
    };
    let to = transit(head.state, State::Pending)?;
    let stmt = tx
        .prepare_cached(concat!(
            "WITH moves AS ( \
                     UPDATE tasks SET state = 'pending', attempt = attempt - 1, \
                                      next_run_at = tc_now_ms($1), lease_until = NULL, \
                                      error = $3, updated_at = tc_now_ms($1) \
                     WHERE pos = $2 \
                     RETURNING pos, 'running'::text AS from_state, state AS to_state, destination, \
                               next_run_at AS due, tenant, flow_key, priority \
                 )",
            count_moves!(),
            "SELECT 1 FROM moves"
        ))
        .await
        .map_err(db)?;
    tx.execute(&stmt, &[&now, &head.pos, &INTERRUPTED])
        .await
        .map_err(db)?;
    // The history keeps the interrupted try; the next claim reuses its n.
    close_attempt(tx, id, attempt, now, None, Some(INTERRUPTED)).await?;
    Ok(Guarded::Applied(to))
}

/// Recovery's statement ([`recover_expired`]): `$3` whether it may fail
/// tasks that ask for a callback, `$4` the most tasks it moves
/// ([`RECOVERY_CHUNK`]). Running tasks are found by the positions of
/// `queue`'s running rows (`queue_running`, schema step 25), their leases
/// checked on `tasks` (no index names the lease: a heartbeat stays a HOT
/// update); their history rows by an array of ids (a join alone was
/// planned as a scan of every row).
pub(crate) const RECOVER: &str = concat!(
    "WITH expired AS ( \
         SELECT pos, attempt < max_attempts + attempts_before_retry AS again FROM tasks \
         WHERE pos = ANY (ARRAY(SELECT pos FROM queue WHERE state = 'running')) \
           AND state = 'running' AND lease_until < tc_now_ms($1) \
           AND ($3 OR callback_url IS NULL \
                OR attempt < max_attempts + attempts_before_retry) \
         LIMIT $4 FOR UPDATE SKIP LOCKED \
     ), moved AS ( \
         UPDATE tasks t SET \
             state = CASE WHEN e.again THEN 'pending' ELSE 'failed' END, \
             next_run_at = CASE WHEN e.again THEN tc_now_ms($1) END, \
             finished_at = CASE WHEN e.again THEN NULL ELSE tc_now_ms($1) END, \
             lease_until = NULL, error = $2, updated_at = tc_now_ms($1), \
             ends = t.ends + CASE WHEN e.again THEN 0 ELSE 1 END \
         FROM expired e WHERE t.pos = ANY (ARRAY(SELECT pos FROM expired)) AND t.pos = e.pos \
         RETURNING t.id, t.attempt, t.pos, t.started_at, \
                   NOT e.again AND t.callback_url IS NOT NULL AS asks_callback, \
                   t.state, t.destination, t.next_run_at, t.tenant, t.flow_key, t.priority \
     ), moves AS ( \
         SELECT pos, 'running'::text AS from_state, state AS to_state, destination, \
                next_run_at AS due, tenant, flow_key, priority \
         FROM moved \
     )",
    count_moves!(),
    ", closed AS ( \
         UPDATE attempts a SET finished_at = tc_now_ms($1), error = $2, \
                               duration_ms = greatest(tc_now_ms($1) - a.started_at, 0) \
         FROM moved m \
         WHERE a.task_id = ANY (ARRAY(SELECT id FROM moved)) \
           AND a.task_id = m.id AND a.n = m.attempt AND a.finished_at IS NULL \
         RETURNING a.task_id \
     ), written AS ( \
         INSERT INTO attempts (task_id, n, started_at, finished_at, error, duration_ms) \
         SELECT m.id, m.attempt, coalesce(m.started_at, tc_now_ms($1)), tc_now_ms($1), $2, \
                greatest(tc_now_ms($1) - coalesce(m.started_at, tc_now_ms($1)), 0) \
         FROM moved m WHERE m.id NOT IN (SELECT task_id FROM closed) \
     ) \
     SELECT pos, asks_callback FROM moved"
);

/// Running tasks whose lease ended before now → pending, or → failed when no
/// attempt is left, with their open tries closed; one statement, then the
/// callbacks of those that failed (in the same transaction). Rows locked
/// by a write in progress (a completion racing the recovery) are skipped:
/// that write decides them.
pub(crate) async fn recover_expired(
    tx: &Transaction<'_>,
    (now_ms, now): (tc_model::Timestamp, Option<i64>),
    callback_bytes: usize,
) -> Result<usize, StoreError> {
    transit(State::Running, State::Pending)?;
    transit(State::Running, State::Failed)?;
    // A recovery that fails a task asking for a callback inserts one: it
    // says so before its first write. One it did not foresee (its lease ran
    // out since) is left for the next round.
    let foresee = tx
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM tasks \
                            WHERE pos = ANY (ARRAY(SELECT pos FROM queue \
                                                   WHERE state = 'running')) \
                              AND state = 'running' AND lease_until < tc_now_ms($1) \
                              AND attempt >= max_attempts + attempts_before_retry \
                              AND callback_url IS NOT NULL)",
        )
        .await
        .map_err(db)?;
    let inserts: bool = tx
        .query_one(&foresee, &[&now])
        .await
        .map_err(db)?
        .try_get(0)
        .map_err(db)?;
    if inserts {
        mark_inserting(tx).await?;
    }
    let stmt = tx.prepare_cached(RECOVER).await.map_err(db)?;
    let mut failed_with_callback = Vec::new();
    let mut recovered = 0;
    loop {
        let moved = tx
            .query(&stmt, &[&now, &INTERRUPTED, &inserts, &RECOVERY_CHUNK])
            .await
            .map_err(db)?;
        for row in &moved {
            if row.try_get::<_, bool>(1).map_err(db)? {
                failed_with_callback.push(row.try_get::<_, i64>(0).map_err(db)?);
            }
        }
        recovered += moved.len();
        if moved.len() < RECOVERY_CHUNK.unsigned_abs() as usize {
            break;
        }
    }
    ended(tx, &failed_with_callback, now_ms, now, callback_bytes).await?;
    Ok(recovered)
}

/// The most expired leases one run of [`RECOVER`] moves; a recovery runs
/// it again until a run moves fewer. Its joins between the tasks it moved
/// and `tasks`, `queue` and `attempts` are planned from estimates, which
/// before the tables are analyzed say one task: as a probe of every moved
/// position for each moved task, quadratic (10,000 leases at once took
/// over two minutes in one statement, measured; 256 keep a run's probes
/// to 65,536).
const RECOVERY_CHUNK: i64 = 256;
