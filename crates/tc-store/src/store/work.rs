//! The [`Work`] part of the store port on [`SqliteStore`]: the worker's side (claims, leases, a try's end, recovery, shared buckets and holds).

use crate::writer::Undo;
use crate::{read_ops, write_ops};
use std::time::Duration;
use tc_model::claim::Claim;
use tc_model::completion::CompletionEffect;
use tc_model::destination::ClaimGate;
use tc_model::store::Work;
use tc_model::store::{Completion, Guarded, LeaseLost, StoreError};
use tc_model::{TaskId, Timestamp};

use super::SqliteStore;

impl Work for SqliteStore {
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
        // Reads, then per task an UPDATE and an INSERT; after the first
        // write only SQLite itself (or a corrupt row) can fail: no savepoint
        // (see Undo::WholeBatch).
        self.write_sized(0, Undo::WholeBatch, move |conn| {
            write_ops::claim(conn, n, now, lease, &gate)
        })
        .await
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
        self.write(move |conn| write_ops::heartbeat(conn, &running, now, lease))
            .await
    }

    async fn complete(
        &self,
        id: TaskId,
        attempt: u32,
        outcome: Completion,
        now: Timestamp,
    ) -> Result<Guarded, StoreError> {
        // What the completion does is decided here, before the writer
        // thread; the write only binds it.
        let effect = CompletionEffect::of(outcome, now);
        let bytes = effect.result.as_ref().map_or(0, |(result, _)| result.len());
        // Its first write is the guarded UPDATE (all or nothing); after it,
        // only SQLite itself can fail (see Undo::WholeBatch).
        let callback_bytes = self.callback_bytes;
        self.write_sized(bytes, Undo::WholeBatch, move |conn| {
            write_ops::complete(conn, &id, attempt, &effect, callback_bytes)
        })
        .await
    }

    async fn release(
        &self,
        id: TaskId,
        attempt: u32,
        now: Timestamp,
    ) -> Result<Guarded, StoreError> {
        self.write(move |conn| write_ops::release(conn, &id, attempt, now))
            .await
    }

    async fn recover_expired(&self, now: Timestamp) -> Result<usize, StoreError> {
        let callback_bytes = self.callback_bytes;
        self.write(move |conn| write_ops::recover_expired(conn, now, callback_bytes))
            .await
    }

    async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        self.readers.run(|conn| read_ops::next_due(conn)).await
    }

    /// One process opens an SQLite file: its buckets are this process's,
    /// in memory, and no writer time is spent on them.
    async fn take_tokens(
        &self,
        asks: Vec<tc_model::cluster::TokenAsk>,
        now: Timestamp,
    ) -> Result<Vec<tc_model::cluster::TokenGrant>, StoreError> {
        Ok(self.cluster().take_tokens(&asks, now))
    }

    async fn share_holds(
        &self,
        learned: Vec<(String, tc_model::cluster::DestinationHolds)>,
        now: Timestamp,
    ) -> Result<Vec<(String, tc_model::cluster::DestinationHolds)>, StoreError> {
        Ok(self.cluster().share_holds(learned, now))
    }
}
