//! The command line: every flag of `serve` is also an environment variable,
//! `TC_` followed by the flag's name in upper snake case; the OpenTelemetry
//! flags read OpenTelemetry's own variables (`OTEL_EXPORTER_OTLP_ENDPOINT`,
//! `OTEL_SERVICE_NAME`), which collectors and platforms already set.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::TypedValueParser as _;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::store::DbTarget;

/// taskcenter: a durable asynchronous task center. Register "POST this JSON
/// to this URL" tasks over HTTP; a worker performs them with retries.
#[derive(Debug, Parser)]
#[command(name = "tc-server", version, args_conflicts_with_subcommands = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
    /// With no subcommand, the flags of `serve`.
    #[command(flatten)]
    pub(crate) serve: ServeArgs,
}

/// What to run.
// Parsed once per process and matched at once: boxing the flags would only
// move them to the heap.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Serve the HTTP API and run the worker (the default).
    Serve(ServeArgs),
    /// Walk through submit, retry, idempotent resubmit, failure and cancel on
    /// a temporary database with a built-in downstream, then exit.
    Demo,
    /// Client: submit, show, list, watch, cancel, retry and delete tasks on a
    /// running server (--server, --token; --json for scripts).
    Task(crate::client::args::TaskArgs),
    /// Client: list destinations, change their settings, pause and resume
    /// them on a running server.
    Destination(crate::client::args::DestinationArgs),
    /// Client: create, list, get, pause, resume, trigger and delete
    /// schedules (tasks on a cron) on a running server.
    Schedule(crate::client::args::ScheduleArgs),
    /// Client: create, list, get, change and delete tenants, and make and
    /// revoke their API keys, on a running server (the admin token).
    Tenant(crate::client::args::TenantArgs),
    /// Client: topics, their subscriptions, publishing events and replays
    /// on a running server (a tenant's key or the admin token: each its own).
    Topic(crate::client::args::TopicArgs),
    /// Client: set, get, list and delete the limits of your flow keys on a
    /// running server (a tenant's key or the admin token: each its own).
    FlowKey(crate::client::flow_key::FlowKeyArgs),
    /// Client: `GET /healthz` on a running server (--server): exit 0 when it
    /// answers 200, 1 when it answers anything else (503: the store cannot
    /// write), 3 when it cannot be reached in --timeout-ms. The container
    /// image's HEALTHCHECK, which has no curl.
    Healthcheck(crate::client::args::HealthcheckArgs),
    /// Copy the SQLite database (--db) to a new file (--to), consistently,
    /// while a server may be running on it; `tc-server --db FILE` starts on
    /// the copy. PostgreSQL: use its own tools (pg_dump, base backups).
    Backup(crate::backup::BackupArgs),
    /// Keys that seal stored secrets at rest (`--secret-key-file`).
    SecretKey(SecretKeyArgs),
}

/// `tc-server secret-key …`.
#[derive(Debug, Args)]
pub(crate) struct SecretKeyArgs {
    #[command(subcommand)]
    pub(crate) command: SecretKeyCommand,
}

/// What to do with keys.
#[derive(Debug, Subcommand)]
pub(crate) enum SecretKeyCommand {
    /// Print a fresh key (the base64 of 32 random bytes) to put in a file
    /// for `--secret-key-file`.
    New,
}

/// Commit durability of the SQLite file (`PRAGMA synchronous`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum SyncMode {
    /// Every commit is fsynced: an acknowledged submit survives power loss.
    Full,
    /// Commits survive a process crash; the last ones may be lost on power loss.
    Normal,
}

/// How log lines look on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// One JSON object per line, the event's fields at the top level.
    Json,
    /// Human-readable lines.
    Text,
}

