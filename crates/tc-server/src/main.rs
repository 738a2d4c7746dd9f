//! `tc-server`: taskcenter's binary. It reads the configuration (flags or
//! `TC_*` environment variables), sets up logging, wires the SQLite store,
//! the downstream client, the worker and the HTTP API together, and stops
//! them gracefully on SIGTERM or SIGINT. `tc-server demo` walks through the
//! product on a temporary database. `tc-server task …` and `tc-server
//! destination …` are the command-line client of a running server;
//! `tc-server healthcheck` is a container's health probe.
//! `tc-server backup` copies the SQLite database while a server runs on it.
//! `tc-server secret-key new` prints a key for `--secret-key-file`.

mod backup;
mod cli;
mod client;
mod db_lock;
mod demo;
#[cfg(test)]
mod disk_full_tests;
mod fd_limit;
mod jwt;
mod logging;
mod secrets;
mod serve;
mod settings;
mod store;
mod telemetry;
mod tls_check;
mod worker_for_http;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command, ServeArgs};
use crate::serve::{Settings, Signals};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match &cli.command {
        Some(Command::Task(args)) => client::run_task(args),
        Some(Command::Destination(args)) => client::run_destination(args),
        Some(Command::Schedule(args)) => client::run_schedule(args),
        Some(Command::Tenant(args)) => client::run_tenant(args),
        Some(Command::Topic(args)) => client::run_topic(args),
        Some(Command::FlowKey(args)) => client::run_flow_key(args),
        Some(Command::Healthcheck(args)) => client::run_healthcheck(args),
        Some(Command::Demo) => run_demo(),
        Some(Command::Backup(args)) => backup::run(args),
        Some(Command::SecretKey(args)) => match args.command {
            cli::SecretKeyCommand::New => secrets::run_new_key(),
        },
        Some(Command::Serve(_)) | None => run_server(cli.serve_args()),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("tc-server: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        })
}

fn run_demo() -> ExitCode {
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    logging::init_demo();
    runtime.block_on(demo::run())
}

fn run_server(args: &ServeArgs) -> ExitCode {
    if let Err(e) = args.check() {
        e.exit();
    }
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    logging::init_serve(args.log_format);
    runtime.block_on(serve(Settings::from_args(args)))
}

async fn serve(settings: Settings) -> ExitCode {
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(e) => return fail("cannot install the signal handlers", &e),
    };
    let running = match serve::start(settings).await {
        Ok(running) => running,
        Err(e) => {
            let code = e.exit_code();
            let _ = fail("cannot start", &e);
            return code;
        }
    };
    let signal = signals.recv().await;
    tracing::info!(signal, "shutdown_requested");
    tokio::select! {
        stopped = running.shutdown() => match stopped {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail("shutdown failed", &e),
        },
        signal = signals.recv() => {
            // A second signal: the operator does not want to wait. Tasks in
            // flight keep their leases and are recovered at the next start.
            tracing::warn!(signal, "shutdown_forced");
            ExitCode::FAILURE
        }
    }
}

/// Reports a fatal error on stderr (where a person starting the server looks)
/// and in the log.
fn fail(what: &str, error: &dyn std::error::Error) -> ExitCode {
    tracing::error!(error = %error, what, "server_failed");
    eprintln!("tc-server: {what}: {error}");
    ExitCode::FAILURE
}
