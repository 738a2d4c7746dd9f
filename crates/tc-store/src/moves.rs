//! The counts the writer keeps itself (schema step 27): every write that
//! inserts, deletes or moves a task between states, or changes a pending
//! task's due time, reports the move here ([`moved`]); the writer applies
//! the batch's moves once, before its COMMIT ([`apply`]): one UPDATE per
//! touched row of `destination_tasks` (pending, running, the earliest due
//! time, the ready flag) and of `state_counts` (the finished states),
//! where AFTER-row triggers wrote them for every task before.
//!
//! The moves wait in a list of the writer thread's own; a command undone by
//! its savepoint drops its share ([`mark`], [`undo_to`]), a batch that
//! fails drops them all ([`discard`]). Until [`apply`], the counts lag the
//! tasks by the batch's own moves; the one command that reads them on the
//! writer, the claim, applies what is pending before its walk and again
//! before it reads its `resume_after` (it runs without a savepoint, so what
//! it applies stands or falls with the whole batch).
//!
//! The rule of what a move does to the counts is [`Tally::add`], here once.

use std::cell::RefCell;
use std::collections::BTreeMap;

use rusqlite::{Connection, params};
use tc_model::State;

/// Where a task is on one side of a move: its state and, for a pending
/// task, its due time (`None` when the writer does not know it: the move
/// is then taken as leaving the destination's earliest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct At {
    pub(crate) state: State,
    pub(crate) due: Option<i64>,
}

impl At {
    /// A task in `state` (not pending, or pending with an unknown due time).
    pub(crate) fn state(state: State) -> At {
        At { state, due: None }
    }

    /// A pending task due at `due` (ms).
    pub(crate) fn pending(due: i64) -> At {
        At {
            state: State::Pending,
            due: Some(due),
        }
    }
}

/// One task's move: `from` `None` for an insert, `to` `None` for a delete.
#[derive(Debug, Clone)]
struct Move {
    destination: String,
    from: Option<At>,
    to: Option<At>,
}

thread_local! {
    /// The moves of the batch the writer thread is running, not yet applied.
    static MOVES: RefCell<Vec<Move>> = const { RefCell::new(Vec::new()) };
}

/// Reports that a task of `destination` moved from `from` to `to`. A move
/// to the same state at the same due time changes nothing and is dropped.
pub(crate) fn moved(destination: &str, from: Option<At>, to: Option<At>) {
    if from == to {
        return;
    }
    MOVES.with_borrow_mut(|moves| {
        moves.push(Move {
            destination: destination.to_owned(),
            from,
            to,
        })
    });
}

/// Where the list stands: what [`undo_to`] goes back to.
pub(crate) fn mark() -> usize {
    MOVES.with_borrow(Vec::len)
}

/// Drops the moves reported after `mark` (their command was undone).
pub(crate) fn undo_to(mark: usize) {
    MOVES.with_borrow_mut(|moves| moves.truncate(mark));
}

/// Drops every move not yet applied (the batch was rolled back).
pub(crate) fn discard() {
    MOVES.with_borrow_mut(Vec::clear);
}

/// What a batch's moves do to one destination's row.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct DestinationDelta {
    pending: i64,
    running: i64,
    /// A task entered pending or running: the row may have to be made.
    entered: bool,
    /// A task left pending or running: the row may have to go.
    left: bool,
    /// The earliest due time of the tasks that became pending.
    earliest_in: Option<i64>,
    /// The earliest due time of the tasks that left pending (`i64::MIN`
    /// for one whose due time was not known).
    earliest_out: Option<i64>,
}

/// A batch's moves summed: per destination, and per finished state.
#[derive(Debug, Default, PartialEq, Eq)]
struct Tally {
    destinations: BTreeMap<String, DestinationDelta>,
    finished: BTreeMap<&'static str, i64>,
}

fn earlier(a: Option<i64>, b: i64) -> Option<i64> {
    Some(a.map_or(b, |a| a.min(b)))
}

impl Tally {
    /// The rule: a pending or running task counts in its destination's row
    /// (pending, running, and a pending task's due time in the earliest),
    /// a finished one in its state's row of `state_counts`.
    fn add(&mut self, m: &Move) {
        for (at, sign) in [(m.from, -1), (m.to, 1)] {
            let Some(at) = at else { continue };
            if at.state.is_terminal() {
                *self.finished.entry(at.state.as_str()).or_default() += sign;
                continue;
            }
            let d = self.destinations.entry(m.destination.clone()).or_default();
            match at.state {
                State::Pending => d.pending += sign,
                _ => d.running += sign,
            }
            if sign > 0 {
                d.entered = true;
            } else {
                d.left = true;
            }
            if at.state == State::Pending {
                if sign > 0 {
                    match at.due {
                        Some(due) => d.earliest_in = earlier(d.earliest_in, due),
                        // Unknown: the earliest is read again from the tasks.
                        None => d.earliest_out = earlier(d.earliest_out, i64::MIN),
                    }
                } else {
                    d.earliest_out = earlier(d.earliest_out, at.due.unwrap_or(i64::MIN));
                }
            }
        }
    }
}