/// The flags of `serve`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ServeArgs {
    /// The store: an SQLite database file (created if missing), or a
    /// `postgres://` / `postgresql://` URL of a database several nodes share.
    /// TLS to PostgreSQL as libpq: `?sslmode=disable|prefer|require|
    /// verify-ca|verify-full` (default prefer) and `&sslrootcert=FILE` (PEM
    /// CA certificates, or `system`).
    #[arg(
        long,
        env = "TC_DB",
        default_value = "./taskcenter.db",
        value_parser = clap::builder::OsStringValueParser::new().map(|db| DbTarget::from_arg(&db))
    )]
    pub(crate) db: DbTarget,

    /// The address the HTTP API listens on; port 0 picks a free port (the
    /// `listening` log event says which).
    #[arg(long, env = "TC_LISTEN", default_value = "127.0.0.1:8080")]
    pub(crate) listen: SocketAddr,

    /// A second address that serves `GET /healthz` and `GET /metrics` only,
    /// with a small connection limit of its own (16): probes and scrapes are
    /// then answered however many API clients hold the main listener's
    /// connections. It asks no credential (bind it to the internal network):
    /// scrape `/metrics` here. The main listener keeps serving both as well,
    /// `/metrics` there behind the --api-token.
    #[arg(long, env = "TC_ADMIN_LISTEN")]
    pub(crate) admin_listen: Option<SocketAddr>,

    /// Serve `GET /metrics` on the main listener to anyone, as before: with
    /// --api-token it otherwise takes the admin token (its labels name
    /// every tenant). The --admin-listen address serves it without a
    /// credential either way.
    #[arg(long, env = "TC_METRICS_PUBLIC",
          action = clap::ArgAction::SetTrue,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub(crate) metrics_public: bool,

    /// The most downstream calls in flight at once.
    #[arg(long, env = "TC_CONCURRENCY", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) concurrency: u32,

    /// The timeout of one downstream call, for tasks that do not set
    /// `timeout_ms`.
    #[arg(long, env = "TC_CALL_TIMEOUT_MS", default_value_t = 5000,
          value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub(crate) call_timeout_ms: u64,

    /// The most tries of a task that does not set `max_attempts`.
    #[arg(long, env = "TC_MAX_ATTEMPTS", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) max_attempts: u32,

    /// The backoff before the first retry; it doubles per try, with jitter.
    #[arg(long, env = "TC_BACKOFF_BASE_MS", default_value_t = 200,
          value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub(crate) backoff_base_ms: u64,

    /// The largest backoff between two tries (at least --backoff-base-ms).
    #[arg(long, env = "TC_BACKOFF_CAP_MS", default_value_t = 8000,
          value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub(crate) backoff_cap_ms: u64,

    /// Consecutive failed attempts (connect errors, timeouts, 5xx) to one
    /// destination that open its circuit breaker: its tasks are then held,
    /// using no attempt, until a probe call succeeds.
    #[arg(long, env = "TC_BREAKER_FAILURES", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) breaker_failures: u32,

    /// How long an opened breaker holds its destination before one probe
    /// call is let through; doubles on each reopening, up to 10 minutes.
    #[arg(long, env = "TC_BREAKER_OPEN_MS", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub(crate) breaker_open_ms: u64,

    /// How long a due task waits to count one priority level higher within
    /// its destination: a task of priority 0 that waited this
    /// long is claimed like one of priority 1 due now, so none starves.
    #[arg(long, env = "TC_PRIORITY_AGING_MS", default_value_t = 60_000,
          value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub(crate) priority_aging_ms: u64,

    /// How long a claimed task is held before a restarted server may take it
    /// back; renewed every third of it while the call runs.
    #[arg(long, env = "TC_LEASE_MS", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(3..=86_400_000))]
    pub(crate) lease_ms: u64,

    /// The longest an idle worker sleeps before looking for due tasks
    /// again. It wakes at once for a submit, a retry or a resumed
    /// destination (on PostgreSQL, through NOTIFY from every node), and at
    /// the earliest due time of a task not yet due; this bounds how late a
    /// missed wake-up (a lost notification, a cap freed on another node)
    /// is noticed.
    #[arg(long, env = "TC_POLL_INTERVAL_MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub(crate) poll_interval_ms: u64,

    /// On SIGTERM or SIGINT, how long calls in flight may finish before they
    /// are interrupted and put back to pending.
    #[arg(long, env = "TC_SHUTDOWN_GRACE_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    pub(crate) shutdown_grace_ms: u64,

    /// When set, every /tasks route needs `Authorization: Bearer <token>`.
    /// Tenants need it: without it `POST /tenants` is refused, and a server
    /// whose database holds tenants does not start.
    #[arg(long, env = "TC_API_TOKEN", hide_env_values = true,
          value_parser = non_empty)]
    pub(crate) api_token: Option<String>,

    /// A Standard Webhooks secret (`whsec_` + base64 of 24 to 64 bytes) that
    /// signs the calls of tasks without a tenant to every destination
    /// without secrets of its own: they carry `webhook-id`,
    /// `webhook-timestamp` and `webhook-signature`. A tenant's tasks are
    /// never signed with it (they use the tenant's own secrets).
    /// Give it twice (or comma-separated) while rotating: each call is then
    /// signed with both. Make one with
    /// `echo "whsec_$(head -c 32 /dev/urandom | base64)"`.
    #[arg(
        long,
        env = "TC_SIGNING_SECRET",
        hide_env_values = true,
        value_delimiter = ',',
        value_name = "SECRET"
    )]
    pub(crate) signing_secret: Vec<String>,

    /// Only task urls under one of these prefixes are accepted (repeatable,
    /// or comma-separated; a comma always separates prefixes, write one
    /// inside a url as `%2C`). Matched on the normalised url at a path-segment
    /// boundary, hosts compared canonical (`127.1` is `127.0.0.1`):
    /// `http://hooks/a` admits `http://hooks/a/1`, not `http://hooks/ab` nor
    /// `http://hooks.evil.example/`. Also holds for tasks stored before the
    /// list was narrowed: a schedule's firing outside it creates no task
    /// (the schedule's `last_error`), a retry of such a task is refused.
    #[arg(long, env = "TC_ALLOW_URL_PREFIX", value_delimiter = ',',
          value_parser = non_empty)]
    pub(crate) allow_url_prefix: Vec<String>,

    /// Commit durability: `full` fsyncs every commit, `normal` survives a
    /// process crash but may lose the last commits on power loss.
    #[arg(long, env = "TC_SYNC", value_enum, default_value_t = SyncMode::Full)]
    pub(crate) sync: SyncMode,

    /// With a PostgreSQL `--db`: the most connections this node's pool opens
    /// (one more listens for the other nodes). A store operation waits up to
    /// 5 s for a free connection, then fails as unavailable (503). Size it
    /// to the store operations in flight at once: the API requests being
    /// served plus the worker's claim, heartbeat and completions (calls that
    /// end together complete together, a few milliseconds each); the default
    /// suits --concurrency up to about 64. Across the cluster, nodes ×
    /// (this + 1) must stay below PostgreSQL's max_connections.
    #[arg(long, env = "TC_PG_POOL_SIZE", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) pg_pool_size: u32,

    /// Export OpenTelemetry spans over OTLP/HTTP (protobuf) to this
    /// collector: its base URL, `http://host:4318` or `https://…` (verified
    /// with the system's root certificates); spans go to `<url>/v1/traces`
    /// (`/v1/traces` is not appended twice). A server span per API request
    /// (`/metrics` and `/healthz` make none) and a client span per
    /// downstream try, whose id each try's `traceparent` then carries.
    /// Unset: no spans; tasks still keep and send their W3C trace context.
    /// Export is batched and bounded (2048 spans queued at most, then
    /// dropped): an unreachable collector never slows the server. A failed
    /// export or a dropped span is counted
    /// (`taskcenter_otlp_export_failures_total`,
    /// `taskcenter_otlp_spans_dropped_total`) and logged as
    /// `otlp_export_failed` at most once a minute. Read from
    /// OpenTelemetry's own variable.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL")]
    pub(crate) otlp_endpoint: Option<String>,

    /// The full URL spans are posted to, used as given (nothing appended);
    /// wins over --otlp-endpoint.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", value_name = "URL")]
    pub(crate) otlp_traces_endpoint: Option<String>,

    /// Headers sent with every span export, `key=value,key2=value2`
    /// (values percent-decoded), e.g. a hosted collector's API key. Never
    /// logged; prefer the variable to the flag, which others may see in
    /// the process list.
    #[arg(
        long,
        env = "OTEL_EXPORTER_OTLP_HEADERS",
        value_name = "LIST",
        hide_env_values = true
    )]
    pub(crate) otlp_headers: Option<String>,

    /// The `service.name` of exported spans; further resource attributes
    /// come from `OTEL_RESOURCE_ATTRIBUTES` (`key=value,…`).
    #[arg(long, env = "OTEL_SERVICE_NAME", default_value = "taskcenter", value_parser = non_empty)]
    pub(crate) otlp_service_name: String,

    /// Log lines on stdout: `json` (one object per line) or `text`.
    #[arg(long, env = "TC_LOG_FORMAT", value_enum, default_value_t = LogFormat::Json)]
    pub(crate) log_format: LogFormat,

    /// The largest request body accepted, in bytes.
    #[arg(long, env = "TC_MAX_BODY_BYTES", default_value_t = tc_model::Limits::DEFAULT_MAX_BODY_BYTES as u64,
          value_parser = clap::value_parser!(u64).range(1..=1_073_741_824))]
    pub(crate) max_body_bytes: u64,

    /// The most bytes of a task's result that its callback's body (the
    /// task's view, POSTed to its `callback_url`) carries; a longer result
    /// is cut on a character boundary and the body says
    /// `result_truncated: true`.
    #[arg(long, env = "TC_CALLBACK_RESULT_BYTES", default_value_t = tc_model::callback::DEFAULT_RESULT_BYTES as u64,
          value_parser = clap::value_parser!(u64).range(0..=1_073_741_824))]
    pub(crate) callback_result_bytes: u64,

    /// The largest body of a batch submit (`POST /tasks/batch`), in bytes;
    /// each task in it is still held to --max-body-bytes.
    #[arg(long, env = "TC_MAX_BATCH_BODY_BYTES", default_value_t = 16 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(1..=1_073_741_824))]
    pub(crate) max_batch_body_bytes: u64,

    /// The most `GET /tasks/{id}?wait_ms=` requests waiting at once; beyond,
    /// they are answered 503. Never more than the connection limit less a
    /// 64th (1008 of 1024), so that waiters leave connections for other
    /// requests and health probes.
    #[arg(long, env = "TC_MAX_WAITERS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(crate) max_waiters: u64,

    /// The most `wait_ms` requests one client address may have waiting at
    /// once; beyond, they are answered `429 too_many_waiters`. Behind a
    /// --trusted-proxy the address is the one it forwards.
    #[arg(long, env = "TC_MAX_WAITERS_PER_CLIENT", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(crate) max_waiters_per_client: u64,

    /// How long `success` tasks are kept after they finish (e.g. `7d`,
    /// `12h`), or `forever`.
    #[arg(long, env = "TC_RETAIN_SUCCESS", default_value = "7d", value_parser = retention)]
    pub(crate) retain_success: Retain,

    /// How long `failed` tasks are kept after they finish, or `forever`.
    #[arg(long, env = "TC_RETAIN_FAILED", default_value = "30d", value_parser = retention)]
    pub(crate) retain_failed: Retain,

    /// How long `canceled` tasks are kept after they finish, or `forever`.
    #[arg(long, env = "TC_RETAIN_CANCELED", default_value = "7d", value_parser = retention)]
    pub(crate) retain_canceled: Retain,

    /// A file holding a key (the base64 of 32 random bytes; make one with
    /// `tc-server secret-key new`) that seals every stored secret at rest
    /// with AES-256-GCM: destination header values and signing secrets,
    /// tenants' signing secrets. Repeatable (or comma-separated) to rotate:
    /// the first seals, every one opens; at start, secrets in plain text or
    /// sealed by a listed older key are sealed again with the first. Every
    /// PostgreSQL node needs the same keys: a node that cannot open a stored
    /// secret refuses to start, naming the destination.
    #[arg(
        long,
        env = "TC_SECRET_KEY_FILE",
        value_delimiter = ',',
        value_name = "PATH"
    )]
    pub(crate) secret_key_file: Vec<PathBuf>,

    /// A PEM file of CA certificates that downstream `https://` calls trust
    /// in addition to the system's roots, e.g. an internal CA. Read at start;
    /// a missing file or one without a usable certificate stops the start.
    #[arg(long, env = "TC_DOWNSTREAM_CA_FILE")]
    pub(crate) downstream_ca_file: Option<PathBuf>,

    /// How long a response may make no progress because the client does not
    /// read; then its connection is closed, so that clients which stop
    /// reading cannot hold every connection.
    #[arg(long, env = "TC_WRITE_TIMEOUT_MS", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub(crate) write_timeout_ms: u64,

    /// A host name or address requests may be addressed to (the `Host`
    /// header, any port), repeatable or comma-separated; `*` allows any. A
    /// request to another host is refused `421 misdirected_request`, which
    /// stops DNS rebinding. Default: listening on a loopback address,
    /// `localhost`, `127.0.0.1`, `[::1]` and the listen address; on any other
    /// address (`0.0.0.0`), any host. Given hosts are allowed besides those
    /// loopback names.
    #[arg(long = "allowed-host", env = "TC_ALLOWED_HOSTS", value_delimiter = ',',
          value_parser = allowed_host)]
    pub(crate) allowed_hosts: Vec<String>,

    /// A reverse proxy in front of this server: an IP address or network
    /// (`10.0.0.0/8`, `::1`), repeatable or comma-separated. From these peers
    /// `X-Forwarded-For` names the client (for per-client limits),
    /// `X-Forwarded-Proto: https` (or `Forwarded: proto=https`) marks the
    /// dashboard's session cookie `Secure` and makes `https` this server's
    /// scheme, and `X-Forwarded-Host` (or `Forwarded: host=`) is the host a
    /// request's `Origin` is compared with; from any other peer those
    /// headers are ignored. Needed behind a TLS-terminating proxy: without
    /// it the browser's `https://` origin differs from the `http` this
    /// server sees, and the dashboard's login is refused `403 cross_origin`.
    #[arg(long = "trusted-proxy", env = "TC_TRUSTED_PROXIES", value_delimiter = ',',
          value_parser = ip_network)]
    pub(crate) trusted_proxies: Vec<ipnet::IpNet>,

    /// Refuse downstream calls whose destination, resolved at connect time,
    /// is loopback, private, link-local, CGNAT, unspecified, broadcast,
    /// multicast, or any other block of the IANA special-purpose registries
    /// that is not globally reachable (benchmarking, documentation,
    /// reserved, 6to4, Teredo…; IPv4-mapped forms too): the try fails at
    /// once with reason
    /// `destination_denied`. Off by default because the quick start calls
    /// 127.0.0.1; turn it on where clients are not trusted with the network.
    #[arg(long, env = "TC_DENY_PRIVATE_DESTINATIONS",
          action = clap::ArgAction::SetTrue,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub(crate) deny_private_destinations: bool,

    /// The issuer of the JWTs this server signs for destinations whose
    /// `auth` is `jwt` (their `iss`): an absolute http(s) url whose
    /// `/.well-known/jwks.json` and `/.well-known/openid-configuration`
    /// reach this server. Without it a `jwt` auth is refused.
    #[arg(long, env = "TC_ISSUER", value_name = "URL", value_parser = issuer_url)]
    pub(crate) issuer: Option<String>,

    /// A P-256 private key (PKCS#8 PEM) that signs those JWTs (repeatable:
    /// the first signs, every one is published, for rotation). Without it
    /// the server makes one key, keeps it in the database and shares it
    /// with every node. Needs --issuer.
    #[arg(long, value_name = "FILE")]
    pub(crate) jwt_key_file: Vec<std::path::PathBuf>,
}

