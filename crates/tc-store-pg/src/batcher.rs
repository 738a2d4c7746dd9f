//! Group commit: concurrent calls of one kind (completions, single submits)
//! are queued and a few flushers each take whatever waits (up to a maximum)
//! into one statement, so calls that arrive while a statement is in flight
//! share the next one. Each caller gets its own answer, in order.
//!
//! How many flushers run, and whether a small group waits for company,
//! follows the cluster's size ([`crate::pace`]): a lone node runs all of
//! its flushers and never waits (a lone call goes out at once; grouping
//! comes from the statements in flight); a node of several runs its share
//! of the cluster's statements in flight, and a group smaller than
//! [`crate::pace::GROUP`] waits up to the pace's linger for more, so the
//! groups do not shrink as nodes are added.

use std::future::Future;
use std::sync::Arc;

use tc_model::store::StoreError;
use tokio::sync::{Mutex, mpsc, oneshot, watch};

use crate::pace::{GROUP, Pace};

/// One call waiting for its statement.
type Request<A, R> = (A, oneshot::Sender<Result<R, StoreError>>);

/// The queue in front of the flushers; dropping it ends them once the
/// queue is empty.
pub(crate) struct Batcher<A, R> {
    queue: mpsc::UnboundedSender<Request<A, R>>,
}

/// How a batcher runs.
pub(crate) struct Shape {
    /// The most statements in flight at once (each on its own pooled
    /// connection); the pace may run fewer.
    pub(crate) flushers: usize,
    /// The most calls in one flush.
    pub(crate) max_batch: usize,
}

impl<A: Send + 'static, R: Send + 'static> Batcher<A, R> {
    /// Starts the flushers, as many running as `pace` says; `flush`
    /// answers a batch item by item, in order (an `Err` answers every
    /// caller of the batch with it).
    pub(crate) fn start<F, Fut>(
        shape: Shape,
        pace: watch::Receiver<Pace>,
        flush: F,
    ) -> Batcher<A, R>
    where
        F: Fn(Vec<A>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<Result<R, StoreError>>, StoreError>> + Send + 'static,
    {
        let (queue, rx) = mpsc::unbounded_channel();
        let rx = Arc::new(Mutex::new(rx));
        for index in 0..shape.flushers.max(1) {
            tokio::spawn(flush_loop(
                Flusher {
                    index,
                    max_batch: shape.max_batch.max(1),
                    pace: pace.clone(),
                },
                Arc::clone(&rx),
                flush.clone(),
            ));
        }
        Batcher { queue }
    }

    /// Queues `asked` and waits for its statement's answer.
    pub(crate) async fn call(&self, asked: A) -> Result<R, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send((asked, reply))
            .map_err(|_| StoreError::Unavailable("the store is closing".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Unavailable("the batched write was dropped".into()))?
    }
}

/// One flusher's place among its batcher's.
struct Flusher {
    /// Runs while the pace's flushers are more than this.
    index: usize,
    max_batch: usize,
    pace: watch::Receiver<Pace>,
}

impl Flusher {
    /// Waits while the pace leaves this flusher out; the linger to use.
    /// A pace whose sender is gone keeps the last.
    async fn run_turn(&mut self) -> std::time::Duration {
        loop {
            let pace = *self.pace.borrow_and_update();
            if self.index < pace.flushers || self.pace.changed().await.is_err() {
                return pace.linger;
            }
        }
    }
}

/// The next batch: the first call, whatever waits behind it, and with a
/// linger, what comes within it until [`GROUP`]. `None` once the queue is
/// closed and empty.
async fn next_batch<A, R>(
    rx: &Mutex<mpsc::UnboundedReceiver<Request<A, R>>>,
    max_batch: usize,
    linger: std::time::Duration,
) -> Option<Vec<Request<A, R>>> {
    let mut rx = rx.lock().await;
    let first = rx.recv().await?;
    let mut batch = vec![first];
    let take_waiting = |rx: &mut mpsc::UnboundedReceiver<Request<A, R>>,
                        batch: &mut Vec<Request<A, R>>| {
        while batch.len() < max_batch {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
    };
    take_waiting(&mut rx, &mut batch);
    if batch.len() < GROUP.min(max_batch) && !linger.is_zero() {
        let until = tokio::time::Instant::now() + linger;
        while batch.len() < GROUP.min(max_batch) {
            tokio::select! {
                next = rx.recv() => match next {
                    Some(next) => batch.push(next),
                    None => break,
                },
                () = tokio::time::sleep_until(until) => break,
            }
        }
        take_waiting(&mut rx, &mut batch);
    }
    Some(batch)
}

async fn flush_loop<A, R, F, Fut>(
    mut flusher: Flusher,
    rx: Arc<Mutex<mpsc::UnboundedReceiver<Request<A, R>>>>,
    flush: F,
) where
    F: Fn(Vec<A>) -> Fut,
    Fut: Future<Output = Result<Vec<Result<R, StoreError>>, StoreError>>,
{
    loop {
        let linger = flusher.run_turn().await;
        let Some(batch) = next_batch(&rx, flusher.max_batch, linger).await else {
            return;
        };
        let (asked, replies): (Vec<A>, Vec<_>) = batch.into_iter().unzip();
        match flush(asked).await {
            Ok(answers) => {
                let mut answers = answers.into_iter();
                for reply in replies {
                    let answer = answers.next().unwrap_or_else(|| {
                        Err(StoreError::Unavailable("a batch answered short".into()))
                    });
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls made while a flush is in flight share the next flush, and
    /// each caller gets its own answer.
    #[tokio::test]
    async fn calls_queued_behind_a_flush_share_the_next() {
        let (gate_tx, gate_rx) = tokio::sync::watch::channel(false);
        let sizes = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&sizes);
        let (_pace, paced) = watch::channel(Pace::for_nodes(1));
        let batcher: Batcher<u32, u32> = Batcher::start(
            Shape {
                flushers: 1,
                max_batch: 100,
            },
            paced,
            move |batch: Vec<u32>| {
                let seen = Arc::clone(&seen);
                let mut gate = gate_rx.clone();
                async move {
                    if let Ok(mut s) = seen.lock() {
                        s.push(batch.len());
                    }
                    // The first flush waits until every call is queued.
                    let _ = gate.wait_for(|open| *open).await;
                    Ok(batch.into_iter().map(|n| Ok(n * 10)).collect())
                }
            },
        );
        let batcher = Arc::new(batcher);
        let mut calls = Vec::new();
        for n in 0..5 {
            let b = Arc::clone(&batcher);
            calls.push(tokio::spawn(async move { b.call(n).await }));
            // Let the first call reach the flusher before the others.
            tokio::task::yield_now().await;
        }
        // Bounded: the first flush starts within a few turns of the runtime.
        for _ in 0..1_000 {
            if sizes.lock().map(|s| s.len()).unwrap_or(0) > 0 {
                break;
            }
            tokio::task::yield_now().await;
        }
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        gate_tx.send_replace(true);
        let mut answers = Vec::new();
        for call in calls {
            answers.push(call.await.ok().and_then(|a| a.ok()));
        }
        assert_eq!(
            answers,
            vec![Some(0), Some(10), Some(20), Some(30), Some(40)]
        );
        let sizes = sizes.lock().map(|s| s.clone()).unwrap_or_default();
        assert_eq!(sizes.iter().sum::<usize>(), 5);
        assert!(sizes.len() < 5, "no call shared a flush: {sizes:?}");
    }
}
