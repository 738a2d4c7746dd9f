//! Repository-wide rules checked from `cargo metadata`: the hexagon's shape.
//!
//! - Domain crates (tc-model, tc-retry) pull in no runtime, network or
//!   database crate, not even transitively.
//! - tc-retry depends on no workspace crate: other projects reuse it.
//! - No adapter depends on another adapter.
//! - tc-trace (the OpenTelemetry glue tc-http and tc-worker share) and
//!   tc-downstream depend on no workspace crate but tc-model.
//!
//! And, from `cargo tree` (features resolved as when the crate is built
//! alone, dev-dependencies left out):
//! - tc-worker links no HTTP client, TLS or SQLite crate, and no
//!   OpenTelemetry SDK or exporter.
//! - tc-trace links no runtime, network or database crate, and no
//!   OpenTelemetry SDK or exporter: the API alone.
//! - A release tc-server contains no test machinery: no test-support crate,
//!   no test or bench feature.
//!
//! And, from `cargo metadata`'s targets: the product crates build no binary
//! but tc-server (test helpers are test code).
//!
//! And, from the source text ([`source`]): every module has a `//!` doc, and
//! no `testing` module or `#[doc(hidden)]` item is compiled into a product
//! crate without one of its test-only features.
//!
//! And, from rustdoc ([`doc_links`]): no doc link leads nowhere.
//!
//! And, from the source text ([`sizes`]): no product file over 700 lines
//! and no product function over 80, tests apart, but for a short list
//! each with its reason.
//!
//! And, from the source text ([`comments`]): no code comment names an
//! issue by number.
//!
//! And, from the source text ([`port`]): the store port is in parts, one a
//! file, all in the forwarders' one list, implemented by hand only by the
//! stores.

mod comments;
mod doc_links;
mod port;
mod sizes;
mod source;

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
    // tc-model keeps the W3C trace context's rules; the OpenTelemetry glue
    // is tc-trace's.
    "opentelemetry",
];
/// Crates that must stand alone in the workspace.
const STANDALONE: &[&str] = &["tc-retry", "tc-seal"];
/// Adapters: they depend on ports, never on each other.
const ADAPTERS: &[&str] = &["tc-store", "tc-store-pg", "tc-downstream", "tc-http"];
/// Crates with the only workspace crates each may depend on: the shared
/// glue, and the downstream adapter, which takes the domain's vocabulary
/// (the HTTP method) and nothing else.
const GLUE: &[(&str, &[&str])] = &[
    ("tc-trace", &["tc-model"]),
    ("tc-downstream", &["tc-model"]),
];

/// Crates whose normal dependencies, built alone, must not contain these.
const LEAN: &[(&str, &[&str])] = &[("tc-worker", LEAN_WORKER), ("tc-trace", LEAN_TRACE)];
/// What the worker must not link: it knows the ports, never an adapter's
/// client, TLS or database.
const LEAN_WORKER: &[&str] = &[
    "hyper",
    "hyper-util",
    "hyper-rustls",
    "rustls",
    "tokio-rustls",
    "rusqlite",
    "libsqlite3-sys",
    "opentelemetry_sdk",
    "opentelemetry-otlp",
];
/// What the OpenTelemetry glue must not link: the API is all it needs; the
/// SDK, the exporter and the runtime are tc-server's.
const LEAN_TRACE: &[&str] = &[
    "tokio",
    "hyper",
    "hyper-util",
    "rusqlite",
    "libsqlite3-sys",
    "opentelemetry_sdk",
    "opentelemetry-otlp",
];
/// The product: what ships, built alone in release.
const PRODUCT: &str = "tc-server";
/// Packages that exist for tests only.
const TEST_ONLY_PACKAGES: &[&str] = &["tc-testkit"];
/// Features (package, feature) that exist for tests and benchmarks only.
const TEST_ONLY_FEATURES: &[(&str, &str)] = &[
    ("tc-store", "raw"),
    ("tc-store-pg", "testing"),
    ("tokio", "test-util"),
];
/// The only binaries the workspace's product crates may build.
const PRODUCT_BINARIES: &[&str] = &["tc-server"];

