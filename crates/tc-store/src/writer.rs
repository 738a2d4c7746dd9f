//! The one writer: a thread that owns the write connection and commits
//! whatever commands have queued in one transaction (group commit).
//!
//! SQLite lets one connection write at a time, and a durable commit costs an
//! fsync whatever it holds, so many callers' writes share one commit. A
//! command that is refused (a conflict, a refused transition) is rolled
//! back alone, by its own savepoint or because it refuses before writing
//! ([`Undo`]), and the rest of the batch still commits. A caller hears back only after COMMIT returned; if COMMIT fails,
//! every command of the batch is told the store is unavailable.

use std::thread::JoinHandle;

use rusqlite::{Connection, TransactionBehavior};
use tc_model::store::StoreError;
use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot};

/// A write queued for the writer thread.
pub(crate) type Command = Box<dyn Job>;

/// A write and the caller waiting for its result.
pub(crate) trait Job: Send {
    /// Runs the write and says how it went.
    fn run(&mut self, conn: &Connection) -> Ran;
    /// How a failure of this write is undone.
    fn undo(&self) -> Undo;
    /// Tells the caller, once the batch's fate is known: the write's own
    /// result if the batch committed, otherwise `failed`.
    fn reply(self: Box<Self>, failed: Option<&StoreError>);
}

/// How a command's run went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ran {
    /// It succeeded: its writes stay.
    Done,
    /// It was refused by a rule (not found, a conflict, a refused
    /// transition): an answer for its caller, not trouble with the store.
    Refused,
    /// The store failed under it (`StoreError::Unavailable`: I/O, a full
    /// disk, a corrupt row).
    Broken,
}

/// How the writer undoes a command that fails, without failing its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Undo {
    /// The command runs in a savepoint of its own, rolled back if it fails:
    /// for commands of several writing statements.
    Savepoint,
    /// No savepoint: the command's only failures after its first write are
    /// SQLite's own (I/O, a full disk, a corrupt row), when the batch is
    /// lost anyway. If it fails after writing (SQLite's change counter
    /// moved) or the store failed under it ([`Ran::Broken`]: a statement
    /// without a statement journal may have stopped halfway without
    /// counting its changes), the whole batch is rolled back and every
    /// caller told the store is unavailable; if it is refused before
    /// writing, nothing is undone and the batch goes on. A profile of end-to-end load had a fifth of the
    /// writer thread in the savepoints' page copies and allocations.
    WholeBatch,
    /// The command sets the connection, not the data (a pragma such as
    /// `max_page_count`, which a rollback does not undo): it runs alone,
    /// outside the batch's transaction, before the batch. Inside it, a
    /// batchmate's failure would answer "unavailable" for a change that
    /// stands.
    Alone,
}

struct Op<T, F> {
    op: Option<F>,
    undo: Undo,
    result: Option<Result<T, StoreError>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
    /// The queue room this command's payload takes, given back when the
    /// command is dropped (after its reply), not when its caller goes away.
    _room: Option<OwnedSemaphorePermit>,
}

impl<T, F> Job for Op<T, F>
where
    T: Send,
    F: FnOnce(&Connection) -> Result<T, StoreError> + Send,
{
    fn run(&mut self, conn: &Connection) -> Ran {
        let Some(op) = self.op.take() else {
            return Ran::Broken;
        };
        let result = op(conn);
        let ran = match &result {
            Ok(_) => Ran::Done,
            Err(StoreError::Unavailable(_)) => Ran::Broken,
            Err(_) => Ran::Refused,
        };
        self.result = Some(result);
        ran
    }

    fn undo(&self) -> Undo {
        self.undo
    }

    fn reply(self: Box<Self>, failed: Option<&StoreError>) {
        let result = match (failed, self.result) {
            (None, Some(result)) => result,
            (Some(e), _) => Err(e.clone()),
            (None, None) => Err(StoreError::Unavailable("write was not run".to_owned())),
        };
        // The caller may have gone away; the write stands regardless.
        let _ = self.reply.send(result);
    }
}

