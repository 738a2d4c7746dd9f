//! The client subcommands' flags: `tc-server task …` and
//! `tc-server destination …`.
//!
//! `--server` and `--token` are global to both groups: they may come before
//! or after the subcommand (`task --server U list`, `task list --server U`).
//! `--json` (print the API's JSON) is accepted by the group and by every
//! subcommand but `task submit`, whose `--json` is the payload, as the issue
//! pins it. clap cannot have both on one command (a global flag is copied
//! into every subcommand, and two `--json` on `submit` are refused), so the
//! output flag is declared per subcommand instead of globally; a submit asks
//! for JSON output on the group: `tc-server task --json submit --url U --json J`.

use std::path::PathBuf;

use clap::{ArgGroup, Args, Subcommand, ValueEnum};
use serde_json::value::RawValue;

/// How to reach the server. Global: accepted anywhere after `task` or
/// `destination`.
#[derive(Debug, Clone, Args)]
pub(crate) struct Connection {
    /// The server's base URL (`http://` or `https://`; a path prefix is kept,
    /// for a server behind a reverse proxy).
    #[arg(long, env = "TC_SERVER_URL", default_value = "http://127.0.0.1:8080",
          global = true, value_parser = server_url, help_heading = "Server")]
    pub(crate) server: ServerUrl,

    /// The API token, sent as `Authorization: Bearer <token>`: the server's
    /// `--api-token` (the admin), or a tenant's API key (`tck_…`, its own
    /// tasks only).
    #[arg(long, env = "TC_API_TOKEN", hide_env_values = true, global = true,
          value_parser = Quiet(token), help_heading = "Server")]
    pub(crate) token: Option<String>,
}

/// The output flag of one command.
#[derive(Debug, Clone, Copy, Default, Args)]
pub(crate) struct Output {
    /// Print the API's JSON instead of tables: one object per line (a list
    /// prints one line per task or destination).
    #[arg(long)]
    pub(crate) json: bool,
}

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

/// `tc-server destination …`.
#[derive(Debug, Args)]
pub(crate) struct DestinationArgs {
    #[command(flatten)]
    pub(crate) connection: Connection,
    #[command(flatten)]
    pub(crate) output: Output,
    #[command(subcommand)]
    pub(crate) command: DestinationCommand,
}

/// The destination subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum DestinationCommand {
    /// List every destination with tasks or settings: its settings, load and
    /// breaker.
    List(ListDestinationsArgs),
    /// Change a destination's settings; a flag left out keeps its value,
    /// `none` clears it. (Boxed: its many flags would make every variant
    /// as large.)
    Set(Box<SetArgs>),
    /// Hold a destination's tasks (they stay pending and use no attempt).
    Pause(DestinationName),
    /// Let a paused destination's tasks run again.
    Resume(DestinationName),
}

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

/// `destination list`.
#[derive(Debug, Args)]
pub(crate) struct ListDestinationsArgs {
    #[command(flatten)]
    pub(crate) output: Output,
}

/// A command on one destination.
#[derive(Debug, Args)]
pub(crate) struct DestinationName {
    /// The destination: a task URL's `host:port`, the port always written.
    #[arg(value_name = "HOST:PORT")]
    pub(crate) destination: String,
    #[command(flatten)]
    pub(crate) output: Output,
}

/// `destination set`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("settings").required(true).multiple(true)
    .args(["max_in_flight", "rate", "burst", "headers", "clear_headers", "signing_secrets", "clear_signing",
           "share_with_tenants", "share_with_none", "auth_basic", "oauth2_token_url", "jwt_audience",
           "clear_auth", "client_cert", "clear_client_cert", "ca_certs", "clear_ca_certs"])))]
#[command(group(ArgGroup::new("auth_kind").multiple(false)
    .args(["auth_basic", "oauth2_token_url", "jwt_audience", "clear_auth"])))]
