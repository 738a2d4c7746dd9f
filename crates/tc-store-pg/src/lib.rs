//! taskcenter's PostgreSQL store: the adapter behind
//! [`tc_model::store::TaskStore`] for several nodes sharing one database.
//!
//! - tokio-postgres with a deadpool pool; TLS through rustls as libpq's
//!   `sslmode` and `sslrootcert` in the URL say ([`tls`]; default `prefer`).
//! - Claims with `FOR UPDATE SKIP LOCKED`, in batches; guarded writes lock
//!   the row and check (state, attempt); idempotent submit through the unique
//!   index and `ON CONFLICT`. Completions and single submits made at once
//!   share one statement each (group commit, batcher.rs), each caller keeping
//!   its own answer.
//! - Times from the database's clock ([`PgClock::Database`]), so nodes whose
//!   clocks disagree share leases and due times correctly.
//! - LISTEN/NOTIFY ([`PgStore::subscribe`]) for wake-ups and cancels across
//!   nodes.
//! - The layout is one list of migration steps with a version table, applied
//!   under an advisory lock, filling old rows in batches where a step needs
//!   it; a foreign or newer schema is refused untouched.
//! - State counts as appended deltas folded by one node at a time (no row two
//!   writers fight over); listings wait only for transactions that insert
//!   tasks.
//! - One node at a time leads upkeep (a session advisory lock on a
//!   connection of its own, [`leader`]): the count fold and `ANALYZE` of the
//!   hot tables run there, and [`Work::leads_upkeep`](tc_model::store::Work::leads_upkeep) tells the worker
//!   where to run lease recovery and pruning; the lead passes to another
//!   node the moment the leader's session ends.
//!
//! With the `testing` feature (tests and xtask only) [`testing`] gives a
//! test database with a schema per store.

mod analyze;
mod batcher;
mod cluster;
mod completions;
mod config;
mod counts;
mod destinations;
mod error;
mod events;
mod filter;
mod flow_keys;
mod group_submit;
mod leader;
mod moves;
mod notify;
mod open;
mod pace;
mod priority;
mod read_ops;
mod rows;
mod schedules;
mod schema;
mod secrets;
mod store;
mod sub_health;
mod tenants;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tls;
mod topics;
mod write_ops;

pub use config::{PgClock, PgConfig};
pub use error::OpenError;
pub use notify::PgEvent;
pub use store::PgStore;
pub use tc_seal::SealReport;

/// The schema version this build writes (the number of migration steps);
/// a database at a higher one is refused.
pub const SCHEMA_VERSION: usize = schema::MIGRATIONS.len();

/// Whether `db` names a PostgreSQL database rather than an SQLite file.
pub fn is_postgres_url(db: &str) -> bool {
    db.starts_with("postgres://") || db.starts_with("postgresql://")
}