/// A command running `op` whose result goes to `reply`, holding `room` in
/// the queue's byte budget until it is done; `undo` says how its failure
/// is rolled back.
pub(crate) fn command<T, F>(
    op: F,
    undo: Undo,
    reply: oneshot::Sender<Result<T, StoreError>>,
    room: Option<OwnedSemaphorePermit>,
) -> Command
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
{
    Box::new(Op {
        op: Some(op),
        undo,
        result: None,
        reply,
        _room: room,
    })
}

/// Starts the writer thread. It runs until every sender is dropped and the
/// queue is drained, so dropping the sender and joining the handle flushes.
/// `checkpointer` is the thread `conn`'s WAL hook wakes: it ends once `conn`
/// is closed, and the writer joins it before it ends itself, so that the
/// file is closed when the handle is joined.
pub(crate) fn spawn(
    conn: Connection,
    checkpointer: Option<JoinHandle<()>>,
    commands: mpsc::Receiver<Command>,
    max_batch: usize,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("tc-store-writer".to_owned())
        .spawn(move || {
            run(conn, commands, max_batch.max(1));
            if let Some(thread) = checkpointer
                && thread.join().is_err()
            {
                tracing::error!("store_checkpointer_panicked");
            }
        })
}

fn run(mut conn: Connection, mut commands: mpsc::Receiver<Command>, max_batch: usize) {
    let mut batch: Vec<Command> = Vec::with_capacity(max_batch);
    while let Some(first) = commands.blocking_recv() {
        batch.push(first);
        while batch.len() < max_batch {
            match commands.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        commit_batch(&mut conn, &mut batch);
    }
    tracing::debug!("store_writer_stopped");
}

/// Runs and commits one batch, then replies to every caller in it.
pub(crate) fn commit_batch(conn: &mut Connection, batch: &mut Vec<Command>) {
    if batch.iter().any(|job| job.undo() == Undo::Alone) {
        run_alone(conn, batch);
    }
    let outcome = run_batch(conn, batch);
    let failed = outcome.err().map(|e| {
        tracing::warn!(error = %e, commands = batch.len(), "store_batch_failed");
        StoreError::Unavailable(e.to_string())
    });
    for job in batch.drain(..) {
        job.reply(failed.as_ref());
    }
}

/// Runs and answers the batch's [`Undo::Alone`] commands, each outside any
/// transaction, and leaves the rest in `batch` in their order.
fn run_alone(conn: &Connection, batch: &mut Vec<Command>) {
    let (mut alone, rest): (Vec<Command>, Vec<Command>) =
        batch.drain(..).partition(|job| job.undo() == Undo::Alone);
    batch.extend(rest);
    for mut job in alone.drain(..) {
        // Its answer is its own result: there is no transaction to fail.
        job.run(conn);
        job.reply(None);
    }
}

fn run_batch(conn: &mut Connection, batch: &mut [Command]) -> rusqlite::Result<()> {
    // Moves left by a batch that failed were rolled back with it.
    crate::moves::discard();
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    for job in batch.iter_mut() {
        match job.undo() {
            Undo::WholeBatch => {
                let before = tx.total_changes();
                let ran = job.run(&tx);
                if ran == Ran::Broken || (ran == Ran::Refused && tx.total_changes() != before) {
                    return Err(rusqlite::Error::SqliteFailure(
                        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
                        Some("a command failed after writing; its batch is rolled back".to_owned()),
                    ));
                }
            }
            // `commit_batch` takes `Alone` commands out before the batch
            // runs; matched here only so the match needs no panic arm.
            Undo::Savepoint | Undo::Alone => {
                // Cached statements rather than rusqlite's Savepoint, which
                // builds and parses the SQL text anew for every command.
                tx.prepare_cached("SAVEPOINT command")?.execute([])?;
                let moves = crate::moves::mark();
                if job.run(&tx) != Ran::Done {
                    tx.prepare_cached("ROLLBACK TO command")?.execute([])?;
                    crate::moves::undo_to(moves);
                }
                tx.prepare_cached("RELEASE command")?.execute([])?;
            }
        }
        // Some errors (disk full, I/O) make SQLite roll back the whole
        // transaction on its own; then nothing before this point stands.
        if tx.is_autocommit() {
            return Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
                Some("SQLite rolled back the batch transaction".to_owned()),
            ));
        }
    }
    // The batch's counts, once (schema step 27).
    crate::moves::apply(&tx)?;
    tx.commit()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tc_model::store::Submitted;
    use tc_model::{Limits, NewTask, Timestamp};

    use super::*;
    use crate::write_ops;

    fn task(key: &str, body: &[u8]) -> NewTask {
        NewTask::new(
            "http://127.0.0.1:9/".into(),
            body.to_vec(),
            key.into(),
            3,
            Duration::from_secs(1),
            &Limits::default(),
        )
        .unwrap()
    }

    fn submit(
        key: &'static str,
        body: &'static [u8],
    ) -> (Command, oneshot::Receiver<Result<Submitted, StoreError>>) {
        let (reply, answer) = oneshot::channel();
        let op = move |conn: &Connection| {
            write_ops::submit(conn, &task(key, body), Timestamp::default())
        };
        (command(op, Undo::WholeBatch, reply, None), answer)
    }

    fn count(conn: &Connection) -> i64 {
        conn.query_row("SELECT count(*) FROM tasks", [], |row| row.get(0))
            .unwrap()
    }

    #[test]
    fn a_failing_command_fails_alone_in_its_batch() {
        let mut conn = crate::schema::memory_writer();
        let (first, first_answer) = submit("a", b"1");
        let (clash, clash_answer) = submit("a", b"2");
        let (last, last_answer) = submit("b", b"1");
        let mut batch = vec![first, clash, last];
        commit_batch(&mut conn, &mut batch);
        assert!(batch.is_empty());
        assert!(first_answer.blocking_recv().unwrap().unwrap().created);
        assert_eq!(
            clash_answer.blocking_recv().unwrap(),
            Err(StoreError::IdempotencyConflict {
                fields: vec!["json"]
            })
        );
        assert!(last_answer.blocking_recv().unwrap().unwrap().created);
        assert_eq!(count(&conn), 2);
    }

    #[test]
    fn a_command_holds_its_queue_room_until_it_is_done() {
        let room = Arc::new(tokio::sync::Semaphore::new(10));
        let permit = Arc::clone(&room).try_acquire_many_owned(10).unwrap();
        let (reply, answer) = oneshot::channel::<Result<(), StoreError>>();
        // The caller went away: the room stays taken while the command waits.
        drop(answer);
        let job = command(
            |_: &Connection| Ok(()),
            Undo::Savepoint,
            reply,
            Some(permit),
        );
        assert_eq!(room.available_permits(), 0);
        let mut conn = crate::schema::memory_writer();
        commit_batch(&mut conn, &mut vec![job]);
        assert_eq!(room.available_permits(), 10);
    }

    #[test]
    fn a_failed_commit_fails_every_command_and_writes_nothing() {
        let mut conn = crate::schema::memory_writer();
        let (good, good_answer) = submit("a", b"1");
        // A deferred foreign-key violation passes its statement and fails
        // only at COMMIT: the one failure a savepoint cannot contain.
        let (reply, orphan_answer) = oneshot::channel();
        let orphan = command(
            |conn: &Connection| {
                conn.execute_batch(
                    "PRAGMA defer_foreign_keys = ON;
                     INSERT INTO attempts (task_id, n, started_at) VALUES (zeroblob(16), 1, 0);",
                )
                .map_err(crate::rows::db)
            },
            Undo::Savepoint,
            reply,
            None,
        );
        let mut batch = vec![good, orphan];
        commit_batch(&mut conn, &mut batch);
        for answer in [
            good_answer.blocking_recv().unwrap().map(|_| ()),
            orphan_answer.blocking_recv().unwrap(),
        ] {
            match answer {
                Err(StoreError::Unavailable(message)) => {
                    assert!(message.contains("FOREIGN KEY"), "{message}")
                }
                other => panic!("expected unavailable, got {other:?}"),
            }
        }
        assert_eq!(count(&conn), 0);
        // The writer's connection is usable for the next batch.
        let (next, next_answer) = submit("a", b"1");
        commit_batch(&mut conn, &mut vec![next]);
        assert!(next_answer.blocking_recv().unwrap().unwrap().created);
    }

    /// A command in [`Undo::WholeBatch`] mode that inserts `key`, then fails
    /// if `fail_after_write`, or fails before writing anything otherwise.
    fn whole_batch(
        key: &'static str,
        fail_after_write: bool,
    ) -> (Command, oneshot::Receiver<Result<(), StoreError>>) {
        let (reply, answer) = oneshot::channel();
        let op = move |conn: &Connection| {
            if !fail_after_write {
                return Err(StoreError::NotFound);
            }
            write_ops::submit(conn, &task(key, b"1"), Timestamp::default())?;
            Err(StoreError::NotFound)
        };
        (command(op, Undo::WholeBatch, reply, None), answer)
    }

    #[test]
    fn a_whole_batch_command_refused_before_writing_fails_alone() {
        let mut conn = crate::schema::memory_writer();
        let (first, first_answer) = submit("a", b"1");
        let (failing, failing_answer) = whole_batch("x", false);
        let (last, last_answer) = submit("b", b"1");
        commit_batch(&mut conn, &mut vec![first, failing, last]);
        assert!(first_answer.blocking_recv().unwrap().unwrap().created);
        assert_eq!(
            failing_answer.blocking_recv().unwrap(),
            Err(StoreError::NotFound)
        );
        assert!(last_answer.blocking_recv().unwrap().unwrap().created);
        assert_eq!(count(&conn), 2);
    }

    #[test]
    fn a_whole_batch_command_failing_after_writing_rolls_the_batch_back() {
        let mut conn = crate::schema::memory_writer();
        let (first, first_answer) = submit("a", b"1");
        let (failing, failing_answer) = whole_batch("x", true);
        let (last, last_answer) = submit("b", b"1");
        commit_batch(&mut conn, &mut vec![first, failing, last]);
        for answer in [
            first_answer.blocking_recv().unwrap().map(|_| ()),
            failing_answer.blocking_recv().unwrap(),
            last_answer.blocking_recv().unwrap().map(|_| ()),
        ] {
            match answer {
                Err(StoreError::Unavailable(message)) => {
                    assert!(message.contains("rolled back"), "{message}")
                }
                other => panic!("expected unavailable, got {other:?}"),
            }
        }
        // Not the half-written command's row, nor the others'.
        assert_eq!(count(&conn), 0);
        let (next, next_answer) = submit("a", b"1");
        commit_batch(&mut conn, &mut vec![next]);
        assert!(next_answer.blocking_recv().unwrap().unwrap().created);
    }

    #[test]
    fn a_whole_batch_command_the_store_failed_under_rolls_the_batch_back() {
        // No change counted, yet a statement without a statement journal
        // may have stopped halfway: the batch is not trusted.
        let mut conn = crate::schema::memory_writer();
        let (first, first_answer) = submit("a", b"1");
        let (reply, broken_answer) = oneshot::channel::<Result<(), StoreError>>();
        let broken = command(
            |_: &Connection| Err(StoreError::Unavailable("disk I/O error".into())),
            Undo::WholeBatch,
            reply,
            None,
        );
        commit_batch(&mut conn, &mut vec![first, broken]);
        check_unavailable([
            first_answer.blocking_recv().unwrap().map(|_| ()),
            broken_answer.blocking_recv().unwrap(),
        ]);
        assert_eq!(count(&conn), 0);
    }

    /// Checks that every answer says the store is unavailable.
    fn check_unavailable(answers: impl IntoIterator<Item = Result<(), StoreError>>) {
        for answer in answers {
            assert!(
                matches!(answer, Err(StoreError::Unavailable(_))),
                "{answer:?}"
            );
        }
    }

    /// A command that sets `max_page_count` to `pages`, run as `undo` says.
    fn cap_pages(pages: i64, undo: Undo) -> (Command, oneshot::Receiver<Result<i64, StoreError>>) {
        let (reply, answer) = oneshot::channel();
        let op = move |conn: &Connection| {
            conn.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |row| {
                row.get(0)
            })
            .map_err(crate::rows::db)
        };
        (command(op, undo, reply, None), answer)
    }

    #[test]
    fn a_connection_setting_is_answered_for_itself_beside_a_batch_that_breaks() {
        let mut conn = crate::schema::memory_writer();
        let pages: i64 = conn
            .query_row("PRAGMA page_count", [], |row| row.get(0))
            .unwrap();
        let (first, first_answer) = submit("a", b"1");
        let (failing, failing_answer) = whole_batch("x", true);
        let (cap, cap_answer) = cap_pages(pages + 100, Undo::Alone);
        commit_batch(&mut conn, &mut vec![first, failing, cap]);
        // The batch is lost as before...
        check_unavailable([
            first_answer.blocking_recv().unwrap().map(|_| ()),
            failing_answer.blocking_recv().unwrap(),
        ]);
        assert_eq!(count(&conn), 0);
        // ...but the setting, which no rollback undoes, says it stands.
        assert_eq!(cap_answer.blocking_recv().unwrap(), Ok(pages + 100));
        let now: i64 = conn
            .query_row("PRAGMA max_page_count", [], |row| row.get(0))
            .unwrap();
        assert_eq!(now, pages + 100);
    }

    /// The counts of a batch: pending by state, and the destinations' rows.
    fn counts(conn: &Connection) -> (u64, Vec<(String, i64, Option<i64>)>) {
        let pending = crate::read_ops::count_by_state(conn)
            .unwrap()
            .get(tc_model::State::Pending);
        let rows = conn
            .prepare("SELECT destination, pending, next_due FROM destination_tasks")
            .unwrap()
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        (pending, rows)
    }

    #[test]
    fn a_command_undone_by_its_savepoint_leaves_no_count() {
        let mut conn = crate::schema::memory_writer();
        let (first, first_answer) = submit("a", b"1");
        let (reply, undone_answer) = oneshot::channel::<Result<(), StoreError>>();
        let undone = command(
            |conn: &Connection| {
                let late = Timestamp::from_millis(5);
                write_ops::submit(conn, &task("x", b"1"), late)?;
                write_ops::submit(conn, &task("y", b"1"), late)?;
                Err(StoreError::NotFound)
            },
            Undo::Savepoint,
            reply,
            None,
        );
        commit_batch(&mut conn, &mut vec![first, undone]);
        assert!(first_answer.blocking_recv().unwrap().unwrap().created);
        assert_eq!(
            undone_answer.blocking_recv().unwrap(),
            Err(StoreError::NotFound)
        );
        assert_eq!(count(&conn), 1);
        let due = Timestamp::default().as_millis();
        assert_eq!(
            counts(&conn),
            (1, vec![("127.0.0.1:9".into(), 1, Some(due))])
        );
    }

    #[test]
    fn a_batch_rolled_back_leaves_no_count_for_the_next() {
        let mut conn = crate::schema::memory_writer();
        let (first, _first_answer) = submit("a", b"1");
        let (failing, _failing_answer) = whole_batch("x", true);
        commit_batch(&mut conn, &mut vec![first, failing]);
        let (next, next_answer) = submit("b", b"1");
        commit_batch(&mut conn, &mut vec![next]);
        assert!(next_answer.blocking_recv().unwrap().unwrap().created);
        let due = Timestamp::default().as_millis();
        assert_eq!(
            counts(&conn),
            (1, vec![("127.0.0.1:9".into(), 1, Some(due))])
        );
    }

    /// A claim's `resume_after` knows the due times of the moves before
    /// it in its batch (a retry's) and of the tasks it left behind in the
    /// destinations it took from: the claim loop sleeps until then.
    #[test]
    fn a_claim_sees_the_due_times_its_batch_moved() {
        use tc_model::claim::Claim;
        use tc_model::completion::CompletionEffect;
        use tc_model::destination::ClaimGate;
        use tc_model::store::{Completion, Guarded};

        let mut conn = crate::schema::memory_writer();
        let at = Timestamp::from_millis;
        let (first, _) = submit("a", b"1");
        commit_batch(&mut conn, &mut vec![first]);
        let claim = |n: usize, now: i64| {
            let (reply, answer) = oneshot::channel::<Result<Claim, StoreError>>();
            let op = move |conn: &Connection| {
                let lease = Duration::from_secs(60);
                write_ops::claim(conn, n, at(now), lease, &ClaimGate::default())
            };
            (command(op, Undo::WholeBatch, reply, None), answer)
        };
        let (took, took_answer) = claim(1, 10);
        commit_batch(&mut conn, &mut vec![took]);
        let running = took_answer.blocking_recv().unwrap().unwrap().tasks;
        assert_eq!(running.len(), 1);
        // A retry due at 500, then a claim at 20, in one batch.
        let (reply, retried) = oneshot::channel::<Result<Guarded, StoreError>>();
        let id = running[0].id;
        let retry = command(
            move |conn: &Connection| {
                let effect = CompletionEffect::of(
                    Completion::Retry {
                        next_run_at: at(500),
                        reason: "http_503".into(),
                        http_status: Some(503),
                    },
                    at(20),
                );
                write_ops::complete(conn, &id, 1, &effect, 0)
            },
            Undo::WholeBatch,
            reply,
            None,
        );
        let (after, after_answer) = claim(4, 20);
        commit_batch(&mut conn, &mut vec![retry, after]);
        assert!(matches!(
            retried.blocking_recv().unwrap(),
            Ok(Guarded::Applied(_))
        ));
        let answer = after_answer.blocking_recv().unwrap().unwrap();
        assert_eq!(answer.tasks.len(), 0);
        assert_eq!(answer.resume_after, Some(at(500)), "the retry's due time");
        // Two tasks due at 30 and 900: a claim at 40 takes the first and
        // resumes at the second.
        for (key, due) in [("b", 30), ("c", 900)] {
            let (reply, _answer) = oneshot::channel();
            let op = move |conn: &Connection| write_ops::submit(conn, &task(key, b"1"), at(due));
            commit_batch(
                &mut conn,
                &mut vec![command(op, Undo::WholeBatch, reply, None)],
            );
        }
        let (took, took_answer) = claim(1, 40);
        commit_batch(&mut conn, &mut vec![took]);
        let answer = took_answer.blocking_recv().unwrap().unwrap();
        assert_eq!(answer.tasks.len(), 1);
        assert_eq!(
            answer.resume_after,
            Some(at(500)),
            "the earliest not yet due"
        );
    }

    #[test]
    fn a_caller_that_went_away_does_not_stop_the_write() {
        let mut conn = crate::schema::memory_writer();
        let (cmd, answer) = submit("a", b"1");
        drop(answer);
        commit_batch(&mut conn, &mut vec![cmd]);
        assert_eq!(count(&conn), 1);
    }
}
