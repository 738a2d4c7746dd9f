//! Group commit: concurrent calls of one kind (completions, single submits)
//! are queued and a few flushers each take whatever waits (up to a maximum)
//! into one statement, so calls that arrive while a statement is in flight
//! share the next one. No timer: a lone call goes out at once; grouping
//! comes from the statements in flight, which is what lets load amortize
//! round trips and commits. Each caller gets its own answer, in order.

use std::future::Future;
use std::sync::Arc;

use tc_model::store::StoreError;
use tokio::sync::{Mutex, mpsc, oneshot};

/// One call waiting for its statement.
type Request<A, R> = (A, oneshot::Sender<Result<R, StoreError>>);

/// The queue in front of the flushers; dropping it ends them once the
/// queue is empty.
pub(crate) struct Batcher<A, R> {
    queue: mpsc::UnboundedSender<Request<A, R>>,
}

/// How a batcher runs.
pub(crate) struct Shape {
    /// Statements in flight at once (each on its own pooled connection).
    pub(crate) flushers: usize,
    /// The most calls in one flush.
    pub(crate) max_batch: usize,
}

impl<A: Send + 'static, R: Send + 'static> Batcher<A, R> {
    /// Starts the flushers; `flush` answers a batch item by item, in order
    /// (an `Err` answers every caller of the batch with it).
    pub(crate) fn start<F, Fut>(shape: Shape, flush: F) -> Batcher<A, R>
    where
        F: Fn(Vec<A>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<Result<R, StoreError>>, StoreError>> + Send + 'static,
    {
        let (queue, rx) = mpsc::unbounded_channel();
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..shape.flushers.max(1) {
            tokio::spawn(flush_loop(
                Arc::clone(&rx),
                shape.max_batch.max(1),
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

async fn flush_loop<A, R, F, Fut>(
    rx: Arc<Mutex<mpsc::UnboundedReceiver<Request<A, R>>>>,
    max_batch: usize,
    flush: F,
) where
    F: Fn(Vec<A>) -> Fut,
    Fut: Future<Output = Result<Vec<Result<R, StoreError>>, StoreError>>,
{
    loop {
        let batch = {
            let mut rx = rx.lock().await;
            let Some(first) = rx.recv().await else {
                return;
            };
            let mut batch = vec![first];
            while batch.len() < max_batch {
                match rx.try_recv() {
                    Ok(next) => batch.push(next),
                    Err(_) => break,
                }
            }
            batch
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
        let batcher: Batcher<u32, u32> = Batcher::start(
            Shape {
                flushers: 1,
                max_batch: 100,
            },
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
