//! What [`crate::serve::start`] runs with ([`Settings`]), from the command
//! line (`Settings::from_args`) or from the demo: the store's, the
//! worker's and the API's settings, each read from the flags in one place.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tc_store::{StoreConfig, Synchronous};
use tc_store_pg::PgConfig;
use tc_worker::WorkerConfig;

use crate::cli::{ServeArgs, SyncMode};
use crate::store::DbTarget;

/// Everything [`crate::serve::start`] needs, from the command line or the demo.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) db: DbTarget,
    pub(crate) listen: SocketAddr,
    /// Where `/healthz` and `/metrics` are served alone, if anywhere.
    pub(crate) admin_listen: Option<SocketAddr>,
    pub(crate) store: StoreConfig,
    pub(crate) worker: WorkerConfig,
    pub(crate) http: tc_http::HttpConfig,
    /// PEM CA certificates downstream calls trust besides the system's.
    pub(crate) downstream_ca_file: Option<PathBuf>,
    /// Refuse non-public downstream destinations (SSRF protection).
    pub(crate) deny_private_destinations: bool,
    /// How long finished tasks are kept.
    pub(crate) retention: tc_worker::Retention,
    /// With a PostgreSQL `db`: how the store runs (its pool's size).
    pub(crate) postgres: PgConfig,
    /// Where spans are exported (`--otlp-endpoint`), if anywhere.
    pub(crate) otlp: Option<crate::telemetry::OtlpConfig>,
    /// `--issuer` and `--jwt-key-file`.
    pub(crate) jwt: crate::jwt::JwtSetup,
    /// The key files that seal stored secrets (`--secret-key-file`; the
    /// first seals, every one opens).
    pub(crate) secret_key_files: Vec<PathBuf>,
}

/// `--callback-result-bytes`: a store setting on either adapter, since the
/// store builds a callback in the transaction that ends its task.
fn callback_result_bytes(args: &ServeArgs) -> usize {
    usize::try_from(args.callback_result_bytes).unwrap_or(usize::MAX)
}

impl Settings {
    pub(crate) fn from_args(args: &ServeArgs) -> Settings {
        Settings {
            db: args.db.clone(),
            listen: args.listen,
            admin_listen: args.admin_listen,
            store: StoreConfig {
                synchronous: match args.sync {
                    SyncMode::Full => Synchronous::Full,
                    SyncMode::Normal => Synchronous::Normal,
                },
                callback_result_bytes: callback_result_bytes(args),
                ..StoreConfig::default()
            },
            worker: worker_config(args),
            http: http_config(args),
            downstream_ca_file: args.downstream_ca_file.clone(),
            deny_private_destinations: args.deny_private_destinations,
            retention: tc_worker::Retention {
                success: args.retain_success.0,
                failed: args.retain_failed.0,
                canceled: args.retain_canceled.0,
            },
            postgres: PgConfig {
                pool_size: args.pg_pool_size as usize,
                callback_result_bytes: callback_result_bytes(args),
                ..PgConfig::default()
            },
            jwt: crate::jwt::JwtSetup {
                issuer: args.issuer.clone(),
                key_files: args.jwt_key_file.clone(),
            },
            // Checked before (`ServeArgs::check`): none when invalid.
            otlp: args
                .otlp_sources()
                .resolve(&args.otlp_service_name)
                .ok()
                .flatten(),
            secret_key_files: args.secret_key_file.clone(),
        }
    }
}

/// The worker's settings from the flags.
fn worker_config(args: &ServeArgs) -> WorkerConfig {
    let lease = args.lease();
    WorkerConfig {
        concurrency: args.concurrency as usize,
        lease,
        poll_interval: args.poll_interval(),
        shutdown_grace: args.shutdown_grace(),
        // Twice per lease: a task left by a crashed run is picked up
        // at most one and a half leases after the crash.
        recover_interval: (lease / 2).max(Duration::from_millis(1)),
        retry: args.retry_policy(),
        jitter_seed: None,
        breaker: tc_worker::BreakerPolicy {
            failures: args.breaker_failures,
            open: Duration::from_millis(args.breaker_open_ms),
            ..tc_worker::BreakerPolicy::default()
        },
        settings_interval: Duration::from_secs(1),
        // Checked before (`ServeArgs::check`): none when invalid.
        signing_secrets: args.signing_secrets().unwrap_or_default(),
        // Set by `run` once the exporter is up (`--otlp-endpoint`).
        tracer: None,
        // Schedules made on other nodes are seen within this; a
        // change through this node wakes its loop at once.
        schedules_interval: Duration::from_secs(30),
        // The same list the API checks submits against: a schedule
        // made before it was narrowed fires nothing outside it.
        allow_url_prefixes: args.allow_url_prefix.clone(),
        // Set by `start` once the keys are read (`--issuer`).
        jwt: None,
        priority_aging: Duration::from_millis(args.priority_aging_ms),
        // Set by `start` for PostgreSQL, where nodes share the claims.
        claim_gather: tc_worker::DEFAULT_CLAIM_GATHER,
    }
}

