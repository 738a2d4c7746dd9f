//! No issue numbers in code comments: why a line is as it is belongs in the
//! comment itself, and which issue asked for it in the commit message and
//! docs/performance.md. An issue's number read out of context says nothing to the next reader and goes stale when issues are closed.
//!
//! A comment is the text after the first `//` on a line outside a string
//! literal (doc comments included); the text is read line by line, not
//! parsed: a raw string or a string spanning lines is not followed.

use super::source::Source;

/// Comment lines that name an issue by number, as `path:line: text`.
pub(crate) fn check(sources: &[Source]) -> Vec<String> {
    let mut violations = Vec::new();
    for source in sources {
        for (index, line) in source.text.lines().enumerate() {
            let Some(start) = comment_start(line) else {
                continue;
            };
            if names_an_issue(&line[start..]) {
                violations.push(format!(
                    "{}:{}: a comment names an issue by number (say why instead; the issue \
                     goes in the commit message): {}",
                    source.path.display(),
                    index + 1,
                    line.trim()
                ));
            }
        }
    }
    violations
}

/// Where the comment on `line` starts: the first `//` outside a `"…"`
/// string literal (escapes followed).
fn comment_start(line: &str) -> Option<usize> {
    let bytes = line.as_bytes();
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_string => i += 1,
            b'"' => in_string = !in_string,
            b'/' if !in_string && bytes.get(i + 1) == Some(&b'/') => return Some(i),
            _ => {}
        }
        i += 1;
    }
    None
}

/// Whether `comment` holds "issue" or "issues" (any case) followed by a
/// space, an optional `#`, and a digit.
fn names_an_issue(comment: &str) -> bool {
    let lower = comment.to_ascii_lowercase();
    lower.match_indices("issue").any(|(at, _)| {
        let before_is_word = lower[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric());
        let rest = lower[at + "issue".len()..].trim_start_matches('s');
        let rest = rest.strip_prefix(' ').unwrap_or("");
        let rest = rest.strip_prefix('#').unwrap_or(rest);
        !before_is_word && rest.starts_with(|c: char| c.is_ascii_digit())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(comment: &str, names: bool) {
        assert_eq!(names_an_issue(comment), names, "{comment:?}");
    }

    #[test]
    fn issue_numbers_are_found_in_any_spelling() {
        check("// (issue 40 item 1)", true);
        check("/// Issue 37: every spelling", true);
        check("//! see issues 26 and 38", true);
        check("// issue #12", true);
        check("// an issue with the lease", false);
        check("// issue: the lease", false);
        check("// reissue 3 tokens", false);
        check("// the issuer 12", false);
    }

    #[test]
    fn a_comment_starts_outside_string_literals() {
        assert_eq!(comment_start(r#"f("// no") // yes"#), Some(11));
        assert_eq!(comment_start(r#"f("\" // no")"#), None);
        assert_eq!(comment_start("/// doc"), Some(0));
        assert_eq!(comment_start("let a = 1;"), None);
    }

    #[test]
    fn a_violation_names_file_and_line() {
        let sources = [Source {
            path: "crates/x/src/a.rs".into(),
            text: "//! A.\nfn f() {} // issue 9\n".into(),
        }];
        let found = super::check(&sources);
        assert_eq!(found.len(), 1);
        assert!(found[0].starts_with("crates/x/src/a.rs:2:"), "{found:?}");
    }
}
