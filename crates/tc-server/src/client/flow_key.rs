//! `tc-server flow-key …`: set, get, list and delete the limits of your
//! flow keys (`/flow-keys`), with a tenant's key or the admin token (each
//! works on its own keys). Text for people, or the API's JSON with
//! `--json`.

use std::time::Duration;

use clap::{Args, Subcommand};
use http::Method;
use serde_json::{Map, Value};

use super::args::{Connection, Output, Setting};
use super::error::ClientError;
use super::format::{Cell, Table, sanitize};
use super::http::{Api, escape};
use super::output::{Out, note};
use super::view::{field, text};

/// `tc-server flow-key …`.
#[derive(Debug, Args)]
pub(crate) struct FlowKeyArgs {
    #[command(flatten)]
    pub(crate) connection: Connection,
    #[command(flatten)]
    pub(crate) output: Output,
    #[command(subcommand)]
    pub(crate) command: FlowKeyCommand,
}

/// The flow-key subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum FlowKeyCommand {
    /// Set a key's limits (a limit left out is kept; `none` removes it).
    Set(SetKeyArgs),
    /// Show one key: its limits, running and pending tasks.
    Get(KeyName),
    /// List your keys that have limits.
    List(ListKeys),
    /// Remove a key's limits (its tasks stay).
    Delete(KeyName),
}

/// A key named on the command line.
#[derive(Debug, Args)]
pub(crate) struct KeyName {
    /// The flow key (1 to 128 printable ASCII characters).
    pub(crate) key: String,
    #[command(flatten)]
    pub(crate) output: Output,
}

/// `flow-key list`.
#[derive(Debug, Args)]
pub(crate) struct ListKeys {
    #[command(flatten)]
    pub(crate) output: Output,
}

/// `flow-key set`.
#[derive(Debug, Args)]
pub(crate) struct SetKeyArgs {
    /// The flow key.
    pub(crate) key: String,
    /// Its tasks running at once, on every node together (1 to 10000), or
    /// `none`.
    #[arg(long, value_parser = super::args::setting::<u32>)]
    pub(crate) max_in_flight: Option<Setting<u32>>,
    /// Its calls per second, on every node together, or `none`.
    #[arg(long, value_parser = super::args::setting::<f64>)]
    pub(crate) rate: Option<Setting<f64>>,
    /// Its bucket's size (1 to 1000000), or `none` for the rate rounded up.
    #[arg(long, value_parser = super::args::setting::<u32>)]
    pub(crate) burst: Option<Setting<u32>>,
    #[command(flatten)]
    pub(crate) output: Output,
}

fn path(key: &str) -> String {
    format!("/flow-keys/{}", escape(key))
}

fn setting<T: Into<Value>>(s: Setting<T>) -> Value {
    match s {
        Setting::To(v) => v.into(),
        Setting::Clear => Value::Null,
    }
}

/// Runs one `flow-key` subcommand.
pub(crate) async fn run(args: &FlowKeyArgs) -> Result<(), ClientError> {
    let api = Api::new(&args.connection)?;
    let out = |leaf: Output| Out::new(args.output.json || leaf.json);
    match &args.command {
        FlowKeyCommand::Set(a) => {
            let mut body = Map::new();
            if let Some(v) = a.max_in_flight {
                body.insert("max_in_flight".into(), setting(v));
            }
            if let Some(v) = a.rate {
                body.insert("rate_per_s".into(), setting(v));
            }
            if let Some(v) = a.burst {
                body.insert("burst".into(), setting(v));
            }
            if body.is_empty() {
                return Err(ClientError::Usage(
                    "give at least one of --max-in-flight, --rate, --burst".into(),
                ));
            }
            let body = Value::Object(body).to_string();
            let answer = api.json(Method::PUT, &path(&a.key), Some(body)).await?;
            show(&out(a.output), &answer)
        }
        FlowKeyCommand::Get(a) => {
            let answer = api.json(Method::GET, &path(&a.key), None).await?;
            show(&out(a.output), &answer)
        }
        FlowKeyCommand::List(a) => {
            let answer = api.json(Method::GET, "/flow-keys", None).await?;
            list(&out(a.output), &answer)
        }
        FlowKeyCommand::Delete(a) => {
            api.send(Method::DELETE, &path(&a.key), None, Duration::ZERO)
                .await?;
            if !out(a.output).json {
                note(&format!(
                    "removed the limits of flow key {}",
                    sanitize(&a.key)
                ));
            }
            Ok(())
        }
    }
}

const COLUMNS: [&str; 6] = [
    "key",
    "max_in_flight",
    "rate_per_s",
    "burst",
    "in_flight",
    "pending",
];

/// One key: its JSON, or one `field: value` a line.
fn show(out: &Out, key: &Value) -> Result<(), ClientError> {
    if out.json {
        return out.json_line(key);
    }
    let mut lines = String::new();
    for name in COLUMNS {
        lines.push_str(&format!("{name}: {}\n", sanitize(&text(field(key, name)))));
    }
    out.text(&lines)
}

fn list(out: &Out, answer: &Value) -> Result<(), ClientError> {
    let keys = field(answer, "flow_keys").as_array().ok_or_else(|| {
        ClientError::Protocol(format!("a flow key list without flow_keys: {answer}"))
    })?;
    if out.json {
        for key in keys {
            out.json_line(key)?;
        }
        return Ok(());
    }
    if keys.is_empty() {
        note("no flow keys have limits");
        return Ok(());
    }
    let rows: Vec<Vec<Cell>> = keys
        .iter()
        .map(|k| {
            COLUMNS
                .iter()
                .map(|name| Cell::new(&text(field(k, name))))
                .collect()
        })
        .collect();
    out.text(&Table::new(&COLUMNS).render(&rows, out.colour))
}
