//! Holding tokio's paused test clock while writes are in flight, at a cost
//! that does not grow with the number of writes.
//!
//! A paused clock (`#[tokio::test(start_paused = true)]`) jumps to the next
//! timer as soon as the runtime has nothing to run, and a caller awaiting the
//! writer thread looks like nothing to run: a test's leases and timeouts
//! could expire while its write is on the way to disk. A task running in the
//! blocking pool holds the clock. One such task per busy period (from the
//! first write in flight until none is left) holds it as well as one task per
//! write would, without parking a pool thread for every caller.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

/// Counts the writes in flight; keeps a blocking task alive while any is.
#[derive(Default)]
pub(crate) struct ClockHold {
    state: Arc<InFlight>,
}

#[derive(Default)]
struct InFlight {
    /// Writes in flight. Changed without the lock; the lock and the condvar
    /// are only used when it reaches zero, so a busy store pays two atomic
    /// operations per write.
    writes: AtomicUsize,
    lock: Mutex<()>,
    none_left: Condvar,
}

/// One write in flight; dropping it (write answered, or caller gone) ends it.
pub(crate) struct Held {
    state: Arc<InFlight>,
}

impl ClockHold {
    /// Marks a write in flight. Must be called inside a tokio runtime.
    pub(crate) fn enter(&self) -> Held {
        if self.state.writes.fetch_add(1, Ordering::AcqRel) == 0 {
            let state = Arc::clone(&self.state);
            // Detached: it ends by itself once no write is in flight. A
            // holder from the previous busy period that has not noticed the
            // zero yet simply sees this write and keeps holding too.
            drop(tokio::task::spawn_blocking(move || {
                let guard = state.lock.lock().unwrap_or_else(PoisonError::into_inner);
                drop(
                    state
                        .none_left
                        .wait_while(guard, |()| state.writes.load(Ordering::Acquire) > 0)
                        .unwrap_or_else(PoisonError::into_inner),
                );
            }));
        }
        Held {
            state: Arc::clone(&self.state),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.state.writes.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Notified under the lock: a holder that saw a write in flight
            // is either still checking (it holds the lock, so this waits) or
            // already waiting (so this wakes it). No wakeup is lost.
            let _guard = self
                .state
                .lock
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            self.state.none_left.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Stands in for the writer thread: real time passes outside the
    /// runtime, which sees nothing to run meanwhile.
    async fn slow_write(ms: u64) {
        let (done, answer) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(ms));
            let _ = done.send(());
        });
        let _ = answer.await;
    }

    #[tokio::test(start_paused = true)]
    async fn the_paused_clock_stands_still_while_a_write_is_held() {
        let hold = ClockHold::default();
        let held = hold.enter();
        // While held, a pending timer must not make the clock jump: a timer
        // far in the future stays pending while the runtime is otherwise idle.
        let start = tokio::time::Instant::now();
        tokio::select! {
            () = slow_write(50) => {}
            () = tokio::time::sleep(Duration::from_secs(3600)) => {
                panic!("the clock jumped while a write was held");
            }
        }
        assert!(start.elapsed() < Duration::from_secs(1));
        drop(held);
        // Released: idle again, so the clock advances to the next timer.
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(start.elapsed() >= Duration::from_secs(3600));
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_busy_period_holds_again() {
        let hold = ClockHold::default();
        for _ in 0..3 {
            let held = [hold.enter(), hold.enter()];
            tokio::select! {
                () = slow_write(20) => {}
                () = tokio::time::sleep(Duration::from_secs(3600)) => {
                    panic!("the clock jumped while writes were held");
                }
            }
            drop(held);
        }
    }
}
