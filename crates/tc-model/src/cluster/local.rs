//! The cluster state of a store that one process opens (SQLite, memory):
//! the buckets and holds in memory, by the same rules a shared store
//! applies in its transactions. Lost on a restart, as a node's own state
//! was: buckets start full again, holds are relearned.

use std::collections::HashMap;

use super::{Bucket, DestinationHolds, TokenAsk, TokenGrant};
use crate::Timestamp;

/// Buckets and holds by destination.
#[derive(Debug, Default)]
pub struct LocalCluster {
    buckets: HashMap<String, Bucket>,
    holds: HashMap<String, DestinationHolds>,
}

impl LocalCluster {
    /// [`crate::store::Work::take_tokens`]: each ask settled against
    /// its destination's bucket (full when first met), in order.
    pub fn take_tokens(&mut self, asks: &[TokenAsk], now: Timestamp) -> Vec<TokenGrant> {
        asks.iter()
            .map(|ask| {
                let bucket = self
                    .buckets
                    .get(&ask.destination)
                    .copied()
                    .unwrap_or_else(|| Bucket::full(ask.size, now));
                let (bucket, grant) = bucket.settle(ask, now);
                self.buckets.insert(ask.destination.clone(), bucket);
                grant
            })
            .collect()
    }

    /// [`crate::store::Work::share_holds`]: merges `learned`, forgets
    /// ended holds, and answers every destination's current ones in name
    /// order.
    pub fn share_holds(
        &mut self,
        learned: Vec<(String, DestinationHolds)>,
        now: Timestamp,
    ) -> Vec<(String, DestinationHolds)> {
        for (name, holds) in learned {
            let merged = self
                .holds
                .get(&name)
                .copied()
                .unwrap_or_default()
                .merge(holds);
            self.holds.insert(name, merged);
        }
        self.holds.retain(|_, h| h.current(now).is_some());
        let mut current: Vec<(String, DestinationHolds)> = self
            .holds
            .iter()
            .filter_map(|(name, h)| Some((name.clone(), h.current(now)?)))
            .collect();
        current.sort_by(|a, b| a.0.cmp(&b.0));
        current
    }
}
