//! The write operations, as plain synchronous functions on a connection that
//! is inside a transaction. The writer thread runs each in a savepoint of its
//! batch; tests and tools can call them directly, without a runtime. One
//! room a transition, as PostgreSQL's adapter splits them: submit.rs, claim.rs
//! (claim, heartbeat, release, recovery), end.rs (completion, cancel,
//! delete, prune, retry) and bulk.rs; this file keeps what they share (the
//! guarded write, the history row of an ended try).
//!
//! Every state change asks [`tc_model::transit`] first and writes with the
//! state it read in the WHERE clause, so a write can never land on a row that
//! moved meanwhile.

mod bulk;
mod claim;
mod end;
mod submit;

use rusqlite::{Connection, OptionalExtension, params};
use tc_model::store::{Guarded, StoreError};
use tc_model::{State, Task, TaskId, Timestamp};

use crate::rows::{self, db, parse_state};

pub(crate) use tc_model::completion::INTERRUPTED;

pub(crate) use bulk::{BulkStep, bulk_chunk};
// The statements whose query plans schema.rs's tests check.
#[cfg(test)]
pub(crate) use claim::{DUE_OF_TENANT, EXPIRED, NEXT_KEYED_TENANT, NEXT_TENANT};
pub(crate) use claim::{claim, due_of as due_of_tenant, heartbeat, recover_expired, release};
pub(crate) use end::{
    KEEP_FREE_PAGES, admit_retry, cancel, complete, delete, prune, reclaim_free_pages, retry,
};
use end::{ended, retry_seq};
#[cfg(test)]
pub(crate) use submit::OPEN_TASKS_OF;
#[cfg(any(test, feature = "raw"))]
pub(crate) use submit::submit;
use submit::submit_as;
pub(crate) use submit::{
    Made, SubmitRow, check_acting, known_task, new_id, open_tasks_of, seq_floor_above,
    submit_prepared,
};

/// The fields a guarded write checks, and when the try began.
struct Head {
    seq: i64,
    state: State,
    started_at: Option<i64>,
    destination: String,
}

/// The task's head if it is running with `attempt`; otherwise the `Lost`
/// answer to give. An unknown id is [`StoreError::NotFound`].
fn guard(
    conn: &Connection,
    id: &TaskId,
    attempt: u32,
) -> Result<Result<Head, Guarded>, StoreError> {
    let row: Option<(i64, String, u32, Option<i64>, String)> = conn
        .prepare_cached(
            "SELECT seq, state, attempt, started_at, destination FROM tasks WHERE id = ?1",
        )
        .map_err(db)?
        .query_row([id.as_bytes()], |row| row.try_into())
        .optional()
        .map_err(db)?;
    let Some((seq, state, current, started_at, destination)) = row else {
        return Err(StoreError::NotFound);
    };
    let state = parse_state(&state)?;
    if state == State::Running && current == attempt {
        Ok(Ok(Head {
            seq,
            state,
            started_at,
            destination,
        }))
    } else {
        Ok(Err(Guarded::Lost(state)))
    }
}

/// Runs an UPDATE that must change exactly the one row it names. Zero rows
/// would mean the row moved inside this transaction, which the single writer
/// rules out; it is reported rather than ignored.
fn write_one(
    conn: &Connection,
    sql: &str,
    params: &[&dyn rusqlite::ToSql],
) -> Result<(), StoreError> {
    let changed = conn
        .prepare_cached(sql)
        .map_err(db)?
        .execute(params)
        .map_err(db)?;
    if changed == 1 {
        Ok(())
    } else {
        Err(StoreError::Unavailable(format!(
            "guarded update changed {changed} rows instead of 1"
        )))
    }
}

/// The try that ends: its task, number and start (the task's
/// `started_at`, set by the claim that began it).
struct Try<'a> {
    id: &'a TaskId,
    n: u32,
    started_at: Option<i64>,
}

