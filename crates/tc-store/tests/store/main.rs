//! tc-store's tests against real SQLite: the store contract on both
//! variants, what only a file can show (reopen, migration, refusal), and a
//! crash of a writing process.

#![allow(clippy::unwrap_used)]

mod backup;
mod contract;
mod crash;
// A crash while tasks end makes no callback twice and loses none.
mod crash_callbacks;
// The counts by state after every write path (schema step 17).
mod counts;
mod file;
mod model;
// Secrets sealed at rest.
mod sealed;
// Schema step 29: the state's indexes.
mod state_indexes;
