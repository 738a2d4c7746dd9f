//! Test support for taskcenter.
//!
//! [`store_contract`] is the contract every [`tc_model::store::TaskStore`]
//! adapter must pass, written against the port only.
//!
//! [`memory_store`] is the reference store: a mutex and maps, passing that
//! contract; the fast store of the worker's and tc-http's unit tests.
//!
//! [`worker_scenarios`] are the worker's semantics (retries, cancel in every
//! layer, leases, shutdown, the concurrency bound), written once against the
//! ports and run for every store × downstream; [`script`] is the scripted
//! downstream they run against, in process or over loopback HTTP.

// Test support: a failed unwrap here is a failed test.
#![allow(clippy::unwrap_used)]

pub mod memory_store;
pub mod script;
pub mod store_contract;
pub mod worker_scenarios;
