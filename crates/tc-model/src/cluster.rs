//! Destination limits that hold across the cluster: the
//! rules of the state every node shares through the store, which each
//! adapter only reads and writes.
//!
//! - **Tokens** ([`tokens`]): one token bucket per rated destination, kept
//!   by the store. A node takes a small grant for one claim
//!   ([`crate::store::Work::take_tokens`]) and gives back what the
//!   claim did not use, so the calls of every node together stay within
//!   `rate_per_s` and `burst`; a node that dies holding a grant loses at
//!   most that grant (fewer calls, never more).
//! - **Holds** ([`holds`]): when a destination's open breaker, Retry-After
//!   backoff and rate-limit hold end. A node that learns of one writes it
//!   ([`crate::store::Work::share_holds`]); every node reads them and
//!   holds the destination too, and shows them in its view.
//!
//! A store that one process opens (SQLite, memory) keeps both in memory
//! ([`local::LocalCluster`]): the same rules, nobody else to share with.

pub mod holds;
pub mod local;
pub mod tokens;

pub use holds::DestinationHolds;
pub use tokens::{Bucket, TokenAsk, TokenGrant};
