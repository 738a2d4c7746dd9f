//! The arguments of `tc-server destination …`: list, get, set, pause and
//! resume.

use std::path::PathBuf;

use clap::{ArgGroup, Args, Subcommand};

use super::{Connection, ListDestinationsArgs, Output, Setting, rate, setting};

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
