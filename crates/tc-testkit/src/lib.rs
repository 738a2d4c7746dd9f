//! Test support for taskcenter.
//!
//! [`store_contract`] is the contract every [`tc_model::store::TaskStore`]
//! adapter must pass, written against the port only.
//!
//! [`memory_store`] is the reference store: a mutex and maps, passing that
//! contract; the fast store of the worker's and tc-http's unit tests.
//!
//! [`worker_scenarios`](mod@worker_scenarios) are the worker's semantics (retries, cancel in every
//! layer, leases, shutdown, the concurrency bound), written once against the
//! ports and run for every store × downstream that plays
//! [`tc_downstream::fake::Script`] (the fake in process, or the real client
//! against the fake served on loopback).
//!
//! [`pg_cluster`] starts a throwaway PostgreSQL cluster of its own, for
//! tests that restart the database or change its settings.
//!
//! [`ClaimDue`] claims and answers the tasks alone, for tests and benches
//! that do the worker's writes by hand.

// Test support: a failed unwrap here is a failed test.
#![allow(clippy::unwrap_used)]

mod claim_due;
pub mod hooked;
pub mod memory_store;
pub mod pg_cluster;
pub mod store_contract;
pub mod worker_scenarios;

pub use claim_due::ClaimDue;
