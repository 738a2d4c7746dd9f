//! Repository-wide rules checked from `cargo metadata`: the hexagon's shape.
//!
//! - Domain crates (tc-model, tc-retry) pull in no runtime, network or
//!   database crate, not even transitively.
//! - tc-retry depends on no workspace crate: other projects reuse it.
//! - No adapter depends on another adapter.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// Crates that must stay pure.
const DOMAIN: &[&str] = &["tc-model", "tc-retry"];
/// Crates no domain crate may reach.
const FORBIDDEN_IN_DOMAIN: &[&str] = &[
    "tokio",
    "hyper",
    "hyper-util",
    "rusqlite",
    "libsqlite3-sys",
    "mio",
];
/// Crates that must stand alone in the workspace.
const STANDALONE: &[&str] = &["tc-retry"];
/// Adapters: they depend on ports, never on each other.
const ADAPTERS: &[&str] = &["tc-store", "tc-downstream", "tc-http"];

/// The normal (non-dev) dependency graph, by package name.
pub(crate) type Graph = BTreeMap<String, BTreeSet<String>>;

pub(crate) fn run() -> Result<(), String> {
    let graph = load_graph(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap_or(Path::new(".")),
    )?;
    let workspace: BTreeSet<String> = graph
        .keys()
        .filter(|n| n.starts_with("tc-"))
        .cloned()
        .collect();
    let violations = check_rules(&graph, &workspace);
    if violations.is_empty() {
        println!("tidy: dependency rules hold for {} crates", workspace.len());
        Ok(())
    } else {
        Err(format!(
            "dependency rules broken:\n  {}",
            violations.join("\n  ")
        ))
    }
}

/// Every broken rule, as a readable line; empty when the graph is clean.
pub(crate) fn check_rules(graph: &Graph, workspace: &BTreeSet<String>) -> Vec<String> {
    let mut violations = Vec::new();
    for &krate in DOMAIN {
        for dep in reachable(graph, krate) {
            if FORBIDDEN_IN_DOMAIN.contains(&dep.as_str()) {
                violations.push(format!("{krate} is a domain crate but depends on {dep}"));
            }
        }
    }
    for &krate in STANDALONE {
        for dep in graph.get(krate).into_iter().flatten() {
            if workspace.contains(dep) {
                violations.push(format!(
                    "{krate} must be reusable alone but depends on {dep}"
                ));
            }
        }
    }
    for &adapter in ADAPTERS {
        for dep in graph.get(adapter).into_iter().flatten() {
            if ADAPTERS.contains(&dep.as_str()) {
                violations.push(format!("adapter {adapter} depends on adapter {dep}"));
            }
        }
    }
    violations
}

fn reachable(graph: &Graph, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_owned()];
    while let Some(name) = todo.pop() {
        for dep in graph.get(&name).into_iter().flatten() {
            if seen.insert(dep.clone()) {
                todo.push(dep.clone());
            }
        }
    }
    seen
}