/// `--issuer`: an absolute http or https url.
fn issuer_url(value: &str) -> Result<String, String> {
    let value = value.trim();
    let ok = (value.starts_with("https://") || value.starts_with("http://"))
        && value
            .parse::<http::Uri>()
            .is_ok_and(|u| u.host().is_some_and(|h| !h.is_empty()));
    if ok {
        Ok(value.to_owned())
    } else {
        Err("must be an absolute http or https url, as https://tasks.example.com".to_owned())
    }
}

/// A retention: a duration, or none (`forever`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Retain(pub(crate) Option<std::time::Duration>);

/// A humantime duration (`7d`, `36h`, `90s`) or `forever`.
fn retention(value: &str) -> Result<Retain, String> {
    if value.trim().eq_ignore_ascii_case("forever") {
        return Ok(Retain(None));
    }
    humantime::parse_duration(value.trim())
        .map(|d| Retain(Some(d)))
        .map_err(|e| format!("{e}: give a duration such as 7d, 12h or 30m, or forever"))
}

fn allowed_host(value: &str) -> Result<String, String> {
    tc_http::check_allowed_host(value).map(|()| value.trim().to_owned())
}

/// An IP network (`10.0.0.0/8`) or one address (`10.1.2.3`, `::1`).
fn ip_network(value: &str) -> Result<ipnet::IpNet, String> {
    let value = value.trim();
    value
        .parse::<ipnet::IpNet>()
        .or_else(|_| value.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("{value:?} is not an IP address or network (10.0.0.0/8, ::1)"))
}