/// One crate's resolved normal dependency tree: every package in it with
/// the features enabled on it.
pub(crate) type Tree = BTreeMap<String, BTreeSet<String>>;

/// The normal (non-dev) dependency graph, by package name.
pub(crate) type Graph = BTreeMap<String, BTreeSet<String>>;

pub(crate) fn run() -> Result<(), String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new("."));
    let (crates, violations) = all_violations(root)?;
    if violations.is_empty() {
        println!("tidy: dependency and source rules hold for {crates} crates");
        Ok(())
    } else {
        Err(format!("tidy rules broken:\n  {}", violations.join("\n  ")))
    }
}

/// How many workspace crates were checked, and every broken rule.
fn all_violations(root: &Path) -> Result<(usize, Vec<String>), String> {
    let meta = load_metadata(root)?;
    let graph = parse_graph(&meta)?;
    let workspace: BTreeSet<String> = graph
        .keys()
        .filter(|n| n.starts_with("tc-"))
        .cloned()
        .collect();
    let mut violations = check_rules(&graph, &workspace);
    for (krate, forbidden) in LEAN {
        violations.extend(check_lean(krate, forbidden, &load_tree(root, krate)?));
    }
    violations.extend(check_product(&load_tree(root, PRODUCT)?));
    violations.extend(check_binaries(&parse_binaries(&meta)?));
    let sources = source::load_all(root)?;
    violations.extend(source::check_module_docs(&sources));
    violations.extend(sizes::check(&sources));
    violations.extend(comments::check(&sources));
    violations.extend(port::check(&sources));
    violations.extend(doc_links::check(root)?);
    for krate in workspace
        .iter()
        .filter(|k| !TEST_ONLY_PACKAGES.contains(&k.as_str()))
    {
        let features: Vec<&str> = TEST_ONLY_FEATURES
            .iter()
            .filter(|(p, _)| p == krate)
            .map(|(_, f)| *f)
            .collect();
        violations.extend(source::check_test_machinery(krate, &sources, &features));
    }
    Ok((workspace.len(), violations))
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
    for (glue, allowed) in GLUE {
        for dep in graph.get(*glue).into_iter().flatten() {
            if workspace.contains(dep) && !allowed.contains(&dep.as_str()) {
                violations.push(format!(
                    "crate {glue} depends on {dep}; it may depend on {allowed:?} only"
                ));
            }
        }
    }
    violations
}

/// What `krate`'s tree holds of the `forbidden` crates.
pub(crate) fn check_lean(krate: &str, forbidden: &[&str], tree: &Tree) -> Vec<String> {
    forbidden
        .iter()
        .filter(|dep| tree.contains_key(**dep))
        .map(|dep| format!("{krate} links {dep} in its normal dependencies"))
        .collect()
}

/// Test machinery in the product's tree: test-only packages or features.
pub(crate) fn check_product(tree: &Tree) -> Vec<String> {
    let packages = TEST_ONLY_PACKAGES
        .iter()
        .filter(|p| tree.contains_key(**p))
        .map(|p| format!("{PRODUCT} contains the test-only crate {p}"));
    let features = TEST_ONLY_FEATURES
        .iter()
        .filter(|(p, f)| tree.get(*p).is_some_and(|on| on.contains(*f)))
        .map(|(p, f)| format!("{PRODUCT} contains {p} with its test-only feature {f:?}"));
    packages.chain(features).collect()
}