/// Reads the resolved graph with `cargo metadata`, keeping normal and build
/// dependencies (dev-dependencies do not ship).
pub(crate) fn load_graph(workspace_root: &Path) -> Result<Graph, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(workspace_root)
        .output()
        .map_err(|e| format!("running cargo metadata: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let meta: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("parsing cargo metadata: {e}"))?;
    parse_graph(&meta)
}

fn parse_graph(meta: &serde_json::Value) -> Result<Graph, String> {
    let missing = |what: &str| format!("cargo metadata has no {what}");
    let packages = meta["packages"]
        .as_array()
        .ok_or_else(|| missing("packages"))?;
    let names: BTreeMap<&str, &str> = packages
        .iter()
        .filter_map(|p| Some((p["id"].as_str()?, p["name"].as_str()?)))
        .collect();
    let nodes = meta["resolve"]["nodes"]
        .as_array()
        .ok_or_else(|| missing("resolve.nodes"))?;
    let mut graph = Graph::new();
    for node in nodes {
        let id = node["id"].as_str().ok_or_else(|| missing("node id"))?;
        let name = names.get(id).ok_or_else(|| missing("package for a node"))?;
        let deps = graph.entry((*name).to_owned()).or_default();
        for dep in node["deps"].as_array().into_iter().flatten() {
            let shipped = dep["dep_kinds"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k["kind"].as_str() != Some("dev"));
            if !shipped {
                continue;
            }
            if let Some(dep_name) = dep["pkg"].as_str().and_then(|p| names.get(p)) {
                deps.insert((*dep_name).to_owned());
            }
        }
    }
    Ok(graph)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &[&str])]) -> Graph {
        edges
            .iter()
            .map(|(k, deps)| (k.to_string(), deps.iter().map(|d| d.to_string()).collect()))
            .collect()
    }

    fn workspace_of(g: &Graph) -> BTreeSet<String> {
        g.keys().filter(|n| n.starts_with("tc-")).cloned().collect()
    }

    /// Checks the rules on a synthetic graph; `expected` lists fragments that
    /// must each appear in exactly one violation, and nothing else may fail.
    fn check(edges: &[(&str, &[&str])], expected: &[&str]) {
        let g = graph(edges);
        let got = check_rules(&g, &workspace_of(&g));
        assert_eq!(got.len(), expected.len(), "violations: {got:#?}");
        for fragment in expected {
            assert!(
                got.iter().any(|v| v.contains(fragment)),
                "{fragment:?} not in {got:#?}"
            );
        }
    }

    #[test]
    fn a_clean_graph_passes() {
        check(
            &[
                ("tc-model", &["thiserror"]),
                ("tc-retry", &["fastrand"]),
                ("tc-store", &["tc-model", "rusqlite"]),
                ("tc-downstream", &["hyper", "tokio"]),
                ("tc-http", &["tc-model", "tc-worker", "hyper"]),
                (
                    "tc-worker",
                    &["tc-model", "tc-retry", "tc-downstream", "tokio"],
                ),
                (
                    "tc-server",
                    &["tc-store", "tc-http", "tc-worker", "tc-downstream"],
                ),
            ],
            &[],
        );
    }

    #[test]
    fn each_broken_rule_is_caught() {
        // Domain reaching tokio through an intermediate crate.
        check(
            &[("tc-model", &["helper"]), ("helper", &["tokio"])],
            &["tc-model is a domain crate but depends on tokio"],
        );
        check(
            &[("tc-retry", &["rusqlite"])],
            &["tc-retry is a domain crate but depends on rusqlite"],
        );
        check(
            &[("tc-retry", &["tc-model"]), ("tc-model", &[])],
            &["tc-retry must be reusable alone"],
        );
        check(
            &[
                ("tc-http", &["tc-store"]),
                ("tc-store", &["tc-downstream"]),
                ("tc-downstream", &[]),
            ],
            &[
                "adapter tc-http depends on adapter tc-store",
                "adapter tc-store depends on adapter tc-downstream",
            ],
        );
    }

    #[test]
    fn parses_cargo_metadata_shape_and_skips_dev_dependencies() {
        let meta = serde_json::json!({
            "packages": [
                {"id": "a 1", "name": "tc-model"},
                {"id": "b 1", "name": "tokio"},
                {"id": "c 1", "name": "tempfile"},
            ],
            "resolve": {"nodes": [
                {"id": "a 1", "deps": [
                    {"pkg": "b 1", "dep_kinds": [{"kind": null}]},
                    {"pkg": "c 1", "dep_kinds": [{"kind": "dev"}]},
                ]},
                {"id": "b 1", "deps": []},
                {"id": "c 1", "deps": []},
            ]}
        });
        let g = parse_graph(&meta).unwrap();
        assert_eq!(g["tc-model"], BTreeSet::from(["tokio".to_string()]));
    }

    #[test]
    fn the_real_workspace_obeys_the_rules() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let g = load_graph(root).unwrap();
        assert!(g.contains_key("tc-model"), "metadata lists the workspace");
        let violations = check_rules(&g, &workspace_of(&g));
        assert!(violations.is_empty(), "{violations:#?}");
    }
}
