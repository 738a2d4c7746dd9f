//! The arguments of `tc-server task …`: submit, get, result, cancel, retry,
//! delete, list and bulk, and the filters list and bulk share.

use clap::{Args, Subcommand, ValueEnum};

use super::{Connection, Output, Payload, Quiet, method, payload};

/// `tc-server task …`.
#[derive(Debug, Args)]
pub(crate) struct TaskArgs {
    #[command(flatten)]
    pub(crate) connection: Connection,
    // Before the subcommand, `--json` also applies to `submit`.
    #[command(flatten)]
    pub(crate) output: Output,
    #[command(subcommand)]
    pub(crate) command: TaskCommand,
}

/// The task subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum TaskCommand {
    /// Submit a task: the server will POST the JSON to the URL. Prints the
    /// task's id and its idempotency key (generated when --key is left out).
    /// For JSON output write `tc-server task --json submit …`: here `--json`
    /// is the payload.
    Submit(SubmitArgs),
    /// Show a task: every field and its attempt history.
    Get(IdArgs),
    /// Write a succeeded task's result to stdout: into a pipe or a file the
    /// downstream's bytes exactly as received; to a terminal with control
    /// characters escaped (a result cannot drive the terminal) unless --raw.
    Result(ResultArgs),
    /// List tasks in creation order, one page (--limit) or every page (--all).
    List(ListArgs),
    /// Cancel a pending or running task (a call in flight is dropped).
    Cancel(IdArgs),
    /// Run a failed or canceled task again, with a fresh budget of attempts.
    Retry(RetryArgs),
    /// Delete a finished task with its history and result.
    Delete(IdArgs),
    /// Print each state change and attempt of a task until it is finished.
    Watch(IdArgs),
    /// Retry, cancel or delete every task a filter covers. Shows how many
    /// tasks match and asks for confirmation on stdin unless --yes; without
    /// a terminal and without --yes it refuses (exit 2).
    Bulk(BulkArgs),
}

/// `task submit`.
#[derive(Debug, Args)]
pub(crate) struct SubmitArgs {
    /// The URL the task calls (absolute `http://` or `https://`).
    #[arg(long)]
    pub(crate) url: String,

    /// The JSON the downstream receives as its body, sent as written (key
    /// order and digits kept), or `@FILE` to read it from a file. Left out,
    /// as in the API, a POST, PUT or PATCH sends `{}` and a DELETE or GET no
    /// body (a GET takes none).
    #[arg(long = "json", value_name = "JSON", value_parser = Quiet(payload))]
    pub(crate) payload: Option<Payload>,

    /// The call's method: POST (the default), PUT, PATCH, DELETE or GET.
    #[arg(long, value_name = "METHOD", value_parser = method)]
    pub(crate) method: Option<String>,

    /// A header the task sends, `Name: value` (repeatable). Credentials
    /// (authorization, cookie, x-api-key) are shown redacted afterwards.
    // Checked after parsing (`headers_object`): an error names the header's
    // position, never its value.
    #[arg(long = "header", value_name = "NAME: VALUE")]
    pub(crate) headers: Vec<String>,

    /// The idempotency key: your name for this piece of work. Left out, a
    /// new one (a UUID v7) is generated and printed.
    #[arg(long)]
    pub(crate) key: Option<String>,

    /// The most tries, the first included (1..=100; the server's default if
    /// left out).
    #[arg(long)]
    pub(crate) max_attempts: Option<u32>,

    /// Each try's timeout in milliseconds (1..=600000; the server's default
    /// if left out).
    #[arg(long)]
    pub(crate) timeout_ms: Option<u64>,

    /// Do not start the first try before this many milliseconds.
    #[arg(long)]
    pub(crate) delay_ms: Option<u64>,

    /// When the task ends, POST its view (as `task get --json` shows it)
    /// to this URL, as a callback task of its own.
    #[arg(long, value_name = "URL")]
    pub(crate) callback_url: Option<String>,

    /// The ends that make a callback: success, failed, canceled (comma
    /// separated or repeated; the server's default, success and failed, if
    /// left out).
    #[arg(long, value_name = "STATE", value_delimiter = ',',
          value_parser = ["success", "failed", "canceled"])]
    pub(crate) callback_on: Vec<String>,

    /// Higher first within its destination: 0 (the default) to 9. A task
    /// that waited `--priority-aging-ms` counts one level higher.
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=9))]
    pub(crate) priority: Option<u8>,

    /// Its flow key (1 to 128 printable ASCII characters): the key's
    /// limits (`tc-server flow-key set`) hold beside its destination's, and
    /// a destination's slots are shared fairly between its keys.
    #[arg(long, value_name = "KEY")]
    pub(crate) flow_key: Option<String>,

    /// Wait until the task is finished and print how it ended.
    #[arg(long)]
    pub(crate) wait: bool,
}

/// A command on one task.
#[derive(Debug, Args)]
pub(crate) struct IdArgs {
    /// The task's id.
    pub(crate) id: String,
    #[command(flatten)]
    pub(crate) output: Output,
}