/// Writes the history row of a try that ended at `now`: once, whole (no
/// row while it runs, so a claim writes none and an end updates none;
/// schema step 23).
fn close_attempt(
    conn: &Connection,
    ended: Try<'_>,
    now: Timestamp,
    http_status: Option<u16>,
    error: Option<&str>,
) -> Result<(), StoreError> {
    let now = now.as_millis();
    let started_at = ended.started_at.unwrap_or(now);
    let duration_ms = if now > started_at {
        now - started_at
    } else {
        0
    };
    conn.prepare_cached(
        "INSERT OR FAIL INTO attempts (task_id, n, started_at, finished_at, http_status, error, \
                                       duration_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )
    .map_err(db)?
    .execute(params![
        ended.id.as_bytes(),
        ended.n,
        started_at,
        now,
        http_status,
        error,
        duration_ms
    ])
    .map_err(db)?;
    Ok(())
}

fn load_seq(conn: &Connection, seq: i64) -> Result<Task, StoreError> {
    rows::load_seq(conn, seq)?
        .map(|stored| stored.task)
        .ok_or_else(|| StoreError::Unavailable(format!("task at seq {seq} vanished")))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tc_model::{Limits, NewTask, Timestamp};

    use tc_model::destination::ClaimGate;

    use super::*;
    use crate::rows::parse_id;

    fn task(key: &str) -> NewTask {
        NewTask::new(
            "http://127.0.0.1:9/".into(),
            b"{}".to_vec(),
            key.into(),
            3,
            Duration::from_secs(1),
            &Limits::default(),
        )
        .unwrap()
    }

    /// A submit takes SQLite's next rowid unless deletes raised the floor
    /// above the last seq; either way no seq is handed out twice.
    #[test]
    fn a_submit_never_takes_a_deleted_task_s_seq() {
        let conn = crate::schema::memory_writer();
        let seq_of = |key: &str| -> i64 {
            conn.query_row(
                "SELECT seq FROM tasks WHERE idempotency_key = ?1",
                [key],
                |row| row.get(0),
            )
            .unwrap()
        };
        let submit = |key: &str| {
            super::submit(&conn, &task(key), Timestamp::from_millis(1)).unwrap();
            seq_of(key)
        };
        let check = |key: &str, want: i64| assert_eq!(submit(key), want, "{key}");
        check("a", 1);
        check("b", 2);
        check("c", 3);
        // The last two tasks end and are deleted: the floor is now 3.
        for key in ["b", "c"] {
            conn.execute(
                "UPDATE tasks SET state = 'success' WHERE idempotency_key = ?1",
                [key],
            )
            .unwrap();
            let id = parse_id(
                conn.query_row(
                    "SELECT id FROM tasks WHERE idempotency_key = ?1",
                    [key],
                    |row| row.get(0),
                )
                .unwrap(),
            )
            .unwrap();
            delete(&conn, &id, &tc_model::tenant::Scope::Admin).unwrap();
        }
        check("d", 4);
        check("e", 5);
    }

    /// With tenants in the gate, the tasks without a tenant are one more
    /// tenant of weight 1 however long a tenant's backlog ahead of them:
    /// the first claim of two takes one of "a"'s and the admin's task
    /// (before schema step 18 the walk that found them stopped 512 tasks
    /// past those wanted, and the admin's task waited for "a"'s backlog).
    #[test]
    fn tasks_without_a_tenant_are_reached_behind_any_backlog() {
        let conn = crate::schema::memory_writer();
        let at = Timestamp::from_millis;
        for i in 0..2_000 {
            let of_a = task(&format!("a{i}")).with_tenant(Some("a".into()), None);
            super::submit(&conn, &of_a, at(1)).unwrap();
        }
        let admin = super::submit(&conn, &task("admin"), at(2)).unwrap().task;
        // What the writer does at its batch's end.
        crate::moves::apply(&conn).unwrap();
        let gate = ClaimGate {
            tenants: Some(tc_model::tenant::TenantGate::default()),
            ..ClaimGate::default()
        };
        let got = claim(&conn, 2, at(3), Duration::from_secs(60), &gate)
            .unwrap()
            .tasks;
        let admins: Vec<TaskId> = got
            .iter()
            .filter(|t| t.tenant.is_none())
            .map(|t| t.id)
            .collect();
        assert_eq!(got.len(), 2);
        assert_eq!(admins, [admin.id]);
    }
}