/// The API's settings from the flags.
fn http_config(args: &ServeArgs) -> tc_http::HttpConfig {
    tc_http::HttpConfig {
        max_body_bytes: usize::try_from(args.max_body_bytes).unwrap_or(usize::MAX),
        max_batch_body_bytes: usize::try_from(args.max_batch_body_bytes).unwrap_or(usize::MAX),
        max_waiters: usize::try_from(args.max_waiters).unwrap_or(usize::MAX),
        max_waiters_per_client: usize::try_from(args.max_waiters_per_client).unwrap_or(usize::MAX),
        default_max_attempts: args.max_attempts,
        default_timeout: args.call_timeout(),
        api_token: args.api_token.clone(),
        metrics_public: args.metrics_public,
        allow_url_prefixes: args.allow_url_prefix.clone(),
        shutdown_grace: args.shutdown_grace(),
        write_timeout: Duration::from_millis(args.write_timeout_ms),
        trusted_proxies: args.trusted_proxies.clone(),
        allowed_hosts: args.allowed_hosts.clone(),
        ..tc_http::HttpConfig::default()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::Cli;

    /// The settings these flags make, as `serve` makes them.
    pub(crate) fn settings(args: &[&str]) -> Settings {
        let cli =
            Cli::try_parse_from(std::iter::once("tc-server").chain(args.iter().copied())).unwrap();
        Settings::from_args(cli.serve_args())
    }

    #[test]
    fn every_flag_reaches_the_component_it_configures() {
        let s = settings(&[
            "--db=/tmp/x.db",
            "--listen=127.0.0.1:0",
            "--concurrency=3",
            "--call-timeout-ms=700",
            "--max-attempts=9",
            "--backoff-base-ms=10",
            "--backoff-cap-ms=90",
            "--lease-ms=3000",
            "--poll-interval-ms=5",
            "--shutdown-grace-ms=250",
            "--api-token=t",
            "--allow-url-prefix=http://a/",
            "--sync=normal",
            "--max-body-bytes=2048",
            "--downstream-ca-file=/etc/internal-ca.pem",
            "--deny-private-destinations",
            "--write-timeout-ms=1500",
            "--trusted-proxy=10.0.0.0/8,::1",
            "--trusted-proxy=192.0.2.7",
            "--allowed-host=tasks.example.com,[::1]",
            "--allowed-host=*",
            "--max-waiters-per-client=5",
            "--admin-listen=127.0.0.1:9090",
            "--metrics-public",
        ]);
        assert_eq!(s.db, DbTarget::Sqlite(PathBuf::from("/tmp/x.db")));
        assert_eq!(s.listen.port(), 0);
        assert_eq!(s.admin_listen, Some("127.0.0.1:9090".parse().unwrap()));
        assert_eq!(s.store.synchronous, Synchronous::Normal);
        let ms = Duration::from_millis;
        let w = &s.worker;
        assert_eq!(w.concurrency, 3);
        assert_eq!((w.lease, w.recover_interval), (ms(3000), ms(1500)));
        assert_eq!((w.poll_interval, w.shutdown_grace), (ms(5), ms(250)));
        assert_eq!((w.retry.base, w.retry.cap), (ms(10), ms(90)));
        let h = &s.http;
        assert_eq!(h.max_body_bytes, 2048);
        assert_eq!((h.default_max_attempts, h.default_timeout), (9, ms(700)));
        assert_eq!(h.api_token.as_deref(), Some("t"));
        assert!(h.metrics_public);
        assert_eq!(h.allow_url_prefixes, ["http://a/"]);
        assert_eq!(h.shutdown_grace, ms(250));
        assert_eq!(h.write_timeout, ms(1500));
        let proxies: Vec<String> = h.trusted_proxies.iter().map(ToString::to_string).collect();
        assert_eq!(proxies, ["10.0.0.0/8", "::1/128", "192.0.2.7/32"]);
        assert_eq!(h.allowed_hosts, ["tasks.example.com", "[::1]", "*"]);
        assert_eq!(h.max_waiters_per_client, 5);
        assert_eq!(
            s.downstream_ca_file,
            Some(PathBuf::from("/etc/internal-ca.pem"))
        );
        assert!(s.deny_private_destinations);
    }

    #[test]
    fn defaults_are_the_components_own() {
        let s = settings(&[]);
        assert_eq!(s.store, StoreConfig::default());
        let (w, d) = (&s.worker, WorkerConfig::default());
        assert_eq!(
            (w.concurrency, w.lease, w.poll_interval, w.shutdown_grace),
            (d.concurrency, d.lease, d.poll_interval, d.shutdown_grace)
        );
        assert_eq!(w.retry, d.retry);
        let h = tc_http::HttpConfig::default();
        assert_eq!(s.http, h);
        assert_eq!(s.downstream_ca_file, None);
        assert!(!s.deny_private_destinations);
    }
}