/// `task result`.
#[derive(Debug, Args)]
pub(crate) struct ResultArgs {
    /// The task's id.
    pub(crate) id: String,
    /// Write the bytes as received even to a terminal, escape sequences
    /// included (they can move the cursor, recolour or retitle the terminal,
    /// or set the clipboard through OSC 52).
    #[arg(long)]
    pub(crate) raw: bool,
    // Accepted for symmetry; the result is never JSON.
    #[command(flatten)]
    pub(crate) output: Output,
}

/// `task retry`.
#[derive(Debug, Args)]
pub(crate) struct RetryArgs {
    /// The task's id.
    pub(crate) id: String,
    /// Make the task due only after this many milliseconds.
    #[arg(long)]
    pub(crate) delay_ms: Option<u64>,
    #[command(flatten)]
    pub(crate) output: Output,
}

/// A task state, as the filters name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum StateArg {
    /// Waiting for a try or a retry.
    Pending,
    /// A call in flight.
    Running,
    /// Finished with a 2xx.
    Success,
    /// Out of attempts, or refused by the downstream.
    Failed,
    /// Canceled.
    Canceled,
}

impl StateArg {
    /// The state's name in the API.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StateArg::Pending => "pending",
            StateArg::Running => "running",
            StateArg::Success => "success",
            StateArg::Failed => "failed",
            StateArg::Canceled => "canceled",
        }
    }
}

/// The filters `task list` and `task bulk` share (the API's filters; all
/// given must hold).
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct FilterArgs {
    /// Tasks in this state.
    #[arg(long, value_enum)]
    pub(crate) state: Option<StateArg>,
    /// Tasks whose URL's `host:port` is this (the port always written).
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) destination: Option<String>,
    /// Tasks whose last error is exactly this reason (`http_503`, `timeout`,
    /// `connect`, …).
    #[arg(long)]
    pub(crate) error: Option<String>,
    /// Tasks created at or after this RFC 3339 time (UTC, `Z`).
    #[arg(long, value_name = "TIME")]
    pub(crate) created_after: Option<String>,
    /// Tasks created before this RFC 3339 time (UTC, `Z`).
    #[arg(long, value_name = "TIME")]
    pub(crate) created_before: Option<String>,
    /// The task with this idempotency key.
    #[arg(long)]
    pub(crate) key: Option<String>,
    /// The tasks of this tenant (the admin token's filter; a tenant's key
    /// covers its own tasks whatever this says).
    #[arg(long, value_name = "NAME")]
    pub(crate) tenant: Option<String>,
    /// Tasks of this priority (0 to 9).
    #[arg(long, value_parser = priority_text)]
    pub(crate) priority: Option<String>,
    /// Tasks of this flow key (your own).
    #[arg(long, value_name = "KEY")]
    pub(crate) flow_key: Option<String>,
}

/// A priority filter, checked (0 to 9) and kept as written for the query.
fn priority_text(s: &str) -> Result<String, String> {
    match s.parse::<u8>() {
        Ok(p) if p <= 9 => Ok(p.to_string()),
        _ => Err(format!("must be an integer from 0 to 9, got {s:?}")),
    }
}

impl FilterArgs {
    /// The filters given, by their API names, in a fixed order.
    pub(crate) fn fields(&self) -> Vec<(&'static str, &str)> {
        let fields = [
            ("state", self.state.map(StateArg::as_str)),
            ("destination", self.destination.as_deref()),
            ("error", self.error.as_deref()),
            ("created_after", self.created_after.as_deref()),
            ("created_before", self.created_before.as_deref()),
            ("idempotency_key", self.key.as_deref()),
            ("tenant", self.tenant.as_deref()),
            ("priority", self.priority.as_deref()),
            ("flow_key", self.flow_key.as_deref()),
        ];
        fields
            .into_iter()
            .filter_map(|(name, value)| value.map(|v| (name, v)))
            .collect()
    }
}

/// `task list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    pub(crate) filter: FilterArgs,
    /// Tasks per page (1..=500; the server's default, 50, if left out).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=500))]
    pub(crate) limit: Option<u32>,
    /// Follow the `next` cursor through every page.
    #[arg(long)]
    pub(crate) all: bool,
    /// Start after this cursor (a previous page's `next`, printed on stderr).
    #[arg(long, value_name = "CURSOR", conflicts_with = "all")]
    pub(crate) after: Option<String>,
    #[command(flatten)]
    pub(crate) output: Output,
}

/// What `task bulk` does to every task the filter covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum BulkAction {
    /// Run failed and canceled tasks again.
    Retry,
    /// Cancel pending and running tasks.
    Cancel,
    /// Delete finished tasks.
    Delete,
}

impl BulkAction {
    /// The action's name in the API.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            BulkAction::Retry => "retry",
            BulkAction::Cancel => "cancel",
            BulkAction::Delete => "delete",
        }
    }
}

/// `task bulk`.
#[derive(Debug, Args)]
pub(crate) struct BulkArgs {
    /// What to do to every task the filters cover (no filter: every task).
    #[arg(value_enum)]
    pub(crate) action: BulkAction,
    #[command(flatten)]
    pub(crate) filter: FilterArgs,
    /// Do not ask: apply at once (needed without a terminal).
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
    #[command(flatten)]
    pub(crate) output: Output,
}
