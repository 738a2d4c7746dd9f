//! A batch submit as one multi-row INSERT per chunk: the
//! batch path of `submit_many`, answering each item as
//! [`submit_prepared`] would.

use rusqlite::Connection;
use tc_model::callback::Callback;
use tc_model::store::StoreError;
use tc_model::{NewTask, State, TaskId, Timestamp};

use crate::moves::{self, At};
use crate::rows::{self, db, nanos};
use crate::write_ops::{Made, SubmitRow, known_task, new_id, seq_floor_above, submit_prepared};

/// The rows of one multi-row INSERT of [`submit_all`], largest first: a
/// batch is cut into chunks of these sizes, so a handful of statements
/// (each prepared once, cached) serve every batch size.
const CHUNKS: [usize; 4] = [64, 16, 4, 1];

/// The columns one row of [`submit_all`]'s INSERT binds, in order.
const SUBMIT_COLUMNS: usize = 24;

/// [`submit_rows_sql`] for each of [`CHUNKS`], made once.
static SUBMIT_ROWS_SQL: std::sync::LazyLock<[String; 4]> =
    std::sync::LazyLock::new(|| CHUNKS.map(submit_rows_sql));

/// The multi-row INSERT of `rows` new tasks (seq left to SQLite, as
/// `write_ops::SUBMIT_NEXT_ROWID`).
fn submit_rows_sql(rows: usize) -> String {
    let mut sql = String::from(
        "INSERT OR FAIL INTO tasks (seq, id, idempotency_key, state, url, body, max_attempts, \
                            timeout_ns, attempt, created_at, updated_at, next_run_at, \
                            schedule_at, schedule_delay_ms, destination, method, headers, \
                            trace_context, callback_url, callback_on, callback_of, tenant, \
                            topic, event_id, subscription, priority, flow_key) VALUES ",
    );
    for r in 0..rows {
        let p = |k: usize| r * SUBMIT_COLUMNS + k;
        if r > 0 {
            sql.push(',');
        }
        sql.push_str(&format!(
            "(NULL, ?{}, ?{}, ?{}, ?{}, ?{}, ?{}, ?{}, 0, ?{}, ?{}, ?{}, ?{}, ?{}, ?{}, ?{}, ?{}, \
             ?{}, ?{}, ?{}, ?{}, ?{}, ?{}, ?{}, ?{}, ?{}, ?{})",
            p(1),
            p(2),
            p(3),
            p(4),
            p(5),
            p(6),
            p(7),
            p(8),
            p(8),
            p(9),
            p(10),
            p(11),
            p(12),
            p(13),
            p(14),
            p(15),
            p(16),
            p(17),
            p(18),
            p(19),
            p(20),
            p(21),
            p(22),
            p(23),
            p(24)
        ));
    }
    sql.push_str(" ON CONFLICT (idempotency_key, tenant) DO NOTHING");
    sql
}

/// Submits every task of a batch (`rows[i]` is [`SubmitRow::of`]
/// `tasks[i]`), each answering for itself as [`submit_prepared`] would, in
/// one multi-row INSERT per chunk of [`CHUNKS`] instead of a statement per
/// task. A chunk whose rows all went in (new keys, the common
/// case) costs nothing more; otherwise each of its rows is looked up by the
/// id it was given, and a missing one answers as a taken key does. Tasks
/// under a tenant's `max_pending`, and a file whose seq floor deletes
/// raised, go one by one through [`submit_prepared`].
pub(crate) fn submit_all(
    conn: &Connection,
    tasks: &[NewTask],
    rows: &[SubmitRow],
    now: Timestamp,
) -> Result<Vec<Result<Made, StoreError>>, StoreError> {
    let limited = tasks.iter().any(|t| {
        t.pending_limit().is_some() && !tc_model::tenant::stored_tenant(t.tenant()).is_empty()
    });
    if limited || seq_floor_above(conn)? {
        let mut answers = Vec::with_capacity(tasks.len());
        for (task, row) in tasks.iter().zip(rows) {
            match submit_prepared(conn, row, task, now) {
                Err(e @ StoreError::Unavailable(_)) => return Err(e),
                answer => answers.push(answer),
            }
        }
        return Ok(answers);
    }
    let mut answers = Vec::with_capacity(tasks.len());
    let mut at = 0;
    while at < tasks.len() {
        let left = tasks.len() - at;
        let (shape, size) = CHUNKS
            .into_iter()
            .enumerate()
            .find(|&(_, c)| c <= left)
            .unwrap_or((CHUNKS.len() - 1, 1));
        let chunk = &tasks[at..at + size];
        let ids: Vec<TaskId> = chunk.iter().map(|_| new_id(now)).collect();
        let mut values: Vec<Box<dyn rusqlite::ToSql + '_>> =
            Vec::with_capacity(size * SUBMIT_COLUMNS);
        for ((new, row), id) in chunk.iter().zip(&rows[at..at + size]).zip(&ids) {
            push_row(&mut values, new, row, *id, now);
        }
        let inserted = conn
            .prepare_cached(&SUBMIT_ROWS_SQL[shape])
            .map_err(db)?
            .execute(rusqlite::params_from_iter(values.iter().map(|v| &**v)))
            .map_err(db)?;
        drop(values);
        for ((new, row), id) in chunk.iter().zip(&rows[at..at + size]).zip(ids) {
            if inserted == size || rows::exists(conn, &id)? {
                let due = At::pending(new.first_run().due_at(now).as_millis());
                moves::moved(&row.destination, None, Some(due));
                answers.push(Ok(Made::Created(id)));
                continue;
            }
            let tenant = tc_model::tenant::stored_tenant(new.tenant());
            answers.push(match known_task(conn, new, tenant) {
                Ok(Some(known)) => Ok(known),
                Ok(None) => Err(StoreError::Unavailable(
                    "the idempotency key conflicted, but no task has it".to_owned(),
                )),
                Err(e @ StoreError::Unavailable(_)) => return Err(e),
                Err(refused) => Err(refused),
            });
        }
        at += size;
    }
    Ok(answers)
}