/// Makes a destination's row if it has none (defaults: nothing counted).
const MAKE_ROW: &str =
    "INSERT INTO destination_tasks (destination) VALUES (?1) ON CONFLICT DO NOTHING";

/// Adds the counts, and moves the earliest due time: read again from the
/// tasks (one seek in `tasks_due_by_destination`) when a task that left
/// pending may have been the earliest (`?4` at or before it), which also
/// takes the destination out of the ready set (the next claim puts it back
/// if its time came); else the earlier of it and the new tasks' (`?5`).
/// The subquery names the destination through a CAST: with `?1` itself
/// there, SQLite marks the statement to be prepared again at every bind
/// (150k instructions a batch under callgrind; the test
/// `the_counts_statement_is_prepared_once` holds it).
pub(crate) const ADD_COUNTS: &str = "UPDATE OR FAIL destination_tasks \
     SET pending = pending + ?2, running = running + ?3, \
         ready = CASE WHEN ?4 IS NOT NULL AND (next_due IS NULL OR ?4 <= next_due) THEN 0 \
                      ELSE ready END, \
         next_due = CASE \
             WHEN ?4 IS NOT NULL AND (next_due IS NULL OR ?4 <= next_due) THEN \
                 (SELECT next_run_at FROM tasks INDEXED BY tasks_due_by_destination \
                  WHERE state = 'pending' AND destination = CAST(?1 AS TEXT) \
                  ORDER BY next_run_at LIMIT 1) \
             WHEN ?5 IS NULL THEN next_due \
             WHEN next_due IS NULL OR ?5 < next_due THEN ?5 \
             ELSE next_due END \
     WHERE destination = ?1";

/// A destination's row goes when it counts nothing.
const DROP_EMPTY: &str =
    "DELETE FROM destination_tasks WHERE destination = ?1 AND pending = 0 AND running = 0";

const ADD_FINISHED: &str = "UPDATE OR FAIL state_counts SET n = n + ?2 WHERE state = ?1";

/// Writes the moves reported since the last apply into the counts, and
/// empties the list. The writer runs it before each batch's COMMIT, a claim
/// before it reads the counts; a tool that calls the write operations
/// directly runs it after them. Never inside a savepoint that may roll back.
pub(crate) fn apply(conn: &Connection) -> rusqlite::Result<()> {
    let moves = MOVES.with_borrow_mut(std::mem::take);
    if moves.is_empty() {
        return Ok(());
    }
    let mut tally = Tally::default();
    for m in &moves {
        tally.add(m);
    }
    // Give the list's room back for the next batch.
    MOVES.with_borrow_mut(|kept| {
        if kept.capacity() < moves.capacity() {
            let mut moves = moves;
            moves.clear();
            *kept = moves;
        }
    });
    for (destination, d) in &tally.destinations {
        if d.entered {
            make_row(conn, destination)?;
        }
        let moves_due = d.earliest_in.is_some() || d.earliest_out.is_some();
        if d.pending != 0 || d.running != 0 || moves_due {
            add_counts(conn, destination, d)?;
        }
        if d.left {
            drop_empty(conn, destination)?;
        }
    }
    for (state, n) in &tally.finished {
        if *n != 0 {
            conn.prepare_cached(ADD_FINISHED)?
                .execute(params![state, n])?;
        }
    }
    Ok(())
}

#[inline(never)]
fn make_row(conn: &Connection, destination: &str) -> rusqlite::Result<usize> {
    conn.prepare_cached(MAKE_ROW)?.execute([destination])
}

#[inline(never)]
fn add_counts(
    conn: &Connection,
    destination: &str,
    d: &DestinationDelta,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(ADD_COUNTS)?.execute(params![
        destination,
        d.pending,
        d.running,
        d.earliest_out,
        d.earliest_in
    ])
}

