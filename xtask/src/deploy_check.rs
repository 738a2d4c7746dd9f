//! `cargo xtask deploy-check`: the service files in `deploy/` say what the
//! README promises. The systemd unit has its hardening and stop settings
//! and passes `systemd-analyze verify` without a warning; the Kubernetes
//! example has its probes and its Prometheus scrape on the admin listener,
//! its token and database URL from the Secret, a termination grace covering
//! the preStop sleep and the shutdown grace, a disruption budget selecting
//! its pods, and the image `cargo xtask image` makes at tc-server's
//! version. Both sit behind a TLS-terminating proxy they trust
//! (`--trusted-proxy`); in Kubernetes an Ingress with TLS sends to the API's
//! Service, never to the admin listener, which has a Service of its own
//! for Prometheus.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_json::Value;

/// Runs every check; the message lists every failure.
pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let skip_systemd = args.iter().any(|a| a == "--no-systemd-analyze");
    if let Some(other) = args.iter().find(|a| *a != "--no-systemd-analyze") {
        return Err(format!("deploy-check: unknown argument {other:?}"));
    }
    let root = crate::harness::workspace_root();
    let mut failures = Vec::new();
    let unit = read(&root.join(UNIT))?;
    failures.extend(check_unit(&unit));
    if !skip_systemd && let Err(e) = systemd_analyze(&unit) {
        failures.push(e);
    }
    let manifests = read(&root.join(KUBERNETES))?;
    let version = crate::image::version(&read(&root.join("crates/tc-server/Cargo.toml"))?)?;
    match parse_documents(&manifests) {
        Ok(documents) => {
            failures.extend(check_kubernetes(&documents));
            failures.extend(check_traffic(&documents));
            failures.extend(check_image_tag(&documents, &version));
        }
        Err(e) => failures.push(e),
    }
    if failures.is_empty() {
        println!("deploy-check: {UNIT} and {KUBERNETES} are fine");
        Ok(())
    } else {
        Err(format!("deploy-check:\n- {}", failures.join("\n- ")))
    }
}

const UNIT: &str = "deploy/systemd/taskcenter.service";
const KUBERNETES: &str = "deploy/kubernetes/taskcenter.yaml";

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The unit's `[Service]` settings as (key, value), continuation lines
/// joined.
fn service_settings(unit: &str) -> Vec<(String, String)> {
    let joined = unit.replace("\\\n", " ");
    let mut section = "";
    let mut settings = Vec::new();
    for line in joined.lines().map(str::trim) {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if line.starts_with('[') {
            section = line;
            continue;
        }
        if section == "[Service]"
            && let Some((key, value)) = line.split_once('=')
        {
            settings.push((key.trim().to_owned(), value.trim().to_owned()));
        }
    }
    settings
}

/// The milliseconds of `--shutdown-grace-ms` in a command line or args.
fn shutdown_grace_ms<'a>(words: impl Iterator<Item = &'a str>) -> Option<u64> {
    let words: Vec<&str> = words.collect();
    words.iter().enumerate().find_map(|(i, w)| {
        if let Some(v) = w.strip_prefix("--shutdown-grace-ms=") {
            return v.parse().ok();
        }
        (*w == "--shutdown-grace-ms")
            .then(|| words.get(i + 1).and_then(|v| v.parse().ok()))
            .flatten()
    })
}

