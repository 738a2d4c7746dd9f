//! Doc links that lead nowhere: rustdoc over the workspace's own crates
//! (private items included, as the code is read) with broken intra-doc
//! links denied, so a renamed or removed item cannot leave a comment
//! pointing at it.

use std::path::Path;
use std::process::Command;

/// Every broken doc link, as `path:line: what rustdoc said`.
pub(super) fn check(root: &Path) -> Result<Vec<String>, String> {
    let output = Command::new(env!("CARGO"))
        .current_dir(root)
        .env("RUSTDOCFLAGS", "-D rustdoc::broken_intra_doc_links")
        .args([
            "doc",
            "--workspace",
            "--no-deps",
            "--document-private-items",
            "--keep-going",
            "--quiet",
        ])
        .output()
        .map_err(|e| format!("cargo doc: {e}"))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    let broken = broken_links(&stderr);
    if broken.is_empty() && !output.status.success() {
        return Err(format!("cargo doc failed:\n{stderr}"));
    }
    Ok(broken)
}

/// The errors of rustdoc's output with the place each names (`error: ...`
/// followed by ` --> path:line:col`); the closing "could not document"
/// lines are not links.
fn broken_links(stderr: &str) -> Vec<String> {
    let mut broken = Vec::new();
    let mut message: Option<&str> = None;
    for line in stderr.lines() {
        if let Some(rest) = line.strip_prefix("error: ") {
            message = (!rest.starts_with("could not document")).then_some(rest);
        } else if let (Some(what), Some(place)) = (message, line.trim_start().strip_prefix("--> "))
        {
            let place = place.rsplit_once(':').map_or(place, |(at, _column)| at);
            broken.push(format!("{place}: doc link: {what}"));
            message = None;
        }
    }
    broken
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_is_named_with_its_place() {
        let stderr = "\
 Documenting tc-model v0.1.0 (/work/main/crates/tc-model)
error: unresolved link to `crate::tenant::Scope::narrow`
   --> crates/tc-model/src/store.rs:190:42
    |
190 |     /// Only the tasks of this tenant ([`crate::tenant::Scope::narrow`]
warning: unclosed HTML tag `pid`
 --> xtask/src/harness/procfs.rs:6:26
error: `classify` is both a function and a module
 --> crates/tc-retry/src/lib.rs:6:60
error: could not document `tc-model`
";
        assert_eq!(
            broken_links(stderr),
            [
                "crates/tc-model/src/store.rs:190: doc link: unresolved link to `crate::tenant::Scope::narrow`",
                "crates/tc-retry/src/lib.rs:6: doc link: `classify` is both a function and a module",
            ]
        );
    }
}