pub(crate) struct SetArgs {
    /// The destination: a task URL's `host:port`, the port always written.
    #[arg(value_name = "HOST:PORT")]
    pub(crate) destination: String,
    /// The most calls in flight to it, on all nodes together (1..=10000), or
    /// `none`.
    #[arg(long, value_name = "N|none", value_parser = setting::<u32>)]
    pub(crate) max_in_flight: Option<Setting<u32>>,
    /// Calls per second (above 0), or `none`.
    #[arg(long, value_name = "R|none", value_parser = rate)]
    pub(crate) rate: Option<Setting<f64>>,
    /// The token bucket's size (1..=1000000), or `none` for the rate rounded
    /// up.
    #[arg(long, value_name = "B|none", value_parser = setting::<u32>)]
    pub(crate) burst: Option<Setting<u32>>,
    /// A header sent with every call to the destination, `Name: value`
    /// (repeatable); together they replace its default headers. A task's
    /// own header of the same name wins. Never shown back: views list the
    /// names only.
    // Checked after parsing, as the submit's.
    #[arg(
        long = "header",
        value_name = "NAME: VALUE",
        conflicts_with = "clear_headers"
    )]
    pub(crate) headers: Vec<String>,
    /// Remove the destination's default headers.
    #[arg(long)]
    pub(crate) clear_headers: bool,
    /// A Standard Webhooks secret (`whsec_…`) its calls are signed with;
    /// give two while rotating (each call then carries both signatures).
    /// They replace the destination's secrets. Never shown back.
    #[arg(
        long = "signing-secret",
        value_name = "SECRET",
        conflicts_with = "clear_signing"
    )]
    pub(crate) signing_secrets: Vec<String>,
    /// Remove the destination's signing secrets (calls of tasks without a
    /// tenant are then signed with the server's --signing-secret, if it
    /// has one).
    #[arg(long)]
    pub(crate) clear_signing: bool,
    /// A tenant whose tasks get the destination's headers and signing
    /// secrets (repeatable), or `*` for every tenant; together they replace
    /// the list. Other tenants' tasks are sent without them, signed with
    /// the tenant's own secrets (or unsigned), never with the server's.
    #[arg(
        long = "share-with-tenant",
        value_name = "NAME|*",
        conflicts_with = "share_with_none"
    )]
    pub(crate) share_with_tenants: Vec<String>,
    /// Share the destination's headers and signing secrets with no tenant
    /// (the default).
    #[arg(long)]
    pub(crate) share_with_none: bool,
    /// Authenticate every call with HTTP Basic, `USER:PASSWORD` (the
    /// password is never shown back).
    #[arg(long, value_name = "USER:PASSWORD")]
    pub(crate) auth_basic: Option<String>,
    /// Authenticate every call with an OAuth2 client credentials token from
    /// this token endpoint (with --oauth2-client-id and
    /// --oauth2-client-secret).
    #[arg(
        long,
        value_name = "URL",
        requires_all = ["oauth2_client_id", "oauth2_client_secret"]
    )]
    pub(crate) oauth2_token_url: Option<String>,
    /// The OAuth2 client's id.
    #[arg(long, value_name = "ID", requires = "oauth2_token_url")]
    pub(crate) oauth2_client_id: Option<String>,
    /// The OAuth2 client's secret (never shown back).
    #[arg(long, value_name = "SECRET", requires = "oauth2_token_url")]
    pub(crate) oauth2_client_secret: Option<String>,
    /// The scope asked for, space-separated.
    #[arg(long, value_name = "SCOPE", requires = "oauth2_token_url")]
    pub(crate) oauth2_scope: Option<String>,
    /// The audience asked for.
    #[arg(long, value_name = "AUDIENCE", requires = "oauth2_token_url")]
    pub(crate) oauth2_audience: Option<String>,
    /// Send the client's secret in the form body (`client_secret_post`)
    /// rather than HTTP Basic.
    #[arg(long, requires = "oauth2_token_url")]
    pub(crate) oauth2_secret_in_body: bool,
    /// Authenticate every call with a JWT the server signs for this
    /// audience (the server needs --issuer).
    #[arg(long, value_name = "AUDIENCE")]
    pub(crate) jwt_audience: Option<String>,
    /// The JWT's lifetime in seconds (60..=3600, default 300).
    #[arg(long, value_name = "SECONDS", requires = "jwt_audience")]
    pub(crate) jwt_lifetime_s: Option<u32>,
    /// Remove the destination's auth.
    #[arg(long)]
    pub(crate) clear_auth: bool,
    /// A PEM file of the client certificate chain (leaf first) presented on
    /// every TLS connection to the destination; needs --client-key. Views
    /// show its subject and expiry.
    #[arg(
        long,
        value_name = "FILE",
        requires = "client_key",
        conflicts_with = "clear_client_cert"
    )]
    pub(crate) client_cert: Option<PathBuf>,
    /// A PEM file of the client certificate's private key. Sent once, never
    /// shown back.
    #[arg(long, value_name = "FILE", requires = "client_cert")]
    pub(crate) client_key: Option<PathBuf>,
    /// Remove the destination's client certificate and key.
    #[arg(long)]
    pub(crate) clear_client_cert: bool,
    /// A PEM file of CA certificates trusted for this destination alone,
    /// besides the server's roots.
    #[arg(long, value_name = "FILE", conflicts_with = "clear_ca_certs")]
    pub(crate) ca_certs: Option<PathBuf>,
    /// Remove the destination's own CA certificates.
    #[arg(long)]
    pub(crate) clear_ca_certs: bool,
    #[command(flatten)]
    pub(crate) output: Output,
}

