//! Claim and hold: the claim (the walk under the destinations' limits, then
//! tc-model's share-out answered from the indexes), the heartbeat that extends leases, a
//! release, and the recovery of expired leases.

use std::collections::BTreeSet;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use tc_model::claim::{Ask, Claim, ClaimSequence, ClaimWalk, Lane, Take};
use tc_model::destination::ClaimGate;
use tc_model::store::{Guarded, LeaseLost, StoreError};
use tc_model::tenant::NO_TENANT;
use tc_model::{State, Task, TaskId, Timestamp, transit};

use crate::destinations;
use crate::flow_keys::{Keyed, keyed_due};
use crate::moves::{self, At};
use crate::rows::{self, db, parse_id, parse_state};

use super::{INTERRUPTED, Try, close_attempt, ended, guard, write_one};

/// The running tasks whose lease ended, through the partial index
/// `tasks_leased` (pinned for the same reason as the claim's queries, see
/// [`crate::destinations::DUE_OF`]).
pub(crate) const EXPIRED: &str = "SELECT seq, id, state, attempt, max_attempts + attempts_before_retry, \
                                   started_at, destination \
     FROM tasks INDEXED BY tasks_leased \
     WHERE state = 'running' AND lease_until < ?1";

/// Moves up to `n` due pending tasks to running, sharing them fairly over
/// their destinations within the destinations' settings and `gate` (see
/// the port's `claim`); oldest due first within a destination.
pub(crate) fn claim(
    conn: &Connection,
    n: usize,
    now: Timestamp,
    lease: Duration,
    gate: &ClaimGate,
) -> Result<Claim, StoreError> {
    // The walk reads the counts: first the moves of the batch's earlier
    // commands. The claim runs without a savepoint (`Undo::WholeBatch`),
    // so what it applies stands or falls with the whole batch.
    moves::apply(conn).map_err(db)?;
    let limits = destinations::claim_limits(conn)?;
    let running = if limits.values().any(|s| s.max_in_flight.is_some()) {
        destinations::running_by_destination(conn)?
    } else {
        Default::default()
    };
    let mut walk = ClaimWalk::new(n, gate);
    if !walk.is_done() {
        destinations::walk_due(conn, now, gate.after.as_deref(), |name| {
            let busy = running.get(name).copied().unwrap_or(0);
            walk.visit(name, gate.claim_allowance(name, limits.get(name), busy))
        })?;
    }
    let (candidates, cursor) = walk.finish();
    let mut keyed = Keyed::new(now, gate.aging(), &gate.held_keys);
    let lease_until = now.saturating_add(lease);
    let mut claimed = Vec::with_capacity(n);
    // The share-out is tc-model's; this loop only answers its asks.
    let mut sequence = ClaimSequence::new(n, candidates, gate);
    while let Some(ask) = sequence.next_ask() {
        match ask {
            Ask::DueTenants { destination } => {
                sequence.due_tenants(due_tenants(conn, &destination, now)?);
            }
            Ask::KeysInPlay {
                destination,
                tenant,
            } => sequence.keys_in_play(keyed.in_play(conn, &destination, tenant.as_deref())?),
            Ask::Take(take) => {
                let due = take_due(conn, &take, &mut keyed, (now, gate.aging()))?;
                sequence.took(due.len());
                for (seq, state) in due {
                    let at = (now, lease_until);
                    claimed.push(claim_one(conn, seq, &state, &take.destination, at)?);
                }
            }
        }
    }
    keyed.charge(conn)?;
    // Its own moves too, before `resume_after` reads the earliest due time
    // of the destinations it took from (the later tasks left there).
    moves::apply(conn).map_err(db)?;
    Ok(Claim {
        tasks: claimed,
        resume_after: destinations::next_waiting(conn)?,
        cursor,
    })
}

