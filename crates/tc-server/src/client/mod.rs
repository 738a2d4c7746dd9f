//! The command-line client: `tc-server task …`, `tc-server destination …`,
//! `tc-server schedule …`, `tc-server tenant …` and `tc-server topic …` talk to a running server
//! over its HTTP API; `tc-server healthcheck` asks its `/healthz`.
//!
//! Exit codes: 0 ok, 1 the API refused (its error code and message on
//! stderr), 2 usage, 3 server unreachable.

pub(crate) mod args;
mod destination;
mod error;
pub(crate) mod flow_key;
mod format;
mod http;
mod output;
mod schedule;
mod task;
mod tenant;
mod topic;
mod view;
mod watch;

use std::process::ExitCode;

use self::args::{
    Connection, DestinationArgs, DestinationCommand, HealthcheckArgs, ScheduleArgs,
    ScheduleCommand, TaskArgs, TaskCommand, TenantArgs, TenantCommand, TenantKeyCommand,
};
use self::error::ClientError;
use self::http::Api;
pub(crate) use self::http::{tls_config, tls_config_with_roots};
use self::output::Out;

/// Runs `tc-server task …`.
pub(crate) fn run_task(args: &TaskArgs) -> ExitCode {
    finish(block_on(task_command(args)))
}

/// Runs `tc-server destination …`.
pub(crate) fn run_destination(args: &DestinationArgs) -> ExitCode {
    finish(block_on(destination_command(args)))
}

/// Runs `tc-server schedule …`.
pub(crate) fn run_schedule(args: &ScheduleArgs) -> ExitCode {
    finish(block_on(schedule_command(args)))
}

async fn schedule_command(args: &ScheduleArgs) -> Result<(), ClientError> {
    let api = Api::new(&args.connection)?;
    let json = |leaf: args::Output| args.output.json || leaf.json;
    match &args.command {
        ScheduleCommand::Create(a) => schedule::create(&api, &Out::new(json(a.output)), a).await,
        ScheduleCommand::List(a) => schedule::list(&api, &Out::new(json(a.output))).await,
        ScheduleCommand::Get(a) => schedule::get(&api, &Out::new(json(a.output)), &a.name).await,
        ScheduleCommand::Pause(a) => {
            schedule::act(&api, &Out::new(json(a.output)), &a.name, "pause").await
        }
        ScheduleCommand::Resume(a) => {
            schedule::act(&api, &Out::new(json(a.output)), &a.name, "resume").await
        }
        ScheduleCommand::Trigger(a) => {
            schedule::trigger(&api, &Out::new(json(a.output)), &a.name).await
        }
        ScheduleCommand::Delete(a) => {
            schedule::delete(&api, &Out::new(json(a.output)), &a.name).await
        }
    }
}

/// Runs `tc-server topic …`.
pub(crate) fn run_topic(args: &args::TopicArgs) -> ExitCode {
    finish(block_on(topic::run(args)))
}

/// Runs `tc-server flow-key …`.
pub(crate) fn run_flow_key(args: &flow_key::FlowKeyArgs) -> ExitCode {
    finish(block_on(flow_key::run(args)))
}

/// Runs `tc-server tenant …`.
pub(crate) fn run_tenant(args: &TenantArgs) -> ExitCode {
    finish(block_on(tenant_command(args)))
}

async fn tenant_command(args: &TenantArgs) -> Result<(), ClientError> {
    let api = Api::new(&args.connection)?;
    let out = |leaf: args::Output| Out::new(args.output.json || leaf.json);
    match &args.command {
        TenantCommand::Create(a) => tenant::create(&api, &out(a.output), a).await,
        TenantCommand::List(a) => tenant::list(&api, &out(a.output)).await,
        TenantCommand::Get(a) => tenant::get(&api, &out(a.output), &a.name).await,
        TenantCommand::Set(a) => tenant::set(&api, &out(a.output), a).await,
        TenantCommand::Delete(a) => tenant::delete(&api, &out(a.output), &a.name).await,
        TenantCommand::Key(k) => match &k.command {
            TenantKeyCommand::Create(a) => tenant::create_key(&api, &out(a.output), &a.name).await,
            TenantKeyCommand::Revoke(a) => {
                tenant::revoke_key(&api, &out(a.output), &a.name, &a.id).await
            }
        },
    }
}