fn non_empty(value: &str) -> Result<String, String> {
    if value.trim().is_empty() {
        Err("must not be empty".to_owned())
    } else {
        Ok(value.to_owned())
    }
}

impl ServeArgs {
    /// Checks what one flag alone cannot: the relations between flags, and
    /// the signing secrets (here rather than in a value parser, whose error
    /// would repeat the secret on the terminal).
    pub(crate) fn check(&self) -> Result<(), clap::Error> {
        use clap::CommandFactory;
        if let Err(why) = self.signing_secrets() {
            return Err(Cli::command().error(
                clap::error::ErrorKind::ValueValidation,
                format!("--signing-secret: {why}"),
            ));
        }
        if !self.jwt_key_file.is_empty() && self.issuer.is_none() {
            return Err(Cli::command().error(
                clap::error::ErrorKind::MissingRequiredArgument,
                "--jwt-key-file needs --issuer (or TC_ISSUER): the JWTs' iss",
            ));
        }
        if self.backoff_cap_ms < self.backoff_base_ms {
            return Err(Cli::command().error(
                clap::error::ErrorKind::ArgumentConflict,
                format!(
                    "--backoff-cap-ms ({}) must be at least --backoff-base-ms ({})",
                    self.backoff_cap_ms, self.backoff_base_ms
                ),
            ));
        }
        if let Err(why) = self.otlp_sources().resolve(&self.otlp_service_name) {
            return Err(
                Cli::command().error(clap::error::ErrorKind::ValueValidation, why.to_string())
            );
        }
        Ok(())
    }