fn check_unit(unit: &str) -> Vec<String> {
    let settings = service_settings(unit);
    let get = |key: &str| {
        settings
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let mut failures = Vec::new();
    let mut want = |key: &str, value: &str| {
        if get(key) != Some(value) {
            failures.push(format!("{UNIT}: {key}={value} (found {:?})", get(key)));
        }
    };
    // No sd_notify in tc-server: Type=notify would make systemd wait forever.
    want("Type", "simple");
    want("Restart", "on-failure");
    want("DynamicUser", "yes");
    want("StateDirectory", "taskcenter");
    want("ProtectSystem", "strict");
    want("NoNewPrivileges", "yes");
    want("KillSignal", "SIGTERM");
    let exec = get("ExecStart").unwrap_or_default();
    if !exec.contains("--db /var/lib/taskcenter/") {
        failures.push(format!(
            "{UNIT}: ExecStart must keep the database in the StateDirectory"
        ));
    }
    // TLS goes in front (README): the proxy's word on https is believed.
    if !exec.contains("--trusted-proxy ") {
        failures.push(format!(
            "{UNIT}: ExecStart names the TLS proxy in front with --trusted-proxy"
        ));
    }
    let grace_ms = shutdown_grace_ms(exec.split_whitespace()).unwrap_or(10_000);
    let stop_s: u64 = get("TimeoutStopSec")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if stop_s * 1000 <= grace_ms {
        failures.push(format!(
            "{UNIT}: TimeoutStopSec ({stop_s} s) must exceed --shutdown-grace-ms ({grace_ms} ms)"
        ));
    }
    failures
}

/// `systemd-analyze verify` on a copy whose ExecStart names a program that
/// exists here (it checks that the program is executable); any warning it
/// prints fails the check (it exits 0 on unknown keys and bad values).
fn systemd_analyze(unit: &str) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
    let program: PathBuf = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let copy = unit.replace(
        "ExecStart=/usr/local/bin/tc-server",
        &format!("ExecStart={}", program.display()),
    );
    let path = dir.path().join("taskcenter.service");
    std::fs::write(&path, copy).map_err(|e| format!("{}: {e}", path.display()))?;
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .map_err(|e| {
            format!("systemd-analyze: {e} (install systemd, or pass --no-systemd-analyze)")
        })?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() && said.trim().is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{UNIT}: systemd-analyze verify ({}): {}",
            out.status,
            said.trim()
        ))
    }
}

fn parse_documents(text: &str) -> Result<Vec<Value>, String> {
    let mut documents = Vec::new();
    for document in serde_norway::Deserializer::from_str(text) {
        let value = Value::deserialize(document).map_err(|e| format!("{KUBERNETES}: {e}"))?;
        documents.push(value);
    }
    Ok(documents)
}

