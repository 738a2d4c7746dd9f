//! The [`Work`] part of the store port on [`PgStore`]: the worker's side (claims, leases, a try's end, recovery, shared buckets and holds).

use crate::completions::Asked;
use crate::config::PgClock;
use crate::{read_ops, write_ops};
use std::time::Duration;
use tc_model::claim::Claim;
use tc_model::destination::ClaimGate;
use tc_model::store::Work;
use tc_model::store::{Completion, Guarded, LeaseLost, StoreError};
use tc_model::{TaskId, Timestamp};

use super::{PgStore, system_now_ms};

impl Work for PgStore {
    fn leads_upkeep(&self) -> bool {
        *self.leading.borrow()
    }

    async fn claim(
        &self,
        n: usize,
        now: Timestamp,
        lease: Duration,
        gate: ClaimGate,
    ) -> Result<Claim, StoreError> {
        if n == 0 {
            return Ok(Claim::default());
        }
        let stamp = self.stamp(now);
        let claimed = self
            .write(async |tx| write_ops::claim(tx, n, stamp, lease, &gate).await)
            .await?;
        if !claimed.tasks.is_empty() {
            self.states_changed();
        }
        let (due, store_now) = claimed.resume_after;
        Ok(Claim {
            tasks: claimed.tasks,
            cursor: claimed.cursor,
            resume_after: due.map(|due| match self.clock {
                PgClock::Caller => Timestamp::from_millis(due),
                // The caller's clock may not be the database's: hand the
                // due time over as "this long after the caller's now".
                PgClock::Database => Timestamp::from_millis(
                    now.as_millis()
                        .saturating_add(due.saturating_sub(store_now)),
                ),
            }),
        })
    }

    async fn heartbeat(
        &self,
        running: Vec<(TaskId, u32)>,
        now: Timestamp,
        lease: Duration,
    ) -> Result<Vec<LeaseLost>, StoreError> {
        if running.is_empty() {
            return Ok(Vec::new());
        }
        write_ops::heartbeat(&self.client().await?, &running, self.stamp(now), lease).await
    }

    async fn complete(
        &self,
        id: TaskId,
        attempt: u32,
        outcome: Completion,
        now: Timestamp,
    ) -> Result<Guarded, StoreError> {
        self.completer
            .call(Asked {
                id,
                attempt,
                outcome,
                now_ms: now.as_millis(),
                now: self.stamp(now),
            })
            .await
    }

    async fn release(
        &self,
        id: TaskId,
        attempt: u32,
        now: Timestamp,
    ) -> Result<Guarded, StoreError> {
        let stamp = self.stamp(now);
        let released = self
            .write(async |tx| write_ops::release(tx, &id, attempt, stamp).await)
            .await?;
        self.states_changed();
        Ok(released)
    }

    async fn recover_expired(&self, now: Timestamp) -> Result<usize, StoreError> {
        let stamp = (now, self.stamp(now));
        let moved = self
            .write(async |tx| write_ops::recover_expired(tx, stamp, self.callback_bytes).await)
            .await?;
        if moved > 0 {
            self.states_changed();
        }
        Ok(moved)
    }

    async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        let (due, store_now) = read_ops::next_due(&self.client().await?).await?;
        Ok(due.map(|due| match self.clock {
            PgClock::Caller => Timestamp::from_millis(due),
            // The port's next_due has no caller clock to speak in; the
            // server's worker runs on the system clock, so the database's
            // due time is handed over as "this long from now" on it.
            PgClock::Database => {
                Timestamp::from_millis(system_now_ms().saturating_add(due - store_now))
            }
        }))
    }

    async fn take_tokens(
        &self,
        asks: Vec<tc_model::cluster::TokenAsk>,
        now: Timestamp,
    ) -> Result<Vec<tc_model::cluster::TokenGrant>, StoreError> {
        if asks.is_empty() {
            return Ok(Vec::new());
        }
        let caller = self.stamp(now);
        crate::cluster::create_buckets(&self.client().await?, &asks, caller).await?;
        self.write(async |tx| crate::cluster::take_tokens(tx, &asks, caller).await)
            .await
    }

    async fn share_holds(
        &self,
        learned: Vec<(String, tc_model::cluster::DestinationHolds)>,
        now: Timestamp,
    ) -> Result<Vec<(String, tc_model::cluster::DestinationHolds)>, StoreError> {
        let caller = self.stamp(now);
        if learned.is_empty() {
            return crate::cluster::read_holds(&self.client().await?, now, caller).await;
        }
        crate::cluster::create_holds(&self.client().await?, &learned).await?;
        self.write(async |tx| crate::cluster::share_holds(tx, learned, now, caller).await)
            .await
    }
}
