//! The PostgreSQL adapter's tests: the store contract, the worker scenarios,
//! and what only PostgreSQL shows (schemas refused, migration races, the
//! database's clock, notifications). Each suite prints one
//! `skipped: no PostgreSQL at <url>` line and passes when there is none.

#![allow(clippy::unwrap_used)]

mod contract;
mod database;
mod workers;