/// `tc-server tenant …`.
#[derive(Debug, Args)]
pub(crate) struct TenantArgs {
    #[command(flatten)]
    pub(crate) connection: Connection,
    #[command(flatten)]
    pub(crate) output: Output,
    #[command(subcommand)]
    pub(crate) command: TenantCommand,
}

/// The tenant subcommands (the admin token's: a tenant's key is refused).
#[derive(Debug, Subcommand)]
pub(crate) enum TenantCommand {
    /// Create a tenant: its keys reach only its own tasks.
    Create(TenantSettingsArgs),
    /// List every tenant with its settings, task counts and key count.
    List(ListDestinationsArgs),
    /// Show one tenant: settings, pending and running tasks, keys (ids).
    Get(TenantName),
    /// Change a tenant's settings; a flag left out keeps its value, `none`
    /// clears it (no limit).
    Set(TenantSettingsArgs),
    /// Delete a tenant and its keys (refused while it has tasks).
    Delete(TenantName),
    /// Make or revoke a tenant's API keys.
    Key(TenantKeyArgs),
}

/// `tenant create` and `tenant set`: the name and the settings given.
#[derive(Debug, Args)]
pub(crate) struct TenantSettingsArgs {
    /// The tenant's name: `[a-z0-9][a-z0-9_-]{0,62}`.
    #[arg(value_name = "NAME")]
    pub(crate) name: String,
    /// Its share of the worker slots against other tenants (1..=1000).
    #[arg(long, value_name = "N")]
    pub(crate) weight: Option<u32>,
    /// The most of its tasks not yet finished (1 or more), or `none`.
    #[arg(long, value_name = "N|none", value_parser = setting::<u64>)]
    pub(crate) max_pending: Option<Setting<u64>>,
    /// Its submits per second on each node (above 0), or `none`.
    #[arg(long, value_name = "R|none", value_parser = rate)]
    pub(crate) submit_rate_per_s: Option<Setting<f64>>,
    /// The submit bucket's size (1..=1000000), or `none` for the rate
    /// rounded up.
    #[arg(long, value_name = "B|none", value_parser = setting::<u32>)]
    pub(crate) submit_burst: Option<Setting<u32>>,
    /// A Standard Webhooks secret (`whsec_…`) the tenant's tasks are signed
    /// with, unless a destination shared with it signs them with its own;
    /// give two while rotating. They replace the tenant's secrets. Never
    /// shown back; its tasks are never signed with the server's secret.
    #[arg(
        long = "signing-secret",
        value_name = "SECRET",
        conflicts_with = "clear_signing"
    )]
    pub(crate) signing_secrets: Vec<String>,
    /// Remove the tenant's signing secrets (its tasks are then unsigned,
    /// but to a destination that shares its own with it).
    #[arg(long)]
    pub(crate) clear_signing: bool,
    #[command(flatten)]
    pub(crate) output: Output,
}

