//! `cargo xtask api-fuzz [--examples N]`: schemathesis against a live
//! tc-server, generating requests from docs/openapi.yaml, set up so that
//! generated tasks can succeed:
//!
//! - the server takes a random API token, and schemathesis sends it;
//! - its allow-list is the origin of a loopback sink ([`sink`]) that
//!   answers every call at once (200 for about three tasks in four, 400 for the
//!   rest), and the document schemathesis reads puts that origin in front of
//!   every generated task url ([`document`]): tasks are created, delivered,
//!   and succeed or fail, and nothing leaves loopback;
//! - the document's links carry real task ids and destinations from one
//!   operation to the next in the stateful phase, and each operation on a
//!   task has as its id's example a task made before the run in the state
//!   it needs ([`seed`]);
//! - a generated submit's idempotency key is made to name its payload
//!   (hooks.py), since the generator reuses a drawn key across many cases
//!   and the server rightly answers those 409: with it, a generated valid
//!   submit is a task.
//!
//! The run fails when a response is a 5xx or does not conform to the
//! document (status codes, content types, headers, body schemas), when
//! schemathesis reports a warning (an operation it could not reach, data
//! the server mostly refused, ...), when an operation never got a 2xx, or
//! when the server accepted fewer than 30% of the valid submits generated
//! ([`tally`]); it prints each operation's 2xx share either way.
//!
//! schemathesis comes from PyPI, pinned, into a virtualenv under `target/`
//! (made once, reused); only `python3` with its `venv` module must be
//! installed. Its cases are the same on every run (a fixed seed).

mod document;
mod seed;
mod sink;
mod tally;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use crate::harness::server::{ServerProcess, tc_server};

const USAGE: &str = "usage: cargo xtask api-fuzz [--examples N]";

/// The schemathesis release the flags and the event log's shape below are
/// written for: pinned, so that CI generates the same cases on every run.
const SCHEMATHESIS_VERSION: &str = "4.32.5";

/// The schemathesis hooks: a generated submit's key names its payload, so
/// that the generator's habit of reusing a drawn key does not turn most
/// generated tasks into conflicts (see the file).
const HOOKS: &str = include_str!("hooks.py");

/// The checks run on every response: "never 5xx" and conformance to the
/// document. (The others judge API design choices, e.g. that a request
/// schemathesis thinks invalid is refused, not conformance.)
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,\
                      response_headers_conformance,response_schema_conformance";

/// The longest a schemathesis run may take before it is stopped and the run
/// fails: `--examples 30` takes under a minute here, 100 about 70 s.
const RUN_LIMIT: Duration = Duration::from_secs(10 * 60);

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let mut examples: u64 = 50;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--examples" => {
                examples = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("--examples needs a positive number\n{USAGE}"))?;
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    let root = crate::harness::workspace_root();
    let target = crate::harness::target_dir(&root);
    let schemathesis = install(&target)?;
    crate::harness::build(&root, crate::harness::RELEASE_PACKAGES)?;
    let binary = target.join("release").join("tc-server");
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;

    let runtime = tokio::runtime::Runtime::new().map_err(|e| format!("tokio runtime: {e}"))?;
    let sink = runtime.block_on(sink::Sink::start())?;
    let origin = sink.origin();
    let token = format!("fuzz-{:016x}", fastrand::u64(..));
    let prefix = format!("{origin}/");
    let server = ServerProcess::start(
        "tc-server",
        tc_server(
            &binary,
            &dir.path().join("fuzz.db"),
            // An issuer, so that the JWT keys' documents exist and a jwt
            // auth is accepted.
            &[
                "--api-token",
                &token,
                "--allow-url-prefix",
                &prefix,
                "--issuer",
                "https://fuzz.taskcenter.test",
            ],
        ),
    )?;
    let seeds = runtime.block_on(seed::seed(server.addr, &token, &origin))?;

    let yaml = std::fs::read_to_string(root.join("docs").join("openapi.yaml"))
        .map_err(|e| format!("docs/openapi.yaml: {e}"))?;
    let spec = document::fuzz_copy(&yaml, &origin, &seeds)?;
    let operations = operations_of(&spec);
    // The fuzz document and the reports stay under target/ after the run,
    // for a look at what a failing run sent.
    let reports = target.join("api-fuzz");
    std::fs::create_dir_all(&reports)
        .map_err(|e| format!("creating {}: {e}", reports.display()))?;
    let spec_path = reports.join("openapi.json");
    std::fs::write(&spec_path, spec.to_string())
        .map_err(|e| format!("writing {}: {e}", spec_path.display()))?;
    let hooks_path = reports.join("hooks.py");
    std::fs::write(&hooks_path, HOOKS)
        .map_err(|e| format!("writing {}: {e}", hooks_path.display()))?;
    eprintln!(
        "[api-fuzz] schemathesis {SCHEMATHESIS_VERSION} on docs/openapi.yaml (url under {origin}) \
         against {}, {examples} examples per operation",
        server.addr
    );
    let events = reports.join("events.ndjson");
    let summary = reports.join("summary.json");
    // A report left by an earlier run must not stand in for this one's.
    for stale in [&events, &summary] {
        if stale.exists() {
            std::fs::remove_file(stale)
                .map_err(|e| format!("removing {}: {e}", stale.display()))?;
        }
    }
    let mut command = Command::new(&schemathesis);
    command
        .arg("run")
        .arg(&spec_path)
        .args(["--url", &format!("http://{}", server.addr)])
        .args(["--header", &format!("Authorization: Bearer {token}")])
        .args(["--checks", CHECKS])
        .args(["--max-examples", &examples.to_string()])
        // The same cases every run (only what the server's timing decides in
        // the stateful phase, a task ended or not yet, varies).
        .args(["--seed", "1"])
        .args(["--generation-database", "none"])
        // One worker: hypothesis describes its strategies with `ast.parse`,
        // which CPython 3.11 does not run safely on two threads at once
        // ("AST constructor recursion depth mismatch").
        .args(["--workers", "1"])
        .args(["--request-timeout", "10"])
        .args(["--report", "ndjson,json"])
        .arg("--report-ndjson-path")
        .arg(&events)
        .arg("--report-json-path")
        .arg(&summary)
        .env("SCHEMATHESIS_HOOKS", &hooks_path)
        .current_dir(dir.path());
    let status = run_bounded(command, RUN_LIMIT)?;
    let (warnings, first) = server.warnings();
    server.stop();
    let delivered = sink.answered();
    drop(runtime);
    if let Some(first) = first.filter(|_| warnings > 0) {
        eprintln!("[api-fuzz] the server logged {warnings} warnings; the first: {first}");
    }

    let log = std::fs::File::open(&events)
        .map_err(|e| format!("schemathesis wrote no event log ({status}): {e}"))?;
    let tally = tally::Tally::read(std::io::BufReader::new(log))?;
    eprintln!("[api-fuzz] cases by operation (positive: generated to be valid):");
    eprint!("{}", tally.table(&operations));
    let submits = tally
        .operations
        .get(tally::SUBMIT)
        .cloned()
        .unwrap_or_default();
    let refused: Vec<String> = submits
        .positive_refused
        .iter()
        .map(|(status, n)| format!("{n} x {status}"))
        .collect();
    eprintln!(
        "[api-fuzz] {}: {} of {} generated valid submits accepted ({:.1}%, at least {:.0}% \
         required; the others answered {}); {} of {} submits of every kind; the sink answered \
         {delivered} deliveries",
        tally::SUBMIT,
        submits.positive_ok,
        submits.positive,
        percent(submits.positive_ok, submits.positive),
        tally::MIN_SUBMIT_SHARE * 100.0,
        if refused.is_empty() {
            "nothing else".to_owned()
        } else {
            refused.join(", ")
        },
        submits.ok,
        submits.cases,
    );

    let mut problems = Vec::new();
    if !status.success() {
        problems.push(format!("schemathesis found failures ({status})"));
    }
    problems.extend(schemathesis_warnings(&summary)?);
    problems.extend(tally.shortfalls(&operations));
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the API fuzz run does not pass:\n  - {}",
            problems.join("\n  - ")
        ))
    }
}