/// Binaries of workspace crates (`tc-*`) other than [`PRODUCT_BINARIES`].
pub(crate) fn check_binaries(binaries: &[(String, String)]) -> Vec<String> {
    binaries
        .iter()
        .filter(|(package, bin)| {
            package.starts_with("tc-") && !PRODUCT_BINARIES.contains(&bin.as_str())
        })
        .map(|(package, bin)| format!("{package} builds the binary {bin}, which would ship"))
        .collect()
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

/// Runs cargo with `args` in `workspace_root` and returns its stdout.
fn cargo(workspace_root: &Path, args: &[&str]) -> Result<Vec<u8>, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(args)
        .current_dir(workspace_root)
        .output()
        .map_err(|e| format!("running cargo {}: {e}", args.join(" ")))?;
    if !output.status.success() {
        return Err(format!(
            "cargo {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(output.stdout)
}

fn load_metadata(workspace_root: &Path) -> Result<serde_json::Value, String> {
    let out = cargo(
        workspace_root,
        &["metadata", "--format-version", "1", "--locked"],
    )?;
    serde_json::from_slice(&out).map_err(|e| format!("parsing cargo metadata: {e}"))
}

/// `krate`'s normal dependency tree with features resolved as `cargo build
/// -p krate` resolves them (`cargo tree -e normal`).
pub(crate) fn load_tree(workspace_root: &Path, krate: &str) -> Result<Tree, String> {
    let out = cargo(
        workspace_root,
        &[
            "tree", "--locked", "-p", krate, "-e", "normal", "--prefix", "none", "-f", "{p}|{f}",
        ],
    )?;
    Ok(parse_tree(&String::from_utf8_lossy(&out)))
}

/// Parses `cargo tree --prefix none -f "{p}|{f}"`: one `name vX (path)|f1,f2`
/// line per package, ` (*)` marking a repeat.
fn parse_tree(text: &str) -> Tree {
    let mut tree = Tree::new();
    for line in text.lines() {
        let Some((package, features)) = line.split_once('|') else {
            continue;
        };
        let Some(name) = package.split_whitespace().next() else {
            continue;
        };
        let on = tree.entry(name.to_owned()).or_default();
        let features = features.trim_end_matches(" (*)").trim();
        on.extend(
            features
                .split(',')
                .filter(|f| !f.is_empty())
                .map(str::to_owned),
        );
    }
    tree
}

/// Every (package, binary) of the workspace's members.
fn parse_binaries(meta: &serde_json::Value) -> Result<Vec<(String, String)>, String> {
    let members: BTreeSet<&str> = meta["workspace_members"]
        .as_array()
        .ok_or("cargo metadata has no workspace_members")?
        .iter()
        .filter_map(|m| m.as_str())
        .collect();
    let mut binaries = Vec::new();
    for package in meta["packages"].as_array().into_iter().flatten() {
        let (Some(id), Some(name)) = (package["id"].as_str(), package["name"].as_str()) else {
            continue;
        };
        if !members.contains(id) {
            continue;
        }
        for target in package["targets"].as_array().into_iter().flatten() {
            let is_bin = target["kind"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k.as_str() == Some("bin"));
            if let (true, Some(bin)) = (is_bin, target["name"].as_str()) {
                binaries.push((name.to_owned(), bin.to_owned()));
            }
        }
    }
    Ok(binaries)
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
                ("tc-http", &["tc-model", "tc-trace", "hyper"]),
                (
                    "tc-worker",
                    &["tc-model", "tc-retry", "tc-trace", "tc-downstream", "tokio"],
                ),
                ("tc-trace", &["tc-model", "opentelemetry"]),
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
            &[("tc-model", &["opentelemetry"])],
            &["tc-model is a domain crate but depends on opentelemetry"],
        );
        check(
            &[
                ("tc-trace", &["tc-model", "tc-worker"]),
                ("tc-model", &[]),
                ("tc-worker", &[]),
            ],
            &["crate tc-trace depends on tc-worker"],
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

    fn tree(packages: &[(&str, &[&str])]) -> Tree {
        packages
            .iter()
            .map(|(p, fs)| (p.to_string(), fs.iter().map(|f| f.to_string()).collect()))
            .collect()
    }

    /// Each row: a lean crate, what it must not link, its tree, and the
    /// violations.
    #[test]
    fn a_lean_crate_linking_what_it_must_not_is_caught() {
        let check =
            |krate: &str, forbidden: &[&str], packages: &[(&str, &[&str])], expected: &[&str]| {
                assert_eq!(check_lean(krate, forbidden, &tree(packages)), expected);
            };
        let worker_clean: &[(&str, &[&str])] = &[
            ("tc-worker", &[]),
            ("tokio", &["rt"]),
            ("tc-downstream", &[]),
            ("opentelemetry", &["trace"]),
        ];
        check("tc-worker", LEAN_WORKER, worker_clean, &[]);
        check(
            "tc-worker",
            LEAN_WORKER,
            &[
                ("tc-worker", &[]),
                ("tc-downstream", &["hyper-client"]),
                ("hyper", &["client"]),
                ("rustls", &[]),
                ("libsqlite3-sys", &["bundled"]),
                ("opentelemetry_sdk", &["trace"]),
            ],
            &[
                "tc-worker links hyper in its normal dependencies",
                "tc-worker links rustls in its normal dependencies",
                "tc-worker links libsqlite3-sys in its normal dependencies",
                "tc-worker links opentelemetry_sdk in its normal dependencies",
            ],
        );
        let trace_clean: &[(&str, &[&str])] = &[
            ("tc-trace", &[]),
            ("tc-model", &[]),
            ("opentelemetry", &["trace"]),
        ];
        check("tc-trace", LEAN_TRACE, trace_clean, &[]);
        check(
            "tc-trace",
            LEAN_TRACE,
            &[
                ("tc-trace", &[]),
                ("opentelemetry_sdk", &["trace"]),
                ("tokio", &["rt"]),
            ],
            &[
                "tc-trace links tokio in its normal dependencies",
                "tc-trace links opentelemetry_sdk in its normal dependencies",
            ],
        );
    }

    #[test]
    fn test_machinery_in_the_product_is_caught() {
        let clean = tree(&[
            ("tc-server", &[]),
            ("tc-store", &[]),
            ("tc-downstream", &["hyper-client"]),
            ("tokio", &["rt", "time"]),
        ]);
        assert_eq!(check_product(&clean), Vec::<String>::new());
        let dirty = tree(&[
            ("tc-server", &[]),
            ("tc-testkit", &[]),
            ("tc-store", &["raw"]),
            ("tokio", &["rt", "test-util"]),
        ]);
        assert_eq!(
            check_product(&dirty),
            [
                "tc-server contains the test-only crate tc-testkit",
                "tc-server contains tc-store with its test-only feature \"raw\"",
                "tc-server contains tokio with its test-only feature \"test-util\"",
            ]
        );
    }

    #[test]
    fn a_helper_binary_in_a_product_crate_is_caught() {
        let bins = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter()
                .map(|(p, b)| (p.to_string(), b.to_string()))
                .collect()
        };
        let clean = bins(&[("tc-server", "tc-server"), ("xtask", "xtask")]);
        assert_eq!(check_binaries(&clean), Vec::<String>::new());
        let dirty = bins(&[
            ("tc-server", "tc-server"),
            ("tc-store", "tc-store-crash-child"),
        ]);
        assert_eq!(
            check_binaries(&dirty),
            ["tc-store builds the binary tc-store-crash-child, which would ship"]
        );
    }

    #[test]
    fn parses_cargo_tree_lines_and_repeats() {
        let text = "tc-worker v0.1.0 (/w/crates/tc-worker)|\n\
                    tokio v1.54.1|rt,time\n\
                    tokio v1.54.1|rt,time (*)\n\
                    uuid v1.29.3|\n";
        assert_eq!(
            parse_tree(text),
            tree(&[
                ("tc-worker", &[]),
                ("tokio", &["rt", "time"]),
                ("uuid", &[])
            ])
        );
    }

    #[test]
    fn parses_the_binaries_of_workspace_members_only() {
        let meta = serde_json::json!({
            "workspace_members": ["a 1"],
            "packages": [
                {"id": "a 1", "name": "tc-store", "targets": [
                    {"name": "tc_store", "kind": ["lib"]},
                    {"name": "helper", "kind": ["bin"]},
                ]},
                {"id": "b 1", "name": "outside", "targets": [
                    {"name": "tool", "kind": ["bin"]},
                ]},
            ],
        });
        assert_eq!(
            parse_binaries(&meta).unwrap(),
            [("tc-store".to_string(), "helper".to_string())]
        );
    }

    #[test]
    fn the_real_workspace_obeys_the_rules() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let (crates, violations) = all_violations(root).unwrap();
        assert!(crates >= 8, "metadata lists the workspace: {crates} crates");
        assert!(violations.is_empty(), "{violations:#?}");
    }
}
