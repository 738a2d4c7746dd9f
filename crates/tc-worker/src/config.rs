//! How the worker runs ([`WorkerConfig`]) and how it stops
//! ([`ShutdownReport`], [`WorkerError`]): what the claim loop and the
//! schedules' loop read and return, apart from the [`crate::Worker`] that
//! starts them, so neither loop imports the crate's root.

use std::time::Duration;

use crate::auth::JwtSigner;
use crate::flow::BreakerPolicy;
use crate::trace::SpanTracer;

/// How the worker runs.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The most downstream calls in flight at once (at least 1).
    pub concurrency: usize,
    /// How long a claim holds a task before another worker may recover it.
    pub lease: Duration,
    /// The longest the claim loop sleeps without being woken when it found
    /// less than it asked for (it sleeps until the earliest task not yet
    /// due, [`tc_model::claim::Claim::resume_after`], when that is sooner);
    /// also the first wait after a failed claim.
    pub poll_interval: Duration,
    /// How long shutdown waits for in-flight calls before interrupting them.
    pub shutdown_grace: Duration,
    /// How often expired leases are recovered.
    pub recover_interval: Duration,
    /// Backoff and Retry-After bounds.
    pub retry: tc_retry::Policy,
    /// Seed for the backoff jitter; `None` seeds from the OS.
    pub jitter_seed: Option<u64>,
    /// When a destination's circuit breaker opens.
    pub breaker: BreakerPolicy,
    /// How often destination and tenant settings are read from the store
    /// (a change through this process is seen at once).
    pub settings_interval: Duration,
    /// The Standard Webhooks secrets that sign the calls of tasks without a
    /// tenant to destinations with none of their own (`--signing-secret`);
    /// none: those are not signed. Never a tenant's task
    /// ([`tc_model::outbound`]).
    pub signing_secrets: tc_model::signing::SigningSecrets,
    /// Makes one OpenTelemetry span per try (`--otlp-endpoint`); `None`:
    /// no spans, and each call's `traceparent` names the task's stored
    /// parent.
    pub tracer: Option<SpanTracer>,
    /// The longest the schedules' firing loop sleeps before it reads the
    /// schedules again (a change through this process wakes it at once;
    /// one made on another node is seen within this).
    pub schedules_interval: Duration,
    /// The allow-list (`--allow-url-prefix`; empty: every url): a
    /// schedule's firing whose task's `url` or `callback_url` is under no
    /// prefix creates no task and is recorded as the schedule's
    /// `last_error` ([`tc_model::urls_allowed`]).
    pub allow_url_prefixes: Vec<String>,
    /// What signs the JWTs of destinations whose `auth` is `jwt` (issue
    /// 41: `--issuer` and the server's keys); `None`: such a call fails
    /// with `auth_failed`.
    pub jwt: Option<JwtSigner>,
    /// How long a due task waits to count one priority level higher in
    /// its destination's claim order (`--priority-aging-ms`;
    /// [`tc_model::priority`]).
    pub priority_aging: Duration,
    /// The longest the claim loop waits, once it holds a free slot, for a
    /// useful number of them (a quarter of the pool, at least 16) before it
    /// claims: a claim costs the store about the same for one task as for a
    /// few dozen. [`DEFAULT_CLAIM_GATHER`] on one node;
    /// [`SHARED_CLAIM_GATHER`] where nodes share the claims.
    pub claim_gather: Duration,
}

/// [`WorkerConfig::claim_gather`] of a node that claims alone (SQLite):
/// its slots free in groups (one writer batch's completions), so a short
/// wait finds a useful claim, and a longer one only delays refills.
pub const DEFAULT_CLAIM_GATHER: Duration = Duration::from_millis(2);

/// [`WorkerConfig::claim_gather`] where several nodes share one database
/// (PostgreSQL): each node holds a share of the slots, which free a few at
/// a time, so after 2 ms a claim took ~11 tasks on each of three nodes
/// against ~30 on one node alone, and claims (a transaction each) per task
/// tripled. Waiting up to 8 ms took ~15 per claim (`cargo xtask bench
/// --store postgres`, docs/performance.md).
pub const SHARED_CLAIM_GATHER: Duration = Duration::from_millis(8);

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            concurrency: 8,
            lease: Duration::from_secs(30),
            poll_interval: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(10),
            recover_interval: Duration::from_secs(15),
            retry: tc_retry::Policy::default(),
            jitter_seed: None,
            breaker: BreakerPolicy::default(),
            settings_interval: Duration::from_secs(1),
            signing_secrets: tc_model::signing::SigningSecrets::default(),
            tracer: None,
            schedules_interval: Duration::from_secs(30),
            allow_url_prefixes: Vec::new(),
            jwt: None,
            priority_aging: tc_model::priority::DEFAULT_AGING,
            claim_gather: DEFAULT_CLAIM_GATHER,
        }
    }
}

/// What a shutdown did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShutdownReport {
    /// Calls still in flight when the grace period ended, put back to pending.
    pub interrupted: usize,
}

/// Why the worker stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A worker task panicked or was aborted.
    #[error("worker task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}
