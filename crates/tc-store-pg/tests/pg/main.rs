//! The PostgreSQL adapter's tests: the store contract, the worker scenarios,
//! and what only PostgreSQL shows (schemas refused, migrations and their
//! backfills, the database's clock, notifications, listing beside other
//! transactions, writes that must not wait on one another, calls grouped into
//! one statement that keep their own answers), TLS to a throwaway
//! cluster of its own. Each suite prints one
//! `skipped: no PostgreSQL at <url>` line and passes when there is none.

#![allow(clippy::unwrap_used)]

mod callbacks;
mod cluster_flow;
mod contention;
mod contract;
mod database;
mod grouped;
mod idle;
mod leader;
mod listing;
// The upgrade tests' shared setup.
mod live_upgrade;
mod plans;
mod ready_rows;
mod schedules;
// Secrets sealed at rest.
mod sealed;
mod support;
mod tenants;
mod tls;
mod upgrade;
mod upgrade_attempts;
mod upgrade_counted;
mod upgrade_hot;
mod upgrade_queue;
mod wal;
mod workers;