#[inline(never)]
fn drop_empty(conn: &Connection, destination: &str) -> rusqlite::Result<usize> {
    conn.prepare_cached(DROP_EMPTY)?.execute([destination])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(moves: &[(&str, Option<At>, Option<At>)]) -> Tally {
        let mut tally = Tally::default();
        for (destination, from, to) in moves {
            tally.add(&Move {
                destination: (*destination).to_owned(),
                from: *from,
                to: *to,
            });
        }
        tally
    }

    #[test]
    fn a_move_counts_where_its_task_is_on_each_side() {
        let running = Some(At::state(State::Running));
        let success = Some(At::state(State::Success));
        let tally = sum(&[
            ("a", None, Some(At::pending(10))),
            ("a", None, Some(At::pending(5))),
            ("a", Some(At::pending(10)), running),
            ("a", running, success),
            ("b", Some(At::state(State::Failed)), Some(At::pending(7))),
            ("b", success, None),
        ]);
        let a = tally.destinations["a"];
        assert_eq!(
            (a.pending, a.running, a.entered, a.left),
            (1, 0, true, true)
        );
        assert_eq!((a.earliest_in, a.earliest_out), (Some(5), Some(10)));
        let b = tally.destinations["b"];
        assert_eq!((b.pending, b.earliest_in, b.left), (1, Some(7), false));
        let finished: Vec<(&str, i64)> = tally.finished.into_iter().collect();
        assert_eq!(finished, [("failed", -1), ("success", 0)]);
    }

    #[test]
    fn the_counts_statement_is_prepared_once() {
        let conn = crate::schema::memory_writer();
        conn.execute(MAKE_ROW, ["a"]).unwrap();
        for (out, into) in [(None, Some(5)), (Some(i64::MIN), None), (Some(3), Some(4))] {
            let mut stmt = conn.prepare_cached(ADD_COUNTS).unwrap();
            stmt.execute(params!["a", 1, 0, out, into]).unwrap();
            let again = stmt.get_status(rusqlite::StatementStatus::RePrepare);
            assert_eq!(again, 0, "prepared again after {out:?}, {into:?}");
        }
    }

    /// A destination leaves the ready set when a task that may have been
    /// its earliest leaves pending (its earliest due time moves later, to
    /// come back at the next claim's walk), and keeps its place when a
    /// later task leaves or an earlier one comes.
    #[test]
    fn the_ready_flag_follows_the_earliest_due_time() {
        use std::time::Duration;
        use tc_model::{Limits, NewTask, Timestamp};

        let conn = crate::schema::memory_writer();
        let at = Timestamp::from_millis;
        let submit = |key: &str, due: i64| {
            let new = NewTask::new(
                "http://a:80/".into(),
                b"{}".to_vec(),
                key.into(),
                1,
                Duration::from_secs(1),
                &Limits::default(),
            )
            .unwrap();
            crate::write_ops::submit(&conn, &new, at(due)).unwrap().task
        };
        let row = || -> (i64, Option<i64>, i64) {
            apply(&conn).unwrap();
            conn.query_row(
                "SELECT pending, next_due, ready FROM destination_tasks WHERE destination = 'a:80'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap()
        };
        let first = submit("first", 10);
        let later = submit("later", 20);
        assert_eq!(row(), (2, Some(10), 0));
        crate::destinations::walk_due(&conn, at(50), None, |_| true).unwrap();
        assert_eq!(row(), (2, Some(10), 1));
        let scope = tc_model::tenant::Scope::Admin;
        crate::write_ops::cancel(&conn, &later.id, &scope, at(51), 0).unwrap();
        assert_eq!(row(), (1, Some(10), 1), "a later task left");
        submit("earlier", 5);
        assert_eq!(row(), (2, Some(5), 1), "an earlier task came");
        crate::write_ops::cancel(&conn, &first.id, &scope, at(52), 0).unwrap();
        assert_eq!(row(), (1, Some(5), 1), "a later task left");
        let gate = tc_model::destination::ClaimGate::default();
        let claimed = crate::write_ops::claim(&conn, 1, at(53), Duration::from_secs(9), &gate);
        assert_eq!(claimed.unwrap().tasks.len(), 1);
        apply(&conn).unwrap();
        let gone: i64 = conn
            .query_row(
                "SELECT count(*) FROM destination_tasks WHERE pending = 0 AND running = 0",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(gone, 0, "an empty row is dropped");
        let left: (i64, i64, Option<i64>, i64) = conn
            .query_row(
                "SELECT pending, running, next_due, ready FROM destination_tasks",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
        assert_eq!(
            left,
            (0, 1, None, 0),
            "the earliest left: out of the ready set"
        );
    }

    #[test]
    fn a_pending_task_of_unknown_due_time_makes_the_earliest_read_again() {
        let running = Some(At::state(State::Running));
        let tally = sum(&[("a", Some(At::state(State::Pending)), running)]);
        assert_eq!(tally.destinations["a"].earliest_out, Some(i64::MIN));
    }
}
