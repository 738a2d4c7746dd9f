//! `cargo xtask api-fuzz [--examples N]`: schemathesis against a live
//! tc-server, generating requests from docs/openapi.yaml. No response may be
//! a 5xx, and every response must conform to the document (status codes,
//! content types, headers, body schemas).
//!
//! schemathesis comes from PyPI into a virtualenv under `target/` (made once,
//! reused); only `python3` with its `venv` module must be installed.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::bench::server::{ServerProcess, tc_server};

const USAGE: &str = "usage: cargo xtask api-fuzz [--examples N]";

/// The schemathesis release line the flags below are written for.
const SCHEMATHESIS: &str = "schemathesis==4.*";

/// The checks run on every response: "never 5xx" and conformance to the
/// document. (The others judge API design choices, e.g. that a request
/// schemathesis thinks invalid is refused, not conformance.)
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,\
                      response_headers_conformance,response_schema_conformance";

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
    let root = crate::bench::workspace_root();
    let target = crate::bench::target_dir(&root);
    let schemathesis = install(&target)?;
    crate::bench::build(&root, &["-p", "tc-server"])?;
    let binary = target.join("release").join("tc-server");
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    // Generated tasks may name any host: the allow-list keeps every call on
    // loopback (a closed port), so the run talks to 127.0.0.1 only.
    let server = ServerProcess::start(
        "tc-server",
        tc_server(
            &binary,
            &dir.path().join("fuzz.db"),
            &[
                "--max-attempts",
                "1",
                "--allow-url-prefix",
                "http://127.0.0.1:9/",
            ],
        ),
    )?;
    let spec = root.join("docs").join("openapi.yaml");
    eprintln!(
        "[api-fuzz] schemathesis on {} against {}, {examples} examples per operation",
        spec.display(),
        server.addr
    );
    let status = Command::new(&schemathesis)
        .arg("run")
        .arg(&spec)
        .args(["--url", &format!("http://{}", server.addr)])
        .args(["--checks", CHECKS])
        .args(["--max-examples", &examples.to_string()])
        // Reproducible: the same cases every run, so CI cannot flake.
        .args(["--seed", "1"])
        .args(["--workers", "2"])
        .args(["--request-timeout", "10"])
        .current_dir(dir.path())
        .status()
        .map_err(|e| format!("running schemathesis: {e}"))?;
    let (warnings, first) = server.warnings();
    server.stop();
    if let Some(first) = first.filter(|_| warnings > 0) {
        eprintln!("[api-fuzz] the server logged {warnings} warnings; the first: {first}");
    }
    if status.success() {
        Ok(())
    } else {
        Err(format!("schemathesis found failures ({status})"))
    }
}

/// The schemathesis executable, installing it into `target/api-fuzz-venv`
/// the first time.
fn install(target: &Path) -> Result<PathBuf, String> {
    let venv = target.join("api-fuzz-venv");
    let bin = venv.join("bin");
    let schemathesis = bin.join("schemathesis");
    if schemathesis.exists() {
        return Ok(schemathesis);
    }
    eprintln!(
        "[api-fuzz] installing {SCHEMATHESIS} into {}",
        venv.display()
    );
    run_ok(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        "python3 -m venv (is python3 with venv installed?)",
    )?;
    run_ok(
        Command::new(bin.join("pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            SCHEMATHESIS,
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
