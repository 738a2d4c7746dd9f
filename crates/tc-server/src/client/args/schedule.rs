//! The arguments of `tc-server schedule …`.

use clap::{Args, Subcommand};

use super::{Connection, ListDestinationsArgs, Output, Payload, Quiet, payload};

/// `tc-server schedule …`.
#[derive(Debug, Args)]
pub(crate) struct ScheduleArgs {
    #[command(flatten)]
    pub(crate) connection: Connection,
    #[command(flatten)]
    pub(crate) output: Output,
    #[command(subcommand)]
    pub(crate) command: ScheduleCommand,
}

/// The schedule subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum ScheduleCommand {
    /// Create a schedule: a task submitted on a cron pattern.
    Create(CreateScheduleArgs),
    /// List every schedule with its next runs and last task.
    List(ListDestinationsArgs),
    /// Show one schedule.
    Get(ScheduleName),
    /// Stop a schedule's firings (a trigger still fires it).
    Pause(ScheduleName),
    /// Let a paused schedule fire again (missed times are not caught up).
    Resume(ScheduleName),
    /// Fire a schedule now; prints the task it submitted.
    Trigger(ScheduleName),
    /// Delete a schedule; the tasks it submitted stay.
    Delete(ScheduleName),
}

/// `schedule create`.
#[derive(Debug, Args)]
pub(crate) struct CreateScheduleArgs {
    /// The schedule's name: ASCII letters, digits, `.`, `_` and `-`.
    #[arg(value_name = "NAME")]
    pub(crate) name: String,
    /// Five cron fields (minute hour day-of-month month day-of-week), or
    /// @hourly, @daily, @weekly, @monthly.
    #[arg(long)]
    pub(crate) cron: String,
    /// An IANA time zone the pattern is read in (UTC if left out).
    #[arg(long)]
    pub(crate) timezone: Option<String>,
    /// The task each firing submits: a `task submit` body as JSON (`url`,
    /// `json`, `method`, `headers`, `max_attempts`, `timeout_ms`…) without
    /// `idempotency_key`, or `@FILE` to read it from a file.
    #[arg(long, value_name = "JSON", value_parser = Quiet(payload))]
    pub(crate) task: Payload,
    /// Create it paused.
    #[arg(long)]
    pub(crate) paused: bool,
    /// `skip`: do not fire while the previous firing's task is not finished
    /// (`allow` if left out).
    #[arg(long, value_name = "allow|skip")]
    pub(crate) overlap: Option<String>,
    /// `latest`: after a downtime fire once for the most recent missed time
    /// (`none` if left out: skip them).
    #[arg(long, value_name = "none|latest")]
    pub(crate) catch_up: Option<String>,
    #[command(flatten)]
    pub(crate) output: Output,
}

/// A command on one schedule.
#[derive(Debug, Args)]
pub(crate) struct ScheduleName {
    /// The schedule's name.
    #[arg(value_name = "NAME")]
    pub(crate) name: String,
    #[command(flatten)]
    pub(crate) output: Output,
}
