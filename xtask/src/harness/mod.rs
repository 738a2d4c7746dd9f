//! What the tools that run a real tc-server share (bench, chaos, api-fuzz,
//! ui-test): building it in release, starting it as a child process and
//! learning its address ([`server`]), reading its memory and threads
//! ([`procfs`]), and talking HTTP to it ([`client`]).

pub(crate) mod client;
pub(crate) mod procfs;
pub(crate) mod server;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace's root folder.
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new("."))
        .to_owned()
}

pub(crate) fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}

/// What the release build of the harnesses that run the server (ui-test,
/// bench, chaos, api-fuzz) builds: tc-server and xtask together (the bench's
/// load generator is xtask in release), in one set of features, so the
/// first step that needs it builds the tree once and the others find it
/// built. xtask without its `ui` feature: fantoccini's dependencies turn on
/// syn's `fold` (and url's, zerofrom's, stable_deref_trait's defaults),
/// which change every proc-macro and so every crate above one; without
/// them this build and [`PRODUCT_PACKAGES`] differ only in tc-store's `raw`
/// and tc-store-pg's `testing`, and the image's build of tc-server alone
/// rebuilds those two and tc-server, not the whole tree. tc-server's code
/// is the same in both: the extra features add modules it does not call.
pub(crate) const RELEASE_PACKAGES: &[&str] =
    &["-p", "tc-server", "-p", "xtask", "--no-default-features"];

/// What the image packages: tc-server built alone, as a user builds it,
/// without the features xtask turns on (tc-store's `raw`, tc-store-pg's
/// `testing`): what ships holds no test machinery (tidy checks this build's
/// tree). One more release build in CI, of the crates those features touch
/// (tc-store, tc-store-pg) and tc-server.
pub(crate) const PRODUCT_PACKAGES: &[&str] = &["-p", "tc-server"];

/// `$CARGO build --release <packages>` in the workspace.
pub(crate) fn build(root: &Path, packages: &[&str]) -> Result<(), String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("[bench] cargo build --release {}", packages.join(" "));
    let status = Command::new(&cargo)
        .current_dir(root)
        .args(["build", "--release"])
        .args(packages)
        .status()
        .map_err(|e| format!("running cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("cargo build --release failed ({status})"))
    }
}
