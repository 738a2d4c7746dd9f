//! [`PgConfig`]: how the PostgreSQL store runs, and whose clock it uses
//! ([`PgClock`]).

use std::time::Duration;

/// Whose clock stamps times, due times and leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PgClock {
    /// The database's `now()`: what several nodes need, so that node clocks
    /// that disagree cannot steal or keep leases. The `now` a caller passes
    /// only serves to turn the times it computes (a retry's due time) into
    /// delays, which are then added to the database's `now()`. The default.
    #[default]
    Database,
    /// The caller's `now`, as given: for the store contract suite, whose
    /// scenarios set every time explicitly. Never for several nodes.
    Caller,
}

/// How [`crate::PgStore`] runs. `Default` is what production uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgConfig {
    /// Whose clock counts.
    pub clock: PgClock,
    /// The most connections the pool opens (the listener has one more).
    pub pool_size: usize,
    /// How long an operation waits for a free connection before it fails as
    /// unavailable.
    pub wait_timeout: Duration,
    /// The schema to use instead of the URL's default search path (tests use
    /// a fresh one each). Created if missing.
    pub schema: Option<String>,
    /// How long the listener waits before reconnecting after losing its
    /// connection; missed notifications are covered by the worker's
    /// heartbeat and poll.
    pub listen_retry: Duration,
    /// The most bytes of a task's result its callback's body carries
    /// (tc-server's `--callback-result-bytes`): the store builds the
    /// callback in the transaction that ends the task.
    pub callback_result_bytes: usize,
    /// How often the upkeep leader pings its lock's connection (a failed
    /// or hung ping ends its lead at once), and how long a node waits
    /// before reconnecting that connection (leader.rs).
    pub leader_check: Duration,
}

impl Default for PgConfig {
    fn default() -> Self {
        PgConfig {
            clock: PgClock::Database,
            pool_size: 16,
            wait_timeout: Duration::from_secs(5),
            schema: None,
            listen_retry: Duration::from_millis(500),
            callback_result_bytes: tc_model::callback::DEFAULT_RESULT_BYTES,
            leader_check: Duration::from_secs(5),
        }
    }
}
