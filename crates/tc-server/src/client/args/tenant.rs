//! The arguments of `tc-server tenant …`: tenants and their keys.

use clap::{Args, Subcommand};

use super::{Connection, ListDestinationsArgs, Output, Setting, rate, setting};

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
