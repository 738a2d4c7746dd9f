//! Rooms sized for one job: in the product crates (their `src/`, tests
//! apart), no file over [`MAX_FILE_LINES`] lines and no function over
//! [`MAX_FN_LINES`], but for the few named in [`FILES_LEFT`] and
//! [`FNS_LEFT`], each with the reason it is left.
//!
//! Tests apart: a file named `tests.rs` or `*_tests.rs`, and a file's
//! `#[cfg(test)] mod tests { … }` block, count for neither rule. The text
//! is read line by line, as rustfmt lays it out: a function runs from its
//! `fn` line to the first line at the same indentation that closes it.

use super::source::Source;

/// The most lines a product file may have, its tests apart.
pub(crate) const MAX_FILE_LINES: usize = 700;
/// The most lines a product function may have, its head and closing brace
/// included.
pub(crate) const MAX_FN_LINES: usize = 80;

/// The crates whose code is test machinery, not product.
const NOT_PRODUCT: &[&str] = &["tc-testkit"];

/// Product files still over [`MAX_FILE_LINES`], and why they are left.
const FILES_LEFT: &[(&str, &str)] = &[];

/// Product functions (`path::name`) still over [`MAX_FN_LINES`], and why.
const FNS_LEFT: &[(&str, &str)] = &[];

/// Every product file over its bound and every function over its bound
/// that the lists above do not name; and every entry of those lists that
/// no longer needs to be there, so that they only shrink.
pub(crate) fn check(sources: &[Source]) -> Vec<String> {
    check_with(sources, FILES_LEFT, FNS_LEFT)
}

/// [`check`] with the lists of what is left given.
fn check_with(
    sources: &[Source],
    files_left: &[(&str, &str)],
    fns_left: &[(&str, &str)],
) -> Vec<String> {
    let mut violations = Vec::new();
    let mut files_seen = Vec::new();
    let mut fns_seen = Vec::new();
    for source in sources.iter().filter(|s| is_product(&s.path)) {
        let path = source.path.to_string_lossy().replace('\\', "/");
        let lines: Vec<&str> = source.text.lines().collect();
        let tests = tests_block(&lines);
        let counted = lines.len() - tests.map_or(0, |(a, b)| b - a + 1);
        if counted > MAX_FILE_LINES {
            if files_left.iter().any(|(p, _)| *p == path) {
                files_seen.push(path.clone());
            } else {
                violations.push(format!(
                    "{path} has {counted} lines without its tests (at most {MAX_FILE_LINES})"
                ));
            }
        }
        for (name, start, len) in functions(&lines) {
            if tests.is_some_and(|(a, b)| (a..=b).contains(&start)) || len <= MAX_FN_LINES {
                continue;
            }
            let key = format!("{path}::{name}");
            if fns_left.iter().any(|(k, _)| *k == key) {
                fns_seen.push(key);
            } else {
                violations.push(format!(
                    "{path}:{}: fn {name} has {len} lines (at most {MAX_FN_LINES})",
                    start + 1
                ));
            }
        }
    }
    for (left, _) in files_left
        .iter()
        .filter(|(p, _)| !files_seen.contains(&p.to_string()))
    {
        violations.push(format!(
            "{left} is within bounds now: strike it from FILES_LEFT"
        ));
    }
    for (left, _) in fns_left
        .iter()
        .filter(|(k, _)| !fns_seen.contains(&k.to_string()))
    {
        violations.push(format!(
            "{left} is within bounds now: strike it from FNS_LEFT"
        ));
    }
    violations
}

/// Whether `path` is a product crate's source, tests apart.
fn is_product(path: &std::path::Path) -> bool {
    let path = path.to_string_lossy().replace('\\', "/");
    let Some(rest) = path.strip_prefix("crates/") else {
        return false;
    };
    let Some((krate, inside)) = rest.split_once('/') else {
        return false;
    };
    let name = inside.rsplit('/').next().unwrap_or(inside);
    !NOT_PRODUCT.contains(&krate)
        && inside.starts_with("src/")
        && name != "tests.rs"
        && !name.ends_with("_tests.rs")
}

/// The first and last line (0-based) of the file's top-level
/// `#[cfg(test)] mod tests {` block, if it has one.
fn tests_block(lines: &[&str]) -> Option<(usize, usize)> {
    let head = lines
        .iter()
        .position(|l| *l == "mod tests {")
        .filter(|&i| i > 0 && lines[i - 1].starts_with("#[cfg(test)]"))?;
    let end = lines[head..].iter().position(|l| *l == "}")? + head;
    Some((head - 1, end))
}