    /// Where spans go, as the flags and OpenTelemetry's variables say.
    pub(crate) fn otlp_sources(&self) -> crate::telemetry::OtlpSources<'_> {
        crate::telemetry::OtlpSources {
            endpoint: self.otlp_endpoint.as_deref(),
            traces_endpoint: self.otlp_traces_endpoint.as_deref(),
            headers: self.otlp_headers.as_deref(),
        }
    }

    /// The server's own signing secrets (see `--signing-secret`); the error
    /// never repeats one.
    pub(crate) fn signing_secrets(&self) -> Result<tc_model::signing::SigningSecrets, String> {
        tc_model::signing::SigningSecrets::parse(&self.signing_secret)
    }

    pub(crate) fn call_timeout(&self) -> Duration {
        Duration::from_millis(self.call_timeout_ms)
    }

    pub(crate) fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    pub(crate) fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.poll_interval_ms)
    }

    pub(crate) fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.shutdown_grace_ms)
    }

    pub(crate) fn retry_policy(&self) -> tc_retry::Policy {
        tc_retry::Policy {
            base: Duration::from_millis(self.backoff_base_ms),
            cap: Duration::from_millis(self.backoff_cap_ms),
            ..tc_retry::Policy::default()
        }
    }
}

impl Cli {
    /// The serve flags to run with: those after `serve`, or the top-level ones.
    pub(crate) fn serve_args(&self) -> &ServeArgs {
        match &self.command {
            Some(Command::Serve(args)) => args,
            _ => &self.serve,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        let cli = Cli::try_parse_from(std::iter::once("tc-server").chain(args.iter().copied()))?;
        cli.serve_args().check()?;
        Ok(cli)
    }

    #[test]
    fn the_issuer_is_a_url_and_key_files_need_it() {
        let issuer = |args: &[&str]| parse(args).map(|c| c.serve_args().issuer.clone());
        assert_eq!(issuer(&[]).unwrap(), None);
        assert_eq!(
            issuer(&["--issuer", "https://tasks.example.com"]).unwrap(),
            Some("https://tasks.example.com".to_owned())
        );
        for bad in ["tasks.example.com", "ftp://x/", "https://", ""] {
            assert!(issuer(&["--issuer", bad]).is_err(), "{bad:?}");
        }
        let refused = parse(&["--jwt-key-file", "k.pem"]).unwrap_err().to_string();
        assert!(
            refused.contains("--jwt-key-file needs --issuer"),
            "{refused}"
        );
        let keys = parse(&[
            "--issuer",
            "https://t.example",
            "--jwt-key-file",
            "a.pem",
            "--jwt-key-file",
            "b.pem",
        ])
        .unwrap();
        assert_eq!(keys.serve_args().jwt_key_file.len(), 2);
    }

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults_match_the_documented_ones() {
        let cli = parse(&[]).unwrap();
        assert!(cli.command.is_none());
        let a = cli.serve_args();
        assert_eq!(a.db, DbTarget::Sqlite(PathBuf::from("./taskcenter.db")));
        assert_eq!(a.listen, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(
            (a.concurrency, a.call_timeout_ms, a.max_attempts),
            (8, 5000, 3)
        );
        assert_eq!(
            (a.backoff_base_ms, a.backoff_cap_ms, a.lease_ms),
            (200, 8000, 30_000)
        );
        assert_eq!((a.poll_interval_ms, a.shutdown_grace_ms), (1000, 10_000));
        assert_eq!(a.api_token, None);
        assert!(a.allow_url_prefix.is_empty());
        assert_eq!((a.sync, a.log_format), (SyncMode::Full, LogFormat::Json));
        assert_eq!(a.pg_pool_size, 16);
        assert_eq!(a.max_body_bytes, 1024 * 1024);
        assert_eq!(a.callback_result_bytes, 65536);
        assert_eq!(a.downstream_ca_file, None);
    }

    #[test]
    fn serve_flags_work_before_and_after_the_subcommand() {
        let flags = [
            "--listen",
            "127.0.0.1:0",
            "--allow-url-prefix",
            "http://a/",
            "--allow-url-prefix",
            "http://b/,http://c/",
        ];
        let top = parse(&flags).unwrap();
        let mut with_serve = vec!["serve"];
        with_serve.extend(flags);
        let sub = parse(&with_serve).unwrap();
        for cli in [top, sub] {
            let a = cli.serve_args();
            assert_eq!(a.listen.port(), 0);
            assert_eq!(a.allow_url_prefix, ["http://a/", "http://b/", "http://c/"]);
        }
        assert!(matches!(
            parse(&["demo"]).unwrap().command,
            Some(Command::Demo)
        ));
    }

    /// The client's flags: --server and --token before or after the
    /// subcommand, --json for output everywhere but on `submit`, where it is
    /// the payload (and the group's --json asks for JSON output).
    #[test]
    fn client_flags_parse_where_the_issue_puts_them() {
        use crate::client::args::{DestinationCommand, Setting, TaskCommand};
        let task = |args: &[&str]| match parse(args).unwrap().command {
            Some(Command::Task(t)) => t,
            other => panic!("{args:?}: {other:?}"),
        };
        let before = task(&[
            "task",
            "--server",
            "http://h:1/",
            "--token",
            "t",
            "get",
            "x",
        ]);
        let after = task(&["task", "get", "x", "--server", "http://h:1", "--token", "t"]);
        for t in [before, after] {
            assert_eq!(t.connection.server.base, "http://h:1");
            assert_eq!(t.connection.token.as_deref(), Some("t"));
            assert!(matches!(t.command, TaskCommand::Get(ref a) if a.id == "x" && !a.output.json));
        }
        let list = task(&["task", "list", "--json", "--state", "failed", "--all"]);
        assert!(matches!(list.command, TaskCommand::List(ref a) if a.output.json && a.all));
        let submit = task(&[
            "task",
            "submit",
            "--url",
            "http://d/",
            "--json",
            r#"{"b":1,"a":2}"#,
        ]);
        assert!(!submit.output.json);
        match submit.command {
            TaskCommand::Submit(s) => {
                assert_eq!(
                    s.payload.map(|p| p.0.get().to_owned()).as_deref(),
                    Some(r#"{"b":1,"a":2}"#)
                );
                assert_eq!((s.key, s.wait), (None, false));
            }
            other => panic!("{other:?}"),
        }
        // Without --json, as the API: nothing sent, so a POST sends `{}`.
        match task(&["task", "submit", "--url", "u"]).command {
            TaskCommand::Submit(s) => {
                assert_eq!((s.method.as_deref(), s.payload.is_none()), (None, true));
            }
            other => panic!("{other:?}"),
        }
        // With a method, the payload may be left out (a GET has none).
        match task(&["task", "submit", "--url", "u", "--method", "get"]).command {
            TaskCommand::Submit(s) => {
                assert_eq!(
                    (s.method.as_deref(), s.payload.is_none()),
                    (Some("GET"), true)
                );
            }
            other => panic!("{other:?}"),
        }
        let json_out = task(&[
            "task", "--json", "submit", "--url", "u", "--json", "[]", "--wait",
        ]);
        assert!(json_out.output.json);
        assert!(
            matches!(json_out.command, TaskCommand::Submit(ref s) if s.wait && s.payload.as_ref().is_some_and(|p| p.0.get() == "[]"))
        );
        match parse(&[
            "destination",
            "set",
            "h:1",
            "--rate",
            "2.5",
            "--burst",
            "none",
        ])
        .unwrap()
        .command
        {
            Some(Command::Destination(d)) => match d.command {
                DestinationCommand::Set(s) => {
                    assert_eq!(
                        (s.rate, s.burst),
                        (Some(Setting::To(2.5)), Some(Setting::Clear))
                    );
                    assert_eq!(s.max_in_flight, None);
                }
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }

    /// Bad client command lines are usage errors (exit 2) naming the flag.
    #[test]
    fn bad_client_command_lines_are_usage_errors() {
        let check = |args: &[&str], part: &str| {
            let err = parse(args).expect_err(&format!("{args:?} must be refused"));
            assert_eq!(err.exit_code(), 2, "{args:?}");
            let msg = err.to_string();
            assert!(msg.contains(part), "{args:?}: {msg}");
        };
        check(&["task", "get"], "<ID>");
        check(
            &["task", "submit", "--url", "u", "--method", "HEAD"],
            "--method",
        );
        // A malformed `--header` is refused after parsing, naming its
        // position and never its value (client/destination.rs's
        // `headers_object` and its table test): clap takes any text.
        check(
            &[
                "destination",
                "set",
                "h:1",
                "--header",
                "X-A: 1",
                "--clear-headers",
            ],
            "--clear-headers",
        );
        check(
            &[
                "destination",
                "set",
                "h:1",
                "--signing-secret",
                "whsec_x",
                "--clear-signing",
            ],
            "--clear-signing",
        );
        check(
            &["task", "submit", "--url", "u", "--json", "{"],
            "not valid JSON",
        );
        check(&["task", "list", "--limit", "0"], "--limit");
        check(&["task", "list", "--limit", "501"], "--limit");
        check(&["task", "list", "--state", "done"], "--state");
        check(&["task", "list", "--all", "--after", "5"], "--after");
        check(&["task", "bulk", "explode"], "explode");
        check(&["task", "get", "x", "--server", "ftp://h"], "--server");
        check(&["task", "get", "x", "--token", ""], "--token");
        check(&["destination", "set", "h:1"], "--max-in-flight");
        check(&["destination", "set", "h:1", "--rate", "fast"], "--rate");
        check(&["destination", "pause"], "HOST:PORT");
        check(&["--listen", "127.0.0.1:0", "task", "list"], "task");
    }

    /// Each bad command line is refused, and the message names the flag.
    #[test]
    fn bad_values_are_refused_naming_the_flag() {
        let check = |args: &[&str], flag: &str| {
            let err = parse(args).expect_err(&format!("{args:?} must be refused"));
            let msg = err.to_string();
            assert!(msg.contains(flag), "{args:?}: {msg}");
        };
        check(&["--concurrency", "0"], "--concurrency");
        check(&["--concurrency=-1"], "--concurrency");
        check(&["--pg-pool-size", "0"], "--pg-pool-size");
        check(&["--max-attempts", "0"], "--max-attempts");
        check(&["--max-attempts", "101"], "--max-attempts");
        check(&["--call-timeout-ms", "0"], "--call-timeout-ms");
        check(&["--call-timeout-ms", "600001"], "--call-timeout-ms");
        check(&["--lease-ms", "0"], "--lease-ms");
        check(&["--poll-interval-ms", "0"], "--poll-interval-ms");
        check(&["--backoff-base-ms", "0"], "--backoff-base-ms");
        check(
            &["--backoff-base-ms", "500", "--backoff-cap-ms", "100"],
            "--backoff-cap-ms",
        );
        check(&["--listen", "localhost"], "--listen");
        check(&["--admin-listen", "localhost"], "--admin-listen");
        check(&["--sync", "off"], "--sync");
        check(&["--log-format", "xml"], "--log-format");
        check(&["--api-token", ""], "--api-token");
        check(&["--max-body-bytes", "0"], "--max-body-bytes");
        check(
            &["--max-waiters-per-client", "0"],
            "--max-waiters-per-client",
        );
        check(&["--downstream-ca-file"], "--downstream-ca-file");
        check(&["--trusted-proxy", "proxy.local"], "--trusted-proxy");
        check(
            &["--allowed-host", "tasks.example.com:443"],
            "--allowed-host",
        );
        check(
            &["--allowed-host", "http://tasks.example.com"],
            "--allowed-host",
        );
        check(&["--trusted-proxy", "10.0.0.0/33"], "--trusted-proxy");
        check(&["--no-such-flag"], "--no-such-flag");
        check(&["--signing-secret", "whsec_tooShort"], "--signing-secret");
        let three = [SECRET, SECRET, SECRET].join(",");
        check(&["--signing-secret", &three], "--signing-secret");
    }

    /// A Standard Webhooks secret of 24 bytes.
    const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

    #[test]
    fn signing_secrets_are_checked_and_never_repeated_in_an_error() {
        let secrets = |args: &[&str]| {
            parse(args)
                .unwrap()
                .serve_args()
                .signing_secrets()
                .map(|s| s.len())
        };
        assert_eq!(secrets(&[]), Ok(0));
        assert_eq!(secrets(&["--signing-secret", SECRET]), Ok(1));
        let two = format!("{SECRET},{SECRET}");
        assert_eq!(secrets(&["--signing-secret", &two]), Ok(2));
        assert_eq!(
            secrets(&["--signing-secret", SECRET, "--signing-secret", SECRET]),
            Ok(2)
        );
        let bad = "whsec_s3cr3t-but-not-base64";
        let message = parse(&["--signing-secret", bad]).unwrap_err().to_string();
        assert!(message.contains("--signing-secret"), "{message}");
        assert!(!message.contains("s3cr3t"), "repeats the secret: {message}");
    }
}