/// Runs `tc-server healthcheck`: prints `ok` on a 200.
pub(crate) fn run_healthcheck(args: &HealthcheckArgs) -> ExitCode {
    finish(block_on(healthcheck(args)))
}

async fn healthcheck(args: &HealthcheckArgs) -> Result<(), ClientError> {
    let api = Api::new(&Connection {
        server: args.server.clone(),
        token: None,
    })?;
    let limit = std::time::Duration::from_millis(args.timeout_ms);
    // The client's own timeouts are for people (tens of seconds); a probe
    // must give up within the orchestrator's own timeout.
    let reply = tokio::time::timeout(
        limit,
        api.send(
            ::http::Method::GET,
            "/healthz",
            None,
            std::time::Duration::ZERO,
        ),
    )
    .await
    .map_err(|_| ClientError::Unreachable {
        server: args.server.base.clone(),
        reason: format!("no answer within --timeout-ms ({})", args.timeout_ms),
    })??;
    if reply.status != ::http::StatusCode::OK {
        return Err(ClientError::Protocol(format!(
            "/healthz answered {}",
            reply.status
        )));
    }
    Out::new(false).text("ok\n")
}

/// A client command makes one request at a time: one thread is enough.
fn block_on(
    command: impl std::future::Future<Output = Result<(), ClientError>>,
) -> Result<(), ClientError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ClientError::Local(format!("cannot start the async runtime: {e}")))?
        .block_on(command)
}

fn finish(result: Result<(), ClientError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(ClientError::OutputClosed) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("tc-server: {}", format::sanitize(&error.to_string()));
            error.exit_code()
        }
    }
}

async fn task_command(args: &TaskArgs) -> Result<(), ClientError> {
    let api = Api::new(&args.connection)?;
    let json = |leaf: args::Output| args.output.json || leaf.json;
    match &args.command {
        TaskCommand::Submit(submit) => {
            task::submit(&api, &Out::new(args.output.json), submit).await
        }
        TaskCommand::Get(a) => task::get(&api, &Out::new(json(a.output)), &a.id).await,
        TaskCommand::Result(a) => task::result(&api, &Out::new(json(a.output)), &a.id, a.raw).await,
        TaskCommand::List(a) => task::list(&api, &Out::new(json(a.output)), a).await,
        TaskCommand::Cancel(a) => task::cancel(&api, &Out::new(json(a.output)), &a.id).await,
        TaskCommand::Retry(a) => task::retry(&api, &Out::new(json(a.output)), a).await,
        TaskCommand::Delete(a) => task::delete(&api, &Out::new(json(a.output)), &a.id).await,
        TaskCommand::Watch(a) => watch::watch(&api, &Out::new(json(a.output)), &a.id).await,
        TaskCommand::Bulk(a) => task::bulk(&api, &Out::new(json(a.output)), a).await,
    }
}

async fn destination_command(args: &DestinationArgs) -> Result<(), ClientError> {
    let api = Api::new(&args.connection)?;
    let json = |leaf: args::Output| args.output.json || leaf.json;
    match &args.command {
        DestinationCommand::List(a) => destination::list(&api, &Out::new(json(a.output))).await,
        DestinationCommand::Set(a) => destination::set(&api, &Out::new(json(a.output)), a).await,
        DestinationCommand::Pause(a) => {
            destination::pause(&api, &Out::new(json(a.output)), &a.destination, true).await
        }
        DestinationCommand::Resume(a) => {
            destination::pause(&api, &Out::new(json(a.output)), &a.destination, false).await
        }
    }
}