/// Each function with a body: its name, its `fn` line (0-based) and its
/// length in lines.
fn functions(lines: &[&str]) -> Vec<(String, usize, usize)> {
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line.trim_start()) else {
            continue;
        };
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim_end();
        if trimmed.ends_with('}') {
            found.push((name.to_owned(), i, 1));
            continue;
        }
        if trimmed.ends_with(';') {
            continue;
        }
        for (j, later) in lines.iter().enumerate().skip(i + 1) {
            let at = later.len() - later.trim_start().len();
            if at != indent || later.trim().is_empty() {
                continue;
            }
            let later = later.trim();
            if later.starts_with('}') {
                found.push((name.to_owned(), i, j - i + 1));
                break;
            }
            if later.ends_with(';') {
                break;
            }
        }
    }
    found
}

/// The name of the function whose head starts `line` (indentation
/// trimmed), with any visibility and qualifiers.
fn fn_name(line: &str) -> Option<&str> {
    let mut rest = line;
    if let Some(r) = rest.strip_prefix("pub") {
        rest = match r.strip_prefix('(') {
            Some(r) => r.split_once(") ")?.1,
            None => r.strip_prefix(' ')?,
        };
    }
    for qualifier in ["const ", "async ", "unsafe "] {
        rest = rest.strip_prefix(qualifier).unwrap_or(rest);
    }
    let rest = rest.strip_prefix("fn ")?;
    let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
    (end > 0).then(|| &rest[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(path: &str, text: &str) -> Source {
        Source::new(path, text)
    }

    /// A function of `body` lines between its head and its closing brace.
    fn function(name: &str, body: usize) -> String {
        format!(
            "pub(crate) async fn {name}(\n    a: u8,\n) {{\n{}}}\n",
            "    x();\n".repeat(body)
        )
    }

    #[test]
    fn functions_are_measured_from_head_to_closing_brace() {
        let text = format!(
            "//! A.\nfn one() {{}}\ntrait T {{\n    fn declared(&self);\n}}\n{}impl A {{\n    fn inner(&self) {{\n        x();\n    }}\n}}\n",
            function("long", 4)
        );
        let lines: Vec<&str> = text.lines().collect();
        let found: Vec<(String, usize)> = functions(&lines)
            .into_iter()
            .map(|(n, _, len)| (n, len))
            .collect();
        assert_eq!(
            found,
            [("one".into(), 1), ("long".into(), 8), ("inner".into(), 3)]
        );
    }

    #[test]
    fn long_functions_and_files_are_caught_tests_apart() {
        let check_one = |path: &str, text: String, expected: &[&str]| {
            let got = check_with(&[source(path, &text)], &[], &[]);
            assert_eq!(got.len(), expected.len(), "{got:?}");
            for (g, e) in got.iter().zip(expected) {
                assert!(g.contains(e), "{g} lacks {e}");
            }
        };
        let long = function("long", MAX_FN_LINES);
        check_one(
            "crates/tc-a/src/a.rs",
            long.clone(),
            &["fn long has 84 lines"],
        );
        check_one("crates/tc-a/src/a.rs", function("short", 76), &[]);
        // Test code and test machinery are not product.
        check_one("crates/tc-a/src/tests.rs", long.clone(), &[]);
        check_one("crates/tc-a/src/a_tests.rs", long.clone(), &[]);
        check_one("crates/tc-a/tests/a.rs", long.clone(), &[]);
        check_one("crates/tc-testkit/src/a.rs", long.clone(), &[]);
        let indented: String = long.lines().map(|l| format!("    {l}\n")).collect();
        let in_tests = format!("//! A.\n#[cfg(test)]\nmod tests {{\n{indented}}}\n");
        check_one("crates/tc-a/src/a.rs", in_tests.clone(), &[]);
        let big = "x();\n".repeat(MAX_FILE_LINES + 1);
        check_one("crates/tc-a/src/a.rs", big.clone(), &["has 701 lines"]);
        let big_tests = format!("{}{in_tests}", "x();\n".repeat(MAX_FILE_LINES - 2));
        check_one("crates/tc-a/src/a.rs", big_tests, &[]);
    }
}