/// A command on one tenant.
#[derive(Debug, Args)]
pub(crate) struct TenantName {
    /// The tenant's name.
    #[arg(value_name = "NAME")]
    pub(crate) name: String,
    #[command(flatten)]
    pub(crate) output: Output,
}

/// `tenant key …`.
#[derive(Debug, Args)]
pub(crate) struct TenantKeyArgs {
    #[command(subcommand)]
    pub(crate) command: TenantKeyCommand,
}

/// The key subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum TenantKeyCommand {
    /// Make an API key for a tenant and print it: the only time it is shown
    /// (the server keeps its hash). Give it as the client's --token.
    Create(TenantName),
    /// Revoke a tenant's key: it stops working at once, on every node.
    Revoke(RevokeKeyArgs),
}

/// `tenant key revoke`.
#[derive(Debug, Args)]
pub(crate) struct RevokeKeyArgs {
    /// The tenant's name.
    #[arg(value_name = "NAME")]
    pub(crate) name: String,
    /// The key's id (`key_…`, as `tenant get` lists it).
    #[arg(value_name = "ID")]
    pub(crate) id: String,
    #[command(flatten)]
    pub(crate) output: Output,
}

/// A setting's new value: a value, or cleared (`none`, sent as `null`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Setting<T> {
    /// Set to this.
    To(T),
    /// Cleared.
    Clear,
}

pub(crate) fn setting<T: std::str::FromStr>(value: &str) -> Result<Setting<T>, String>
where
    T::Err: std::fmt::Display,
{
    if value.eq_ignore_ascii_case("none") {
        return Ok(Setting::Clear);
    }
    value
        .parse()
        .map(Setting::To)
        .map_err(|e| format!("{e}: give a number or none"))
}

/// `Name: value`, split at the first colon, the value trimmed of the
/// spaces around it (as a header line is read). The server checks the rest.
/// The error never repeats the value (nor the name, which is unknown when
/// the colon is missing): the caller names the header by its position.
pub(crate) fn header(value: &str) -> Result<(String, String), String> {
    let (name, rest) = value
        .split_once(':')
        .ok_or_else(|| "give a header as `Name: value`".to_owned())?;
    let name = name.trim();
    if name.is_empty() {
        return Err("the header's name is empty: give `Name: value`".to_owned());
    }
    Ok((name.to_owned(), rest.trim_matches([' ', '\t']).to_owned()))
}

/// One of the five methods, in any case (sent upper case).
fn method(value: &str) -> Result<String, String> {
    let upper = value.to_ascii_uppercase();
    match upper.as_str() {
        "POST" | "PUT" | "PATCH" | "DELETE" | "GET" => Ok(upper),
        _ => Err("give POST, PUT, PATCH, DELETE or GET".to_owned()),
    }
}

fn rate(value: &str) -> Result<Setting<f64>, String> {
    match setting::<f64>(value)? {
        // NaN and infinity have no JSON form.
        Setting::To(r) if !r.is_finite() => Err("must be a finite number, or none".into()),
        other => Ok(other),
    }
}

/// `tc-server healthcheck`: no token, no output flags; what a container's
/// HEALTHCHECK runs, where there is no curl.
#[derive(Debug, Args)]
pub(crate) struct HealthcheckArgs {
    /// The server's base URL (`http://` or `https://`).
    #[arg(long, env = "TC_SERVER_URL", default_value = "http://127.0.0.1:8080",
          value_parser = server_url)]
    pub(crate) server: ServerUrl,

    /// How long the whole check may take, connecting included, before it
    /// fails as unreachable (exit 3).
    #[arg(long, default_value_t = 5000,
          value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub(crate) timeout_ms: u64,
}

/// The server's base URL, checked: `http` or `https`, a host, no query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerUrl {
    /// `https` or not.
    pub(crate) tls: bool,
    /// `scheme://authority[/prefix]`, without a trailing `/`.
    pub(crate) base: String,
}