/// Every operation of the document, as `METHOD /path`.
fn operations_of(spec: &serde_json::Value) -> Vec<String> {
    const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];
    let mut out = Vec::new();
    for (path, item) in spec["paths"].as_object().into_iter().flatten() {
        for method in METHODS {
            if item.get(method).is_some() {
                out.push(format!("{} {path}", method.to_uppercase()));
            }
        }
    }
    out
}

/// The warnings schemathesis reported, one line per kind, from its JSON
/// run report.
fn schemathesis_warnings(summary: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(summary)
        .map_err(|e| format!("schemathesis wrote no run report: {e}"))?;
    let report: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("schemathesis's run report: {e}"))?;
    let mut out = Vec::new();
    for (kind, labels) in report["warnings"].as_object().into_iter().flatten() {
        let labels: Vec<&str> = labels
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(serde_json::Value::as_str)
            .collect();
        if !labels.is_empty() {
            out.push(format!(
                "schemathesis warning {kind}: {}",
                labels.join(", ")
            ));
        }
    }
    Ok(out)
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// Runs `command` to its end, or kills it after `limit`.
fn run_bounded(mut command: Command, limit: Duration) -> Result<ExitStatus, String> {
    let mut child = command
        .spawn()
        .map_err(|e| format!("running schemathesis: {e}"))?;
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child
            .try_wait()
            .map_err(|e| format!("waiting for schemathesis: {e}"))?
        {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "schemathesis did not finish within {} s; stopped",
                limit.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The schemathesis executable, installing the pinned release into
/// `target/api-fuzz-venv` the first time (and again when the pin moves).
fn install(target: &Path) -> Result<PathBuf, String> {
    let venv = target.join("api-fuzz-venv");
    let bin = venv.join("bin");
    let schemathesis = bin.join("schemathesis");
    let installed = Command::new(&schemathesis)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    if installed.is_some_and(|v| v.trim().ends_with(SCHEMATHESIS_VERSION)) {
        return Ok(schemathesis);
    }
    eprintln!(
        "[api-fuzz] installing schemathesis {SCHEMATHESIS_VERSION} into {}",
        venv.display()
    );
    if !bin.join("pip").exists() {
        run_ok(
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
            "python3 -m venv (is python3 with venv installed?)",
        )?;
    }
    run_ok(
        Command::new(bin.join("pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            &format!("schemathesis=={SCHEMATHESIS_VERSION}"),
        ]),
        "pip install schemathesis",
    )?;
    Ok(schemathesis)
}

fn run_ok(command: &mut Command, what: &str) -> Result<(), String> {
    let status = command.status().map_err(|e| format!("{what}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({status})"))
    }
}