/// Binds one new task's row of [`submit_rows_sql`], in its column order
/// ([`SUBMIT_COLUMNS`] values).
fn push_row<'a>(
    values: &mut Vec<Box<dyn rusqlite::ToSql + 'a>>,
    new: &'a NewTask,
    row: &'a SubmitRow,
    id: TaskId,
    now: Timestamp,
) {
    let asked = new.first_run();
    let (schedule_at, schedule_delay_ms) = asked.to_parts();
    values.push(Box::new(*id.as_bytes()));
    values.push(Box::new(new.idempotency_key()));
    values.push(Box::new(State::Pending.as_str()));
    values.push(Box::new(new.url()));
    values.push(Box::new(new.body()));
    values.push(Box::new(new.max_attempts()));
    values.push(Box::new(nanos(new.timeout())));
    values.push(Box::new(now.as_millis()));
    values.push(Box::new(asked.due_at(now).as_millis()));
    values.push(Box::new(schedule_at));
    values.push(Box::new(schedule_delay_ms));
    values.push(Box::new(row.destination.as_str()));
    values.push(Box::new(new.method().as_str()));
    values.push(Box::new(row.headers.as_deref()));
    values.push(Box::new(row.trace.as_deref()));
    values.push(Box::new(new.callback().map(Callback::url)));
    values.push(Box::new(row.callback_on.as_deref()));
    values.push(Box::new(new.callback_of().map(|id| *id.as_bytes())));
    values.push(Box::new(tc_model::tenant::stored_tenant(new.tenant())));
    let link = new.topic_link();
    values.push(Box::new(link.map(|l| l.topic.as_str())));
    values.push(Box::new(link.map(|l| l.event_id.as_str())));
    values.push(Box::new(link.map(|l| l.subscription.as_str())));
    values.push(Box::new(new.priority()));
    values.push(Box::new(tc_model::flow_key::stored_key(new.flow_key())));
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tc_model::Limits;

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

    /// A batch in multi-row chunks (64 + 4 + 1 + 1 rows here) answers each
    /// item as one submit after another would: new keys created, in order;
    /// a key repeated inside a chunk is the first's task; a stored key
    /// with the same work is that task; other work under a key of the
    /// batch is a conflict, and nothing of it is stored.
    #[test]
    fn a_batch_in_chunks_answers_each_item_as_single_submits_would() {
        let conn = crate::schema::memory_writer();
        let at = Timestamp::from_millis(5);
        let old = crate::write_ops::submit(&conn, &task("old"), at)
            .unwrap()
            .task;
        let mut batch: Vec<NewTask> = (0..70).map(|i| task(&format!("k{i}"))).collect();
        batch[10] = task("k3");
        batch[66] = task("old");
        batch[69] = NewTask::new(
            "http://127.0.0.1:9/".into(),
            b"[]".to_vec(),
            "k5".into(),
            3,
            Duration::from_secs(1),
            &Limits::default(),
        )
        .unwrap();
        let rows: Vec<SubmitRow> = batch.iter().map(SubmitRow::of).collect();
        let answers = submit_all(&conn, &batch, &rows, at).unwrap();
        assert_eq!(answers.len(), 70);
        let id_of = |key: &str| -> TaskId {
            parse_id(
                conn.query_row(
                    "SELECT id FROM tasks WHERE idempotency_key = ?1",
                    [key],
                    |row| row.get(0),
                )
                .unwrap(),
            )
            .unwrap()
        };
        let check = |i: usize, want: Result<(bool, TaskId), &str>| {
            let got = match &answers[i] {
                Ok(Made::Created(id)) => Ok((true, *id)),
                Ok(Made::Known(task)) => Ok((false, task.id)),
                Err(StoreError::IdempotencyConflict { .. }) => Err("conflict"),
                Err(e) => panic!("item {i}: {e}"),
            };
            assert_eq!(got, want, "item {i}");
        };
        for i in [0, 3, 9, 11, 63, 64, 65, 67, 68] {
            check(i, Ok((true, id_of(&format!("k{i}")))));
        }
        check(10, Ok((false, id_of("k3"))));
        check(66, Ok((false, old.id)));
        check(69, Err("conflict"));
        let (stored, in_order): (i64, bool) = conn
            .query_row(
                "SELECT count(*), min(seq) = 2 AND max(seq) = 68 FROM tasks \
                 WHERE idempotency_key LIKE 'k%'",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap();
        assert_eq!((stored, in_order), (67, true));
    }
}