fn server_url(value: &str) -> Result<ServerUrl, String> {
    let uri: http::Uri = value
        .parse()
        .map_err(|e| format!("{e}: give a URL such as http://127.0.0.1:8080"))?;
    let tls = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => return Err("must start with http:// or https://".into()),
    };
    if uri.host().is_none_or(str::is_empty) {
        return Err("must name a host".into());
    }
    if uri.query().is_some() {
        return Err("must not have a query".into());
    }
    Ok(ServerUrl {
        tls,
        base: value.trim_end_matches('/').to_owned(),
    })
}

fn token(value: &str) -> Result<String, String> {
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    // It goes into a header: visible ASCII only.
    if !value.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("must be visible ASCII characters, without spaces".into());
    }
    Ok(value.to_owned())
}

/// A value parser whose refusal names the argument, never the value given:
/// clap's own message quotes the value, and a token or a JSON body (with
/// its `headers`) may be a credential. The argument is checked by the
/// wrapped function, whose message must not repeat the value either.
#[derive(Clone)]
struct Quiet<T>(fn(&str) -> Result<T, String>);

impl<T: Clone + Send + Sync + 'static> clap::builder::TypedValueParser for Quiet<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        let name = arg
            .and_then(clap::Arg::get_long)
            .map_or_else(|| "a value".to_owned(), |long| format!("--{long}"));
        let refuse = |why: &str| {
            cmd.clone().error(
                clap::error::ErrorKind::ValueValidation,
                format!("{name}: {why}"),
            )
        };
        let text = value.to_str().ok_or_else(|| refuse("not valid UTF-8"))?;
        (self.0)(text).map_err(|why| refuse(&why))
    }
}

/// A submit's payload: valid JSON, kept as written.
#[derive(Debug, Clone)]
pub(crate) struct Payload(pub(crate) Box<RawValue>);

pub(crate) fn payload(value: &str) -> Result<Payload, String> {
    let text = match value.strip_prefix('@') {
        Some(path) => {
            std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?
        }
        None => value.to_owned(),
    };
    // Surrounding whitespace (a file's last newline) is insignificant.
    RawValue::from_string(text.trim().to_owned())
        .map(Payload)
        .map_err(|e| format!("not valid JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_urls_are_checked() {
        let check = |value: &str, expected: Result<(&str, bool), &str>| {
            let got = server_url(value);
            match expected {
                Ok((base, tls)) => {
                    let url = got.unwrap_or_else(|e| panic!("{value}: {e}"));
                    assert_eq!((url.base.as_str(), url.tls), (base, tls), "{value}");
                }
                Err(part) => {
                    let e = got.expect_err(value);
                    assert!(e.contains(part), "{value}: {e}");
                }
            }
        };
        check(
            "http://127.0.0.1:8080",
            Ok(("http://127.0.0.1:8080", false)),
        );
        check(
            "http://127.0.0.1:8080/",
            Ok(("http://127.0.0.1:8080", false)),
        );
        check(
            "https://tc.example/api/",
            Ok(("https://tc.example/api", true)),
        );
        check("ftp://tc.example", Err("http:// or https://"));
        check("127.0.0.1:8080", Err("http:// or https://"));
        check("http://h/?a=1", Err("query"));
        check("not a url", Err("give a URL"));
    }

    #[test]
    fn settings_take_a_number_or_none() {
        assert_eq!(setting::<u32>("5"), Ok(Setting::To(5)));
        assert_eq!(setting::<u32>("NONE"), Ok(Setting::Clear));
        assert!(setting::<u32>("-1").is_err());
        assert_eq!(rate("2.5"), Ok(Setting::To(2.5)));
        assert!(rate("inf").is_err());
        assert!(rate("NaN").is_err());
    }

    #[test]
    fn payloads_are_kept_as_written() {
        let p = payload(r#" {"b": 1, "a": 1.0} "#).unwrap();
        assert_eq!(p.0.get(), r#"{"b": 1, "a": 1.0}"#);
        assert!(payload("{").unwrap_err().contains("not valid JSON"));
        assert!(
            payload("@/no/such/file")
                .unwrap_err()
                .contains("cannot read")
        );
    }

    #[test]
    fn tokens_must_fit_a_header() {
        assert!(token("s3cret").is_ok());
        assert!(token("").is_err());
        assert!(token("a b").is_err());
        assert!(token("a\nb").is_err());
    }
}