fn check_kubernetes(documents: &[Value]) -> Vec<String> {
    let mut failures = Vec::new();
    let mut fail = |what: String| failures.push(format!("{KUBERNETES}: {what}"));
    let of_kind = |kind: &str| documents.iter().find(|d| d["kind"] == kind);
    let (Some(secret), Some(deployment), Some(budget)) = (
        of_kind("Secret"),
        of_kind("Deployment"),
        of_kind("PodDisruptionBudget"),
    ) else {
        fail("needs a Secret, a Deployment and a PodDisruptionBudget".into());
        return failures;
    };
    let secret_name = &secret["metadata"]["name"];
    let spec = &deployment["spec"];
    if spec["replicas"].as_u64().unwrap_or(0) < 2 {
        fail("the Deployment runs several nodes (replicas >= 2)".into());
    }
    let pod = &spec["template"]["spec"];
    let labels = &spec["template"]["metadata"]["labels"];
    if spec["selector"]["matchLabels"] != *labels
        || budget["spec"]["selector"]["matchLabels"] != *labels
    {
        fail("the Deployment's and the budget's selectors match the pod's labels".into());
    }
    if budget["spec"]["maxUnavailable"].is_null() && budget["spec"]["minAvailable"].is_null() {
        fail("the PodDisruptionBudget sets maxUnavailable or minAvailable".into());
    }
    let Some(container) = pod["containers"].as_array().and_then(|c| c.first()) else {
        fail("the Deployment has a container".into());
        return failures;
    };
    let args: Vec<&str> = container["args"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let grace_ms = shutdown_grace_ms(args.iter().copied()).unwrap_or(10_000);
    let termination_s = pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(30);
    // The sleep that outlasts the load balancers' deregistration, with
    // Kubernetes' own sleep action (the image has no shell to sleep in).
    let pre_stop_s = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_u64()
        .unwrap_or(0);
    if pre_stop_s < MIN_PRE_STOP_S {
        fail(format!(
            "lifecycle.preStop.sleep.seconds ({pre_stop_s}) outlasts a load balancer's \
             deregistration (at least {MIN_PRE_STOP_S} s)"
        ));
    }
    // Then the grace for calls in flight, plus 5 s to close the store.
    if termination_s * 1000 != pre_stop_s * 1000 + grace_ms + 5_000 {
        fail(format!(
            "terminationGracePeriodSeconds ({termination_s}) is the preStop sleep ({pre_stop_s} s) \
             + --shutdown-grace-ms ({grace_ms} ms) + 5 s"
        ));
    }
    if !args.iter().any(|a| {
        a.strip_prefix("--trusted-proxy=")
            .is_some_and(|v| !v.is_empty())
    }) {
        fail("the container names the Ingress controller's network with --trusted-proxy=".into());
    }
    let admin_port = admin_port(&args);
    let port_named = |name: &Value| {
        container["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == *name || p["containerPort"] == *name)
            .and_then(|p| p["containerPort"].as_u64())
    };
    for probe in ["readinessProbe", "livenessProbe"] {
        let probe_value = &container[probe];
        let port = if probe_value["httpGet"].is_object() {
            &probe_value["httpGet"]["port"]
        } else {
            &probe_value["tcpSocket"]["port"]
        };
        if admin_port.is_none() || port_named(port) != admin_port {
            fail(format!(
                "{probe} is on the --admin-listen port ({admin_port:?})"
            ));
        }
    }
    // The scrape: /metrics on the admin listener, which asks no credential
    // (the API port's takes the token).
    let annotations = &spec["template"]["metadata"]["annotations"];
    let scrape_port = annotations["prometheus.io/port"]
        .as_str()
        .and_then(|p| p.parse::<u64>().ok());
    if annotations["prometheus.io/scrape"] != "true"
        || annotations["prometheus.io/path"] != "/metrics"
        || admin_port.is_none()
        || scrape_port != admin_port
    {
        fail(format!(
            "the pod's prometheus.io annotations scrape /metrics on the --admin-listen port \
             ({admin_port:?})"
        ));
    }
    if container["readinessProbe"]["httpGet"]["path"] != "/healthz" {
        fail("readinessProbe asks GET /healthz".into());
    }
    for (variable, key) in [("TC_DB", "database-url"), ("TC_API_TOKEN", "api-token")] {
        let from = container["env"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["name"] == variable)
            .map(|e| &e["valueFrom"]["secretKeyRef"]);
        let from_secret = from.is_some_and(|r| r["name"] == *secret_name && r["key"] == key);
        if !from_secret || secret["stringData"][key].is_null() {
            fail(format!("{variable} comes from the Secret's {key}"));
        }
    }
    let db = secret["stringData"]["database-url"]
        .as_str()
        .unwrap_or_default();
    if !db.starts_with("postgres://") && !db.starts_with("postgresql://") {
        fail("several nodes share a PostgreSQL database (database-url)".into());
    }
    failures
}

/// The shortest preStop sleep that outlasts a load balancer's or an
/// Ingress controller's deregistration of a terminating pod (their
/// endpoint updates take a few seconds; 10 s is the common floor).
const MIN_PRE_STOP_S: u64 = 10;

/// The port of `--admin-listen=host:port` in the container's args.
fn admin_port(args: &[&str]) -> Option<u64> {
    args.iter()
        .find_map(|a| a.strip_prefix("--admin-listen="))
        .and_then(|addr| addr.rsplit_once(':'))
        .and_then(|(_, port)| port.parse::<u64>().ok())
}

/// How traffic reaches the pods: an Ingress with TLS for every host it
/// routes, sending to a Service of this file on a port that Service has,
/// which is not the admin listener's; and a Service for the admin
/// listener that Prometheus' service discovery scrapes.
fn check_traffic(documents: &[Value]) -> Vec<String> {
    let mut failures = Vec::new();
    let mut fail = |what: String| failures.push(format!("{KUBERNETES}: {what}"));
    let container = documents
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .map(|d| &d["spec"]["template"]["spec"]["containers"][0]);
    let args: Vec<&str> = container
        .and_then(|c| c["args"].as_array())
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(admin) = admin_port(&args) else {
        fail("the container has --admin-listen=host:port".into());
        return failures;
    };
    // A Service port reaches the admin listener when its target is the
    // container port named for it, or its number.
    let admin_name = container
        .and_then(|c| c["ports"].as_array())
        .into_iter()
        .flatten()
        .find(|p| p["containerPort"].as_u64() == Some(admin))
        .and_then(|p| p["name"].as_str());
    let reaches_admin = |port: &Value| {
        let target = &port["targetPort"];
        target.as_u64() == Some(admin)
            || (target.is_null() && port["port"].as_u64() == Some(admin))
            || target.as_str().is_some_and(|t| Some(t) == admin_name)
    };
    let services: Vec<&Value> = documents
        .iter()
        .filter(|d| d["kind"] == "Service")
        .collect();
    let ports_of = |service: &Value| -> Vec<Value> {
        service["spec"]["ports"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let admin_service = services
        .iter()
        .find(|s| ports_of(s).iter().any(&reaches_admin));
    match admin_service {
        None => fail(format!(
            "a Service reaches the admin listener's port ({admin})"
        )),
        Some(service) => {
            let annotations = &service["metadata"]["annotations"];
            let port = ports_of(service)
                .into_iter()
                .find(|p| reaches_admin(p))
                .and_then(|p| p["port"].as_u64());
            let scrape_port = annotations["prometheus.io/port"]
                .as_str()
                .and_then(|p| p.parse::<u64>().ok());
            if annotations["prometheus.io/scrape"] != "true"
                || annotations["prometheus.io/path"] != "/metrics"
                || scrape_port.is_none()
                || scrape_port != port
            {
                fail(format!(
                    "the admin Service's prometheus.io annotations scrape /metrics on its port ({port:?})"
                ));
            }
        }
    }
    let Some(ingress) = documents.iter().find(|d| d["kind"] == "Ingress") else {
        fail("an Ingress terminates TLS in front of the Service".into());
        return failures;
    };
    let tls = ingress["spec"]["tls"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let tls_hosts: Vec<&str> = ingress["spec"]["tls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["secretName"].as_str().is_some_and(|s| !s.is_empty()))
        .flat_map(|t| t["hosts"].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    if tls.is_empty() || tls_hosts.is_empty() {
        fail("the Ingress has tls with hosts and a secretName".into());
    }
    let rules = ingress["spec"]["rules"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if rules.is_empty() {
        fail("the Ingress has rules".into());
    }
    for rule in &rules {
        let host = rule["host"].as_str().unwrap_or_default();
        if !tls_hosts.contains(&host) {
            fail(format!("the Ingress serves {host:?} over TLS (tls.hosts)"));
        }
        let paths = rule["http"]["paths"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for path in &paths {
            let backend = &path["backend"]["service"];
            let service = services
                .iter()
                .find(|s| s["metadata"]["name"] == backend["name"]);
            let port = service.and_then(|s| {
                ports_of(s).into_iter().find(|p| {
                    (backend["port"]["name"].is_string() && p["name"] == backend["port"]["name"])
                        || (backend["port"]["number"].is_u64()
                            && p["port"] == backend["port"]["number"])
                })
            });
            match port {
                None => fail(format!(
                    "the Ingress's backend {backend} is a Service and port of this file"
                )),
                Some(p) if reaches_admin(&p) => {
                    fail("the Ingress sends to the admin listener, which asks no credential".into())
                }
                Some(_) => {}
            }
        }
    }
    failures
}

/// The Deployment runs the image `cargo xtask image` makes, at the
/// version being built (a registry in front of it allowed, as pushed).
fn check_image_tag(documents: &[Value], version: &str) -> Vec<String> {
    let tag = format!("{}:{version}", crate::image::IMAGE);
    let image = documents
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .and_then(|d| d["spec"]["template"]["spec"]["containers"][0]["image"].as_str())
        .unwrap_or_default();
    if image == tag || image.ends_with(&format!("/{tag}")) {
        Vec::new()
    } else {
        vec![format!(
            "{KUBERNETES}: the container's image is {tag} (what cargo xtask image makes), not {image:?}"
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repository_file(path: &str) -> String {
        read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)).unwrap()
    }

    #[test]
    fn the_service_files_pass_their_checks() {
        assert_eq!(check_unit(&repository_file(UNIT)), Vec::<String>::new());
        let documents = parse_documents(&repository_file(KUBERNETES)).unwrap();
        assert_eq!(check_kubernetes(&documents), Vec::<String>::new());
        assert_eq!(check_traffic(&documents), Vec::<String>::new());
        let version =
            crate::image::version(&repository_file("crates/tc-server/Cargo.toml")).unwrap();
        assert_eq!(check_image_tag(&documents, &version), Vec::<String>::new());
    }

    /// Each broken variant is caught, naming what is wrong.
    #[test]
    fn broken_service_files_are_caught() {
        let unit = repository_file(UNIT);
        let check = |from: &str, to: &str, expected: &str| {
            assert!(unit.contains(from), "{from}");
            let failures = check_unit(&unit.replace(from, to)).join("\n");
            assert!(failures.contains(expected), "{from} -> {to}: {failures}");
        };
        check("Type=simple", "Type=notify", "Type=simple");
        check(
            "ProtectSystem=strict",
            "ProtectSystem=full",
            "ProtectSystem",
        );
        check("TimeoutStopSec=20", "TimeoutStopSec=5", "TimeoutStopSec");
        check("--trusted-proxy 127.0.0.1", "", "--trusted-proxy");

        let yaml = repository_file(KUBERNETES);
        let check = |from: &str, to: &str, expected: &str| {
            assert!(yaml.contains(from), "{from}");
            let documents = parse_documents(&yaml.replacen(from, to, 1)).unwrap();
            let mut failures = check_kubernetes(&documents);
            failures.extend(check_traffic(&documents));
            let failures = failures.join("\n");
            assert!(failures.contains(expected), "{from} -> {to}: {failures}");
        };
        check(
            "terminationGracePeriodSeconds: 30",
            "terminationGracePeriodSeconds: 15",
            "terminationGracePeriodSeconds",
        );
        check("seconds: 15", "seconds: 2", "preStop");
        check("preStop:", "postStart:", "preStop");
        check("- --trusted-proxy=10.0.0.0/8", "", "--trusted-proxy");
        check(
            "targetPort: admin",
            "targetPort: http",
            "admin listener's port",
        );
        check(
            "prometheus.io/port: \"9090\"\n    prometheus.io/path",
            "prometheus.io/port: \"9091\"\n    prometheus.io/path",
            "admin Service",
        );
        check("kind: Ingress", "kind: Gateway", "Ingress");
        check("secretName: taskcenter-tls", "secretName: \"\"", "tls");
        check(
            "- host: tasks.example.com",
            "- host: other.example.com",
            "over TLS",
        );
        check(
            "name: taskcenter\n                port:\n                  name: http",
            "name: taskcenter-admin\n                port:\n                  name: admin",
            "admin listener, which asks no credential",
        );
        check(
            "name: taskcenter\n                port:\n                  name: http",
            "name: taskcenter\n                port:\n                  name: https",
            "backend",
        );
        check(
            "port: admin\n            periodSeconds: 5",
            "port: http\n            periodSeconds: 5",
            "readinessProbe",
        );
        check("key: api-token", "key: token", "TC_API_TOKEN");
        check(
            "kind: PodDisruptionBudget",
            "kind: Budget",
            "PodDisruptionBudget",
        );
        check("replicas: 3", "replicas: 1", "replicas");
        check(
            "prometheus.io/port: \"9090\"",
            "prometheus.io/port: \"8080\"",
            "prometheus.io",
        );
        check(
            "prometheus.io/path: /metrics",
            "prometheus.io/path: /healthz",
            "prometheus.io",
        );

        let tag_check = |image: &str, version: &str, passes: bool| {
            let documents =
                parse_documents(&yaml.replacen("image: taskcenter/tc-server:0.1.0", image, 1))
                    .unwrap();
            let failures = check_image_tag(&documents, version);
            assert_eq!(
                failures.is_empty(),
                passes,
                "{image} at {version}: {failures:?}"
            );
        };
        tag_check("image: taskcenter/tc-server:0.1.0", "0.1.0", true);
        tag_check(
            "image: registry.example/taskcenter/tc-server:0.1.0",
            "0.1.0",
            true,
        );
        tag_check("image: taskcenter/tc-server:0.1.0", "0.2.0", false);
        tag_check("image: ghcr.io/taskcenter/tc-server:latest", "0.1.0", false);
        tag_check("image: evil/xtaskcenter/tc-server:0.1.0", "0.1.0", false);
    }
}
