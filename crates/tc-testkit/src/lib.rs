//! Test support for taskcenter.
//!
//! [`store_contract`] is the contract every [`tc_model::store::TaskStore`]
//! adapter must pass, written against the port only.

// Test support: a failed unwrap here is a failed test.
#![allow(clippy::unwrap_used)]

pub mod store_contract;
