//! Where the tc-server binary under test is, built once per test run.
//!
//! `CARGO_BIN_EXE_*` exists only for a package's own binaries, and `cargo
//! test -p tests` does not build other packages' binaries. So the first test
//! that needs the server runs `cargo build -p tc-server` into the target
//! directory this test binary lives in, with the same profile: a no-op when
//! the binary is fresh, and never a stale binary when it is not.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The path of the freshly built `tc-server`.
pub(crate) fn tc_server() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(build)
}

fn build() -> PathBuf {
    // <target>/<profile>/deps/blackbox-<hash>
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("the deps directory");
    let profile_dir = deps.parent().expect("the profile directory");
    let target_dir = profile_dir.parent().expect("the target directory");
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .expect("a profile directory name");

    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "-p", "tc-server", "--bin", "tc-server"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", target_dir);
    match profile {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    let status = cmd.status().expect("run cargo build -p tc-server");
    assert!(
        status.success(),
        "cargo build -p tc-server failed: {status}"
    );

    let bin = profile_dir.join(format!("tc-server{}", std::env::consts::EXE_SUFFIX));
    assert!(bin.is_file(), "{} was not built", bin.display());
    bin
}
