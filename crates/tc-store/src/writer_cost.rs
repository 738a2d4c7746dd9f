//! The writer thread's work per task, measured alone and repeatably: N
//! tasks submitted, claimed in rounds and completed, through the very
//! commands and batch loop ([`crate::writer::commit_batch`]) the store's
//! writer thread runs, but on the caller's thread and with fixed batches,
//! so that an instruction counter (`valgrind --tool=callgrind`) sees the
//! same work on every run. See docs/performance.md, "the writer
//! thread's CPU per task".

use std::time::Duration;

use rusqlite::Connection;
use tc_model::claim::Claim;
use tc_model::completion::CompletionEffect;
use tc_model::destination::ClaimGate;
use tc_model::store::{Completion, Guarded, StoreError};
use tc_model::{Limits, NewTask, Timestamp};
use tokio::sync::oneshot;

use crate::write_ops::{self, Made};
use crate::writer::{self, Command, Undo};

/// Commands per batch: the worker's default concurrency, and what the
/// writer groups under load.
pub const BATCH: usize = 64;

/// The callback budget the store uses by default (no task here asks for a
/// callback; the figure only travels with the command).
const CALLBACK_BYTES: usize = tc_model::callback::DEFAULT_RESULT_BYTES;

/// Task `i`: the bench's payload shape (`{"n":i}`, a unique key).
fn task(i: u64) -> Result<NewTask, String> {
    NewTask::new(
        "http://127.0.0.1:9/hook".to_owned(),
        format!(r#"{{"n":{i}}}"#).into_bytes(),
        format!("cost-{i}"),
        3,
        Duration::from_secs(5),
        &Limits::default(),
    )
    .map_err(|e| format!("task {i}: {e}"))
}

/// Runs one batch as the writer thread does. Never inlined: it is the
/// function an instruction counter is pointed at (`--toggle-collect`).
#[inline(never)]
pub(crate) fn writer_batch(conn: &mut Connection, batch: &mut Vec<Command>) {
    writer::commit_batch(conn, batch);
}

fn answer<T>(rx: oneshot::Receiver<Result<T, StoreError>>) -> Result<T, String> {
    rx.blocking_recv()
        .map_err(|_| "no reply".to_owned())?
        .map_err(|e| e.to_string())
}

/// Submits `n` tasks (batches of [`BATCH`]), then claims them [`BATCH`] at
/// a time, each claim a batch of its own followed by a batch of its
/// completions (success, the bench's answer). Time stands still at
/// `start` + 1 ms per round so that every task is due.
pub fn run(conn: &mut Connection, n: u64, start: Timestamp) -> Result<(), String> {
    // The ids' random bits: the same on every run.
    fastrand::seed(26);
    let mut i = 0;
    while i < n {
        let end = (i + BATCH as u64).min(n);
        let mut batch = Vec::with_capacity(BATCH);
        let mut replies = Vec::with_capacity(BATCH);
        for k in i..end {
            let new = task(k)?;
            // As SqliteStore::submit: the derived columns off the writer.
            let row = write_ops::SubmitRow::of(&new);
            let (reply, rx) = oneshot::channel::<Result<(Made, NewTask), StoreError>>();
            // As SqliteStore::submit: the task goes back with the answer.
            let op = move |conn: &Connection| {
                write_ops::submit_prepared(conn, &row, &new, start).map(|made| (made, new))
            };
            batch.push(writer::command(op, Undo::WholeBatch, reply, None));
            replies.push(rx);
        }
        writer_batch(conn, &mut batch);
        for rx in replies {
            let (made, new) = answer(rx)?;
            made.into_submitted(&new, start);
        }
        i = end;
    }
    let mut done = 0;
    let mut now = start;
    while done < n {
        now = now.saturating_add(Duration::from_millis(1));
        let (reply, rx) = oneshot::channel::<Result<Claim, StoreError>>();
        let gate = ClaimGate::default();
        let op = move |conn: &Connection| {
            write_ops::claim(conn, BATCH, now, Duration::from_secs(60), &gate)
        };
        writer_batch(
            conn,
            &mut vec![writer::command(op, Undo::WholeBatch, reply, None)],
        );
        let claimed = answer(rx)?;
        if claimed.tasks.is_empty() {
            return Err(format!("nothing due after {done} of {n}"));
        }
        let mut batch = Vec::with_capacity(BATCH);
        let mut replies = Vec::with_capacity(BATCH);
        for task in &claimed.tasks {
            let outcome = Completion::Success {
                http_status: 200,
                result: br#"{"ok":true}"#.to_vec(),
                content_type: Some("application/json".into()),
            };
            // As SqliteStore::complete: the effect is decided off the writer.
            let effect = CompletionEffect::of(outcome, now);
            let (id, attempt) = (task.id, task.attempt);
            let (reply, rx) = oneshot::channel::<Result<Guarded, StoreError>>();
            let op = move |conn: &Connection| {
                write_ops::complete(conn, &id, attempt, &effect, CALLBACK_BYTES)
            };
            batch.push(writer::command(op, Undo::WholeBatch, reply, None));
            replies.push(rx);
        }
        writer_batch(conn, &mut batch);
        for rx in replies {
            match answer(rx)? {
                Guarded::Applied(_) => {}
                other => return Err(format!("complete: {other:?}")),
            }
        }
        done += claimed.tasks.len() as u64;
    }
    Ok(())
}