/// Moves the pending task at `seq` to running.
pub(super) fn claim_one(
    conn: &Connection,
    seq: i64,
    state: &str,
    destination: &str,
    (now, lease_until): (Timestamp, Timestamp),
) -> Result<Task, StoreError> {
    let from = parse_state(state)?;
    let to = transit(from, State::Running)?;
    // No RETURNING: SQLite collects RETURNING rows in an ephemeral table,
    // built and torn down for every statement; reading the row back by seq
    // costs less (callgrind, see docs/performance.md).
    write_one(
        conn,
        "UPDATE OR FAIL tasks SET state = ?3, attempt = attempt + 1, started_at = ?4, \
                          lease_until = ?5, next_run_at = NULL, updated_at = ?4 \
         WHERE seq = ?1 AND state = ?2",
        params![
            seq,
            from.as_str(),
            to.as_str(),
            now.as_millis(),
            lease_until.as_millis()
        ],
    )?;
    // Its due time is not read: the claim takes the earliest due, which
    // the counts then read again.
    moves::moved(destination, Some(At::state(from)), Some(At::state(to)));
    // The try's history row is written once, when the try ends
    // ([`close_attempt`]); while it runs, reads show it from the task's own
    // attempt and start (`rows::attempts_of`).
    conn.prepare_cached(concat!(
        "SELECT ",
        rows::task_columns!(),
        " FROM tasks WHERE seq = ?1"
    ))
    .map_err(db)?
    .query_row([seq], |row| Ok(rows::task_from_row(row)))
    .map_err(db)?
    .map(|stored| stored.task)
}

