//! Rules read from the source text itself, as rust-analyzer's tidy does:
//!
//! - Every module says what it is for: a file opens with a `//!` doc, and an
//!   inline module (other than `mod tests`) has a `///` or `//!` doc.
//! - No test machinery is reachable from a product crate without a
//!   test-only feature: a `testing` module or a `#[doc(hidden)]` item in the
//!   module tree the release build compiles (walked from `lib.rs`/`main.rs`,
//!   skipping modules behind `#[cfg(test)]` or a test-only feature) fails.
//!
//! The text is read line by line, not parsed: rustfmt's layout (one
//! attribute or item head per line) is what makes that enough.

use std::path::{Path, PathBuf};

/// One source file: its path (relative to the workspace root) and its text.
pub(crate) struct Source {
    pub(crate) path: PathBuf,
    pub(crate) text: String,
}

#[cfg(test)]
impl Source {
    /// A file of `text` at `path`, for the rules' tests.
    pub(crate) fn new(path: &str, text: &str) -> Source {
        Source {
            path: PathBuf::from(path),
            text: text.to_owned(),
        }
    }
}

/// Every `.rs` file under `crates/`, `xtask/` and `tests/`, sorted by path.
pub(crate) fn load_all(root: &Path) -> Result<Vec<Source>, String> {
    let mut paths = Vec::new();
    for top in ["crates", "xtask", "tests"] {
        walk(root, &root.join(top), &mut paths)?;
    }
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(root.join(&path))
                .map_err(|e| format!("reading {}: {e}", path.display()))?;
            Ok(Source { path, text })
        })
        .collect()
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries {
        let entry = entry.map_err(|e| format!("listing {}: {e}", dir.display()))?;
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            walk(root, &path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path.strip_prefix(root).unwrap_or(&path).to_owned());
        }
    }
    Ok(())
}

/// Files and inline modules without a module doc.
pub(crate) fn check_module_docs(sources: &[Source]) -> Vec<String> {
    let mut violations = Vec::new();
    for source in sources {
        let first = source
            .text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with("#!["));
        if !first.is_some_and(|l| l.starts_with("//!")) {
            violations.push(format!(
                "{} has no module doc (`//!` before its first item)",
                source.path.display()
            ));
        }
        let lines: Vec<&str> = source.text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(name) = inline_module(line) else {
                continue;
            };
            if name == "tests" {
                continue;
            }
            let outer = attributes_above(&lines, i)
                .iter()
                .any(|l| l.starts_with("///"));
            let inner = lines[i + 1..]
                .iter()
                .map(|l| l.trim())
                .find(|l| !l.is_empty())
                .is_some_and(|l| l.starts_with("//!"));
            if !outer && !inner {
                violations.push(format!(
                    "{}:{}: inline module {name} has no doc",
                    source.path.display(),
                    i + 1
                ));
            }
        }
    }
    violations
}

/// Test machinery reachable in `krate`'s release build: `sources` are the
/// crate's files (paths as [`load_all`] gives them), `test_features` the
/// crate's features that only tests enable.
pub(crate) fn check_test_machinery(
    krate: &str,
    sources: &[Source],
    test_features: &[&str],
) -> Vec<String> {
    let dir = Path::new("crates").join(krate).join("src");
    let find = |path: &Path| sources.iter().find(|s| s.path == path);
    let mut todo: Vec<PathBuf> = ["lib.rs", "main.rs"]
        .iter()
        .map(|f| dir.join(f))
        .filter(|p| find(p).is_some())
        .collect();
    let mut violations = Vec::new();
    while let Some(path) = todo.pop() {
        let Some(source) = find(&path) else {
            continue;
        };
        let lines: Vec<&str> = source.text.lines().collect();
        let mut skip_until_close = false;
        for (i, line) in lines.iter().enumerate() {
            if skip_until_close {
                skip_until_close = *line != "}";
                continue;
            }
            let gated = gated(&attributes_above(&lines, i), test_features);
            let trimmed = line.trim();
            if let Some(name) = inline_module(line) {
                if gated {
                    // Only a module at the file's top level is skipped whole:
                    // its closing brace is the next `}` in column 0.
                    skip_until_close = !line.starts_with(char::is_whitespace);
                } else if name == "testing" {
                    violations.push(format!(
                        "{}:{}: module testing is compiled into {krate} without a test-only feature",
                        path.display(),
                        i + 1
                    ));
                }
                continue;
            }
            if let Some(name) = file_module(trimmed) {
                if gated {
                    continue;
                }
                if name == "testing" {
                    violations.push(format!(
                        "{}:{}: module testing is compiled into {krate} without a test-only feature",
                        path.display(),
                        i + 1
                    ));
                }
                todo.extend(
                    child_paths(&path, name)
                        .into_iter()
                        .filter(|p| find(p).is_some()),
                );
                continue;
            }
            if trimmed.starts_with("#[doc(hidden)]") && !gated {
                violations.push(format!(
                    "{}:{}: #[doc(hidden)] item is compiled into {krate} without a test-only feature",
                    path.display(),
                    i + 1
                ));
            }
        }
    }
    violations.sort();
    violations
}

/// The name of an inline module whose head is `line` (`mod name {`).
fn inline_module(line: &str) -> Option<&str> {
    let rest = module_head(line.trim())?;
    let name = rest.strip_suffix(" {")?;
    is_ident(name).then_some(name)
}

