//! Developer commands, run as `cargo xtask <command>`.

#![allow(clippy::print_stdout)]

mod api_fuzz;
mod bench;
mod browser;
mod chaos;
mod deploy_check;
mod harness;
mod image;
mod store_vs_rusqlite;
mod test_matrix;
mod tidy;
mod ui_test;
mod ui_test_proxy;

use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  tidy         check the dependency rules (cargo metadata), module docs and test machinery in the product
  test-matrix  the worker's scenarios for every store adapter x downstream [--verbose] [--only <scenario>]
  bench        build release, measure each figure beside its ceiling [--quick]
  bench-store  durable submits/s: the store vs a naive rusqlite loop [--seconds <per cell>]
  api-fuzz     schemathesis against a live tc-server from docs/openapi.yaml [--examples N]
  ui-test      the dashboard in headless Chromium (chromedriver): counts, filters, cancel, bulk, escaping, login, login behind a TLS proxy
  deploy-check the service files in deploy/: systemd-analyze verify and the unit's settings, the Kubernetes example's fields [--no-systemd-analyze]
  image        the container image taskcenter/tc-server:<version> with buildah, no registry, then run under chroot: /healthz, one task
  chaos        kill -9 tc-server (or restart PostgreSQL) under mixed load, check nothing is lost [--rounds N] [--seed S] [--store sqlite|postgres]
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("tidy") => tidy::run(),
        Some("test-matrix") => test_matrix::run_matrix(&args[1..]),
        Some("bench") => bench::run(&args[1..]),
        Some("bench-store") => store_vs_rusqlite::run(&args[1..]),
        Some("chaos") => chaos::run(&args[1..]),
        Some("api-fuzz") => api_fuzz::run(&args[1..]),
        Some("ui-test") => ui_test::run(&args[1..]),
        Some("deploy-check") => deploy_check::run(&args[1..]),
        Some("image") => image::run(&args[1..]),
        Some("help" | "--help" | "-h") | None => {
            print!("{USAGE}");
            Ok(())
        }
        Some(other) => Err(format!("unknown command {other:?}\n\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
