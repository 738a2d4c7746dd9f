//! Group commit of completions: concurrent `complete` calls are queued and
//! a few flushers each take whatever waits (up to [`MAX_BATCH`]) into one
//! statement ([`crate::completions::complete_many`]), so completions that
//! arrive while a statement is in flight share the next one. No timer: a
//! lone completion goes out at once; grouping comes from the in-flight
//! statements, which is what lets load amortize round trips and commits.
//! Each caller gets its own answer.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use deadpool_postgres::Pool;
use tc_model::store::{Guarded, StoreError};
use tokio::sync::{Mutex, mpsc, oneshot};

use crate::completions::{Asked, complete_many};
use crate::error::pool;

/// The most completions in one statement.
pub(crate) const MAX_BATCH: usize = 256;

/// Statements in flight at once (each on its own pooled connection).
const FLUSHERS: usize = 4;

/// One completion waiting for its statement.
struct Request {
    asked: Asked,
    reply: oneshot::Sender<Result<Guarded, StoreError>>,
}

/// The queue in front of the flushers; dropping it ends them once the
/// queue is empty.
pub(crate) struct Completer {
    queue: mpsc::UnboundedSender<Request>,
}

impl Completer {
    /// Starts the flushers on `pool`; each write sets `states_changed`.
    pub(crate) fn start(pool: Pool, states_changed: Arc<AtomicBool>) -> Completer {
        let (queue, rx) = mpsc::unbounded_channel();
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..FLUSHERS {
            tokio::spawn(flush_loop(
                pool.clone(),
                Arc::clone(&rx),
                Arc::clone(&states_changed),
            ));
        }
        Completer { queue }
    }

    /// Queues `asked` and waits for its statement's answer.
    pub(crate) async fn complete(&self, asked: Asked) -> Result<Guarded, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Request { asked, reply })
            .map_err(|_| StoreError::Unavailable("the store is closing".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Unavailable("the completion was dropped".into()))?
    }
}

async fn flush_loop(
    pool: Pool,
    rx: Arc<Mutex<mpsc::UnboundedReceiver<Request>>>,
    states_changed: Arc<AtomicBool>,
) {
    loop {
        let batch = {
            let mut rx = rx.lock().await;
            let Some(first) = rx.recv().await else {
                return;
            };
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(next) => batch.push(next),
                    Err(_) => break,
                }
            }
            batch
        };
        // A task twice in one statement would be updated once: repeats go
        // into the next round.
        let mut rest = batch;
        while !rest.is_empty() {
            let mut seen = HashSet::new();
            let (now, later): (Vec<Request>, Vec<Request>) =
                rest.into_iter().partition(|r| seen.insert(r.asked.id));
            rest = later;
            flush(&pool, now, &states_changed).await;
        }
    }
}

/// Runs one statement for `batch` and answers each caller.
async fn flush(pool: &Pool, batch: Vec<Request>, states_changed: &AtomicBool) {
    let (asked, replies): (Vec<Asked>, Vec<_>) =
        batch.into_iter().map(|r| (r.asked, r.reply)).unzip();
    let answers = match pool.get().await.map_err(pool_error) {
        Ok(client) => complete_many(&client, &asked).await,
        Err(e) => Err(e),
    };
    match answers {
        Ok(answers) => {
            states_changed.store(true, Ordering::Relaxed);
            for (reply, answer) in replies.into_iter().zip(answers) {
                // A caller that gave up needs no answer.
                let _ = reply.send(answer);
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

fn pool_error(e: deadpool_postgres::PoolError) -> StoreError {
    pool(e)
}
