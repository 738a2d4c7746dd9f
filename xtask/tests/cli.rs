//! The `xtask` binary's command line, run as CI runs it. Its being here
//! also makes `cargo test --workspace` build `target/debug/xtask` with the
//! test build's features, which `.ci/run` then calls directly instead of
//! building the whole tree a second time for `cargo xtask` (Cargo unifies
//! features over the packages it builds, so `cargo run -p xtask` alone
//! differs from the workspace's test build, starting with tokio's).

use std::process::Command;

/// Runs `xtask args` and checks its exit status and that `expected`
/// appears in its output.
fn check(args: &[&str], succeeds: bool, expected: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running xtask {args:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.success(), succeeds, "xtask {args:?}: {text}");
    assert!(text.contains(expected), "xtask {args:?}: {text}");
}

#[test]
fn the_command_line_answers_without_building_anything() {
    check(&[], true, "usage: cargo xtask <command>");
    check(&["help"], true, "chaos");
    check(&["nope"], false, "unknown command \"nope\"");
    check(&["bench", "--help"], true, "usage: cargo xtask bench");
    check(
        &["bench", "--phase", "99"],
        false,
        "--phase: no phase \"99\"",
    );
}
