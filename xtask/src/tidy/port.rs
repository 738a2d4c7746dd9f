//! The store port in parts, kept so: each file of tc-model's `store/` holds
//! at most one part (a trait), every part and every one of its methods is
//! in the one list the forwarders are written from (`port_methods!` in
//! store/methods.rs), and a part is implemented by hand only by a store
//! (an adapter's `store/` file of that part, or the memory store): any
//! other impl of a part would be a forwarder the list does not reach.
//!
//! The text is read line by line, not parsed: a part trait is a line
//! starting `pub trait Name` in a file of `crates/tc-model/src/store/`;
//! its methods are the lines starting `fn name(` up to the trait's
//! closing `}` at the start of a line.

use std::path::Path;

use super::source::Source;

/// Where the parts live, and the list of their methods.
const PARTS_DIR: &str = "crates/tc-model/src/store/";
const METHODS: &str = "crates/tc-model/src/store/methods.rs";

/// The files that may implement a part by hand: each adapter's file of
/// that part (`{}` is the part's file stem) and the memory store.
const IMPLEMENTERS: [&str; 3] = [
    "crates/tc-store/src/store/{}.rs",
    "crates/tc-store-pg/src/store/{}.rs",
    "crates/tc-testkit/src/memory_store.rs",
];

/// A part of the port: its trait, its file's stem, its methods.
#[derive(Debug, PartialEq, Eq)]
struct Part {
    name: String,
    stem: String,
    methods: Vec<String>,
}

/// The broken rules, as `path:line: what`.
pub(crate) fn check(sources: &[Source]) -> Vec<String> {
    let mut violations = Vec::new();
    let mut parts = Vec::new();
    for source in sources.iter().filter(|s| in_parts_dir(&s.path)) {
        let found = parts_of(source);
        if found.len() > 1 {
            violations.push(format!(
                "{}: holds {} parts of the port, one a file",
                source.path.display(),
                found.len()
            ));
        }
        parts.extend(found);
    }
    let Some(list) = sources.iter().find(|s| s.path.ends_with(METHODS)) else {
        return vec![format!("{METHODS}: missing: the port's list of methods")];
    };
    for part in &parts {
        if !list
            .text
            .contains(&format!("$crate::store::{} [", part.name))
        {
            violations.push(format!(
                "{METHODS}: part `{}` is not in the list",
                part.name
            ));
        }
        for method in &part.methods {
            if !list.text.contains(&format!("fn {method}(")) {
                violations.push(format!(
                    "{METHODS}: `{}::{method}` is not in the list",
                    part.name
                ));
            }
        }
    }
    for source in sources {
        violations.extend(hand_written_impls(source, &parts));
    }
    violations
}

fn in_parts_dir(path: &Path) -> bool {
    let path = path.to_string_lossy().replace('\\', "/");
    path.contains(PARTS_DIR) && !path.ends_with("methods.rs")
}

/// The part traits declared in `source`, with their methods.
fn parts_of(source: &Source) -> Vec<Part> {
    let stem = source
        .path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut parts: Vec<Part> = Vec::new();
    let mut inside = false;
    for line in source.text.lines() {
        if let Some(rest) = line.strip_prefix("pub trait ") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            parts.push(Part {
                name,
                stem: stem.clone(),
                methods: Vec::new(),
            });
            inside = true;
        } else if inside && line.starts_with('}') {
            inside = false;
        } else if inside && let Some(rest) = line.trim_start().strip_prefix("fn ") {
            let method: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if let Some(part) = parts.last_mut() {
                part.methods.push(method);
            }
        }
    }
    parts
}

/// The impls of a part in `source` that are not a store's own.
fn hand_written_impls(source: &Source, parts: &[Part]) -> Vec<String> {
    let path = source.path.to_string_lossy().replace('\\', "/");
    let mut violations = Vec::new();
    for (index, line) in source.text.lines().enumerate() {
        let Some(part) = implemented_part(line, parts) else {
            continue;
        };
        let allowed = IMPLEMENTERS
            .iter()
            .any(|pattern| path.ends_with(&pattern.replace("{}", &part.stem)));
        if !allowed {
            violations.push(format!(
                "{}:{}: implements the port's part `{}` by hand (a forwarder is written from \
                 `port_methods!`; a store implements it in its `store/{}.rs`)",
                source.path.display(),
                index + 1,
                part.name,
                part.stem
            ));
        }
    }
    violations
}

/// The part `line` implements (`impl Part for T`, `impl<..> path::Part for
/// T`), if any.
fn implemented_part<'p>(line: &str, parts: &'p [Part]) -> Option<&'p Part> {
    let rest = line.trim_start().strip_prefix("impl")?;
    let rest = if rest.starts_with('<') {
        &rest[rest.find('>')? + 1..]
    } else {
        rest
    };
    let (trait_path, _) = rest.trim_start().split_once(" for ")?;
    let name = trait_path.rsplit("::").next()?.trim();
    parts.iter().find(|part| part.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(path: &str, text: &str) -> Source {
        Source::new(path, text)
    }

    const PART: &str = "//! A part.\npub trait Tasks: Send {\n    /// Gets.\n    fn get(\n        &self,\n    );\n    fn list(&self);\n}\n";
    const LIST: &str =
        "$crate::store::Tasks [] {\n Get => fn get(&self);\n List => fn list(&self);\n}";

    /// Each row: the files besides the part, and how many rules they break.
    #[test]
    fn the_port_s_parts_are_listed_and_implemented_only_by_stores() {
        let check_row = |extra: &[(&str, &str)], list: &str, broken: usize| {
            let mut sources = vec![
                source("crates/tc-model/src/store/tasks.rs", PART),
                source(METHODS, list),
            ];
            sources.extend(extra.iter().map(|(p, t)| source(p, t)));
            let got = check(&sources);
            assert_eq!(got.len(), broken, "{extra:?} {list:?}: {got:?}");
        };
        check_row(&[], LIST, 0);
        check_row(&[], "$crate::store::Tasks [] { Get => fn get(&self); }", 1);
        check_row(&[], "", 3);
        let store = "impl Tasks for SqliteStore {\n}";
        check_row(&[("crates/tc-store/src/store/tasks.rs", store)], LIST, 0);
        check_row(&[("crates/tc-store/src/store/work.rs", store)], LIST, 1);
        let generic = "impl<S: TaskStore> tc_model::store::Tasks for Wrapper<S> {";
        check_row(&[("crates/tc-http/tests/http/wrap.rs", generic)], LIST, 1);
        check_row(
            &[("crates/tc-testkit/src/memory_store.rs", generic)],
            LIST,
            0,
        );
        let two = "pub trait Tasks {\n}\npub trait More {\n    fn more(&self);\n}\n";
        check_row(&[("crates/tc-model/src/store/two.rs", two)], LIST, 3);
    }
}
