//! `tc-server`: taskcenter's binary. It reads the configuration (flags or
//! `TC_*` environment variables), sets up logging, wires the SQLite store,
//! the downstream client, the worker and the HTTP API together, and stops
//! them gracefully on SIGTERM or SIGINT. `tc-server demo` walks through the
//! product on a temporary database.

mod cli;
mod control;
mod db_lock;
mod demo;
#[cfg(test)]
mod disk_full_tests;
mod logging;
mod serve;
mod store;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::serve::{Settings, Signals};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("tc-server: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command {
        Some(Command::Demo) => {
            logging::init_demo();
            runtime.block_on(demo::run())
        }
        Some(Command::Serve(_)) | None => {
            let args = cli.serve_args();
            if let Err(e) = args.check() {
                e.exit();
            }
            logging::init_serve(args.log_format);
            runtime.block_on(serve(Settings::from_args(args)))
        }
    }
}

async fn serve(settings: Settings) -> ExitCode {
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(e) => return fail("cannot install the signal handlers", &e),
    };
    let running = match serve::start(settings).await {
        Ok(running) => running,
        Err(e) => return fail("cannot start", &e),
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
