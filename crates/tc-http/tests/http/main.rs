//! tc-http's tests against its public API: the contract through the handler
//! (no socket) and the network behaviour through a real loopback server.
//! One test binary with modules, so the crate links once.

// Helpers outside #[test] fns unwrap too: a failure there is a test failure.
#![allow(clippy::unwrap_used)]

mod browsers;
mod cluster_view;
mod contract;
mod flow_keys;
mod props;
mod schedules;
mod scrape;
mod socket;
mod spec_bounds;
mod support;
mod tenant_writes;
mod tenants;
mod topics;