/// The name of a file module declared by `line` (`mod name;`).
fn file_module(line: &str) -> Option<&str> {
    let name = module_head(line)?.strip_suffix(';')?;
    is_ident(name).then_some(name)
}

/// What follows `mod ` in an item head with any visibility.
fn module_head(line: &str) -> Option<&str> {
    let line = match line.strip_prefix("pub") {
        Some(rest) if rest.starts_with('(') => rest.split_once(") ")?.1,
        Some(rest) => rest.strip_prefix(' ')?,
        None => line,
    };
    line.strip_prefix("mod ")
}

fn is_ident(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The outer attributes and doc lines stacked right above line `i`, and
/// line `i`'s own attributes when they share its line.
fn attributes_above<'a>(lines: &[&'a str], i: usize) -> Vec<&'a str> {
    let mut above: Vec<&str> = lines[..i]
        .iter()
        .rev()
        .map(|l| l.trim())
        .take_while(|l| l.starts_with("#[") || l.starts_with("///"))
        .collect();
    if lines[i].trim().starts_with("#[") {
        above.push(lines[i].trim());
    }
    above
}

/// Whether these attributes compile the item only for tests: `cfg(test)`,
/// or a `cfg` naming a test-only feature.
fn gated(attributes: &[&str], test_features: &[&str]) -> bool {
    attributes.iter().any(|a| {
        let Some(cfg) = a.strip_prefix("#[cfg(") else {
            return false;
        };
        let cfg = cfg.trim_end_matches(")]");
        let test = cfg == "test" || cfg.starts_with("test,") || cfg.contains("(test");
        let feature = test_features
            .iter()
            .any(|f| cfg.contains(&format!("feature = \"{f}\"")));
        test || feature
    })
}

/// Where `mod name;` declared in `parent` may live.
fn child_paths(parent: &Path, name: &str) -> Vec<PathBuf> {
    let dir = parent.parent().unwrap_or(Path::new(""));
    let stem = parent.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let base = if matches!(stem, "lib" | "main" | "mod") {
        dir.to_owned()
    } else {
        dir.join(stem)
    };
    vec![
        base.join(format!("{name}.rs")),
        base.join(name).join("mod.rs"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(files: &[(&str, &str)]) -> Vec<Source> {
        files
            .iter()
            .map(|(p, t)| Source {
                path: PathBuf::from(p),
                text: t.to_string(),
            })
            .collect()
    }

    /// Runs both rules on `files` (crate `tc-a`, test-only feature
    /// `testing`); `expected` lists fragments that must each appear in one
    /// violation, and nothing else may fail.
    fn check(files: &[(&str, &str)], expected: &[&str]) {
        let files = sources(files);
        let mut got = check_module_docs(&files);
        got.extend(check_test_machinery("tc-a", &files, &["testing"]));
        assert_eq!(got.len(), expected.len(), "violations: {got:#?}");
        for fragment in expected {
            assert!(
                got.iter().any(|v| v.contains(fragment)),
                "{fragment:?} not in {got:#?}"
            );
        }
    }

    const LIB: &str = "crates/tc-a/src/lib.rs";

    #[test]
    fn documented_modules_and_gated_test_machinery_pass() {
        check(
            &[
                (
                    LIB,
                    "//! A.\n\nmod b;\n#[cfg(feature = \"testing\")]\npub mod testing;\n#[cfg(test)]\nmod tests {\n    #[doc(hidden)]\n    fn t() {}\n}\n",
                ),
                (
                    "crates/tc-a/src/b.rs",
                    "#![allow(dead_code)]\n//! B.\n\n/// C.\npub mod c {\n}\n",
                ),
                (
                    "crates/tc-a/src/testing.rs",
                    "//! T.\n#[doc(hidden)]\npub fn helper() {}\n",
                ),
            ],
            &[],
        );
    }

    #[test]
    fn each_broken_rule_is_caught() {
        check(
            &[(LIB, "use std::fmt;\n")],
            &["crates/tc-a/src/lib.rs has no module doc"],
        );
        check(
            &[(LIB, "//! A.\nmod inner {\n    fn f() {}\n}\n")],
            &["lib.rs:2: inline module inner has no doc"],
        );
        check(
            &[
                (LIB, "//! A.\npub mod testing;\n"),
                ("crates/tc-a/src/testing.rs", "//! T.\n"),
            ],
            &["lib.rs:2: module testing is compiled into tc-a"],
        );
        // Behind a feature that is not test-only, it still ships.
        check(
            &[(
                LIB,
                "//! A.\n#[cfg(feature = \"tls\")]\nmod testing {\n    //! T.\n}\n",
            )],
            &["lib.rs:3: module testing is compiled into tc-a"],
        );
        // A hidden item two modules down, through a `mod` in a non-mod.rs file.
        check(
            &[
                (LIB, "//! A.\nmod b;\n"),
                ("crates/tc-a/src/b.rs", "//! B.\npub(crate) mod c;\n"),
                (
                    "crates/tc-a/src/b/c.rs",
                    "//! C.\n#[doc(hidden)]\npub fn f() {}\n",
                ),
            ],
            &["b/c.rs:2: #[doc(hidden)] item is compiled into tc-a"],
        );
    }
}
