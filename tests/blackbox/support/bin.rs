//! Where the tc-server binary under test is.
//!
//! The suite is tc-server's own test target, so Cargo builds the binary
//! before the tests and names it in `CARGO_BIN_EXE_tc-server`: no test runs
//! cargo, and the binary is never stale.

use std::path::Path;

/// The path of the `tc-server` Cargo built for this test run.
pub(crate) fn tc_server() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tc-server"))
}
