//! tc-store's tests against real SQLite: the store contract on both
//! variants, what only a file can show (reopen, migration, refusal), and a
//! crash of a writing process.

#![allow(clippy::unwrap_used)]

mod backup;
mod contract;
mod crash;
mod file;
mod model;