/// Extends the lease of each `(id, attempt)` still running with that
/// attempt, `RETURNING` the pairs it extended; the others are read back with
/// their states. Two statements at most, however many pairs: the pairs go
/// in as one JSON array (`[["<task id>", attempt], …]`).
pub(crate) fn heartbeat(
    conn: &Connection,
    running: &[(TaskId, u32)],
    now: Timestamp,
    lease: Duration,
) -> Result<Vec<LeaseLost>, StoreError> {
    let mut running = running.to_vec();
    running.sort_unstable();
    running.dedup();
    let lease_until = now.saturating_add(lease).as_millis();
    let pairs = format!(
        "[{}]",
        running
            .iter()
            .map(|(id, n)| format!("[\"{id}\",{n}]"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut extend = conn
        .prepare_cached(
            // Never shortens a lease: a late heartbeat must not hand a task to
            // recovery earlier than the lease it already had.
            "UPDATE tasks SET lease_until = max(coalesce(tasks.lease_until, ?2), ?2) \
             FROM (SELECT unhex(value ->> 0, '-') AS id, value ->> 1 AS attempt \
                   FROM json_each(?1)) AS r \
             WHERE tasks.id = r.id AND tasks.attempt = r.attempt AND tasks.state = 'running' \
             RETURNING tasks.id, tasks.attempt",
        )
        .map_err(db)?;
    let mut extended = std::collections::HashSet::with_capacity(running.len());
    let mut rows = extend.query(params![pairs, lease_until]).map_err(db)?;
    while let Some(row) = rows.next().map_err(db)? {
        let id: Vec<u8> = row.get(0).map_err(db)?;
        let attempt: u32 = row.get(1).map_err(db)?;
        extended.insert((parse_id(id)?, attempt));
    }
    drop(rows);
    let lost: Vec<(TaskId, u32)> = running
        .into_iter()
        .filter(|pair| !extended.contains(pair))
        .collect();
    if lost.is_empty() {
        return Ok(Vec::new());
    }
    let ids = format!(
        "[{}]",
        lost.iter()
            .map(|(id, _)| format!("\"{id}\""))
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut read = conn
        .prepare_cached(
            "SELECT id, state FROM tasks \
             WHERE id IN (SELECT unhex(value, '-') FROM json_each(?1))",
        )
        .map_err(db)?;
    let mut states = std::collections::HashMap::with_capacity(lost.len());
    let mut rows = read.query(params![ids]).map_err(db)?;
    while let Some(row) = rows.next().map_err(db)? {
        let id: Vec<u8> = row.get(0).map_err(db)?;
        let state: String = row.get(1).map_err(db)?;
        states.insert(parse_id(id)?, parse_state(&state)?);
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
pub(crate) fn release(
    conn: &Connection,
    id: &TaskId,
    attempt: u32,
    now: Timestamp,
) -> Result<Guarded, StoreError> {
    let head = match guard(conn, id, attempt)? {
        Ok(head) => head,
        Err(lost) => return Ok(lost),
    };
    let to = transit(head.state, State::Pending)?;
    write_one(
        conn,
        "UPDATE tasks SET state = ?4, attempt = attempt - 1, next_run_at = ?5, \
                          lease_until = NULL, error = ?6, updated_at = ?5 \
         WHERE seq = ?1 AND state = ?2 AND attempt = ?3",
        params![
            head.seq,
            head.state.as_str(),
            attempt,
            to.as_str(),
            now.as_millis(),
            INTERRUPTED
        ],
    )?;
    let back = At::pending(now.as_millis());
    moves::moved(&head.destination, Some(At::state(head.state)), Some(back));
    // The history keeps the interrupted try; the next claim reuses its n.
    let tried = Try {
        id,
        n: attempt,
        started_at: head.started_at,
    };
    close_attempt(conn, tried, now, None, Some(INTERRUPTED))?;
    Ok(Guarded::Applied(to))
}

/// A row of [`EXPIRED`]: seq, id, state, attempt, the attempt limit, and
/// when the try began.
pub(super) type ExpiredRow = (i64, Vec<u8>, String, u32, u32, Option<i64>, String);

/// Running tasks whose lease ended before `now` → pending, or → failed when
/// no attempt is left. Returns how many moved.
pub(crate) fn recover_expired(
    conn: &Connection,
    now: Timestamp,
    callback_bytes: usize,
) -> Result<usize, StoreError> {
    let expired: Vec<ExpiredRow> = conn
        .prepare_cached(EXPIRED)
        .map_err(db)?
        .query_map([now.as_millis()], |row| row.try_into())
        .map_err(db)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db)?;
    let now_ms = now.as_millis();
    let moved = expired.len();
    for (seq, id, state, attempt, attempt_limit, started_at, destination) in expired {
        let from = parse_state(&state)?;
        let to = if attempt < attempt_limit {
            transit(from, State::Pending)?
        } else {
            transit(from, State::Failed)?
        };
        let (next_run_at, finished_at) = match to {
            State::Pending => (Some(now_ms), None),
            _ => (None, Some(now_ms)),
        };
        write_one(
            conn,
            "UPDATE tasks SET state = ?4, next_run_at = ?5, finished_at = ?6, \
                              lease_until = NULL, error = ?7, updated_at = ?8, \
                              ends = ends + (?4 <> 'pending') \
             WHERE seq = ?1 AND state = ?2 AND attempt = ?3",
            params![
                seq,
                from.as_str(),
                attempt,
                to.as_str(),
                next_run_at,
                finished_at,
                INTERRUPTED,
                now_ms
            ],
        )?;
        let after = match to {
            State::Pending => At::pending(now_ms),
            _ => At::state(to),
        };
        moves::moved(&destination, Some(At::state(from)), Some(after));
        let id = parse_id(id)?;
        let tried = Try {
            id: &id,
            n: attempt,
            started_at,
        };
        close_attempt(conn, tried, now, None, Some(INTERRUPTED))?;
        if to.is_terminal() {
            ended(conn, seq, now, callback_bytes)?;
        }
    }
    Ok(moved)
}

/// The first tenant after `after` (in name order) with a pending task
/// without a flow key in a destination, and whether its earliest is due:
/// one seek in `tasks_due_unkeyed`, whose entries run by tenant then due
/// time.
pub(crate) const NEXT_TENANT: &str = "SELECT tenant, next_run_at <= ?3 \
     FROM tasks INDEXED BY tasks_due_unkeyed \
     WHERE state = 'pending' AND flow_key = '' AND tenant <> '' AND destination = ?1 \
       AND tenant > ?2 \
     ORDER BY tenant, next_run_at LIMIT 1";

/// The first tenant after `after` (in name order) with a pending keyed
/// task in a destination: one seek in `tasks_due_by_key`.
pub(crate) const NEXT_KEYED_TENANT: &str = "SELECT tenant FROM tasks INDEXED BY tasks_due_by_key \
     WHERE state = 'pending' AND flow_key <> '' AND destination = ?1 AND tenant > ?2 \
     ORDER BY tenant LIMIT 1";

/// A tenant's due tasks without a flow key in a destination, oldest due
/// first: a named tenant's or, with `''` ([`NO_TENANT`]), the tasks
/// without one. One seek in `tasks_due_unkeyed` (schema step 28), however
/// many of another tenant's, or of its own keyed, due tasks come before
/// them. A lane's take reads it only when no keyed task of the tenant is
/// due there (the claim's key level takes those), so these are all its due
/// tasks.
pub(crate) const DUE_OF_TENANT: &str = "SELECT seq, state FROM tasks INDEXED BY tasks_due_unkeyed \
     WHERE state = 'pending' AND flow_key = '' AND destination = ?1 AND tenant = ?2 \
       AND next_run_at <= ?3 \
     ORDER BY next_run_at, seq LIMIT ?4";

pub(crate) fn due_of(
    conn: &Connection,
    destination: &str,
    tenant: &str,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<(i64, String)>, StoreError> {
    conn.prepare_cached(DUE_OF_TENANT)
        .map_err(db)?
        .query_map(
            params![
                destination,
                tenant,
                now.as_millis(),
                i64::try_from(limit).unwrap_or(i64::MAX)
            ],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .map_err(db)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db)
}

/// The tenants with due tasks in `destination`, in name order
/// ([`NO_TENANT`], first, for the tasks without one). The tasks without a
/// flow key and the keyed ones are in two indexes (schema step 28): one
/// seek per tenant in each, and for a tenant with keyed tasks only, the
/// question whether one of them is due.
pub(super) fn due_tenants(
    conn: &Connection,
    destination: &str,
    now: Timestamp,
) -> Result<Vec<String>, StoreError> {
    let mut named = BTreeSet::new();
    let mut next = conn.prepare_cached(NEXT_TENANT).map_err(db)?;
    let mut after = String::new();
    loop {
        let found: Option<(String, bool)> = next
            .query_row(params![destination, after, now.as_millis()], |row| {
                row.try_into()
            })
            .optional()
            .map_err(db)?;
        let Some((tenant, is_due)) = found else {
            break;
        };
        if is_due {
            named.insert(tenant.clone());
        }
        after = tenant;
    }
    let mut next = conn.prepare_cached(NEXT_KEYED_TENANT).map_err(db)?;
    let mut after = String::new();
    loop {
        let found: Option<String> = next
            .query_row(params![destination, after], |row| row.get(0))
            .optional()
            .map_err(db)?;
        let Some(tenant) = found else {
            break;
        };
        if !named.contains(&tenant) && keyed_due(conn, destination, Some(&tenant), now)? {
            named.insert(tenant.clone());
        }
        after = tenant;
    }
    let mut due = Vec::with_capacity(named.len() + 1);
    if !due_of(conn, destination, NO_TENANT, now, 1)?.is_empty()
        || keyed_due(conn, destination, Some(NO_TENANT), now)?
    {
        due.push(NO_TENANT.to_owned());
    }
    due.extend(named);
    Ok(due)
}

/// The due tasks (seq, state as read) of a claim's [`Take`]: a tenant's
/// lane shared between its flow keys by `keyed`, or a lane's due tasks by
/// priority, oldest first ([`crate::priority::due_of`]).
fn take_due(
    conn: &Connection,
    take: &Take,
    keyed: &mut Keyed,
    (now, aging): (Timestamp, Duration),
) -> Result<Vec<(i64, String)>, StoreError> {
    let destination = take.destination.as_str();
    match &take.lane {
        Lane::Keys(tenant) => keyed.take(conn, destination, tenant, take.want),
        Lane::Tenant(tenant) => {
            let tenant = Some(tenant.as_str());
            crate::priority::due_of(conn, destination, tenant, now, take.want, aging)
        }
        Lane::Any => crate::priority::due_of(conn, destination, None, now, take.want, aging),
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    /// Pending tasks of destination `h:80` as (tenant, flow key, due at).
    fn check(tasks: &[(&str, &str, i64)], now: i64, want: &[&str]) {
        let conn = crate::schema::memory_writer();
        for (k, (tenant, key, due)) in tasks.iter().enumerate() {
            conn.execute(
                "INSERT INTO tasks (id, idempotency_key, state, url, body, max_attempts, \
                                    timeout_ns, created_at, updated_at, destination, tenant, \
                                    flow_key, next_run_at) \
                 VALUES (randomblob(16), ?1, 'pending', 'http://h:80/', x'', 1, 1000000, \
                         0, 0, 'h:80', ?2, ?3, ?4)",
                params![format!("k{k}"), tenant, key, due],
            )
            .unwrap();
        }
        let due = due_tenants(&conn, "h:80", Timestamp::from_millis(now)).unwrap();
        assert_eq!(due, want, "{tasks:?} at {now}");
    }

    /// The due tenants are read from two indexes since schema step 28 (the
    /// tasks without a flow key, the keyed ones): a tenant is due when
    /// either kind of its tasks is.
    #[test]
    fn a_tenant_is_due_by_its_tasks_with_a_key_or_without() {
        check(&[], 10, &[]);
        check(&[("", "", 5)], 10, &[""]);
        check(&[("", "K", 5)], 10, &[""]);
        check(&[("", "K", 50), ("", "", 60)], 10, &[]);
        check(&[("", "K", 5), ("a", "K", 5)], 10, &["", "a"]);
        check(
            &[
                ("a", "", 5),
                ("b", "K", 5),
                ("b", "", 50),
                ("c", "K", 50),
                ("d", "", 50),
                ("e", "K", 50),
                ("e", "L", 5),
            ],
            10,
            &["a", "b", "e"],
        );
    }
}
