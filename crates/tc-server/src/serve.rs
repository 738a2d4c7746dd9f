//! Wiring: the store, the downstream client, the worker and the HTTP API,
//! started in that order and stopped in reverse.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use prometheus_client::registry::Registry;
use tc_downstream::{DownstreamConfig, DownstreamSetupError, HyperDownstream};
use tc_model::store::Tenants;
use tc_store::SqliteStore;
use tc_store_pg::{PgEvent, PgStore};
use tc_worker::{Clock, Worker, WorkerConfig, WorkerControl, WorkerMetrics};
use tokio::net::TcpListener;

use crate::store::{AnyStore, DbTarget};
use crate::worker_for_http::WorkerPort;

/// Why the server could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServeError {
    /// Another tc-server has the database; nothing was touched.
    #[error(transparent)]
    Locked(#[from] crate::db_lock::LockError),
    /// The database could not be opened; the file was left as it was.
    #[error("cannot open the database: {0}")]
    Store(#[from] tc_store::OpenError),
    /// The PostgreSQL database could not be opened; its schema was left as
    /// it was.
    #[error("cannot open the database: {0}")]
    StorePg(#[from] tc_store_pg::OpenError),
    /// Span export (`--otlp-endpoint`) could not be set up.
    #[error(transparent)]
    Telemetry(#[from] crate::telemetry::TelemetryError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The `--downstream-ca-file` could not be read.
    #[error("cannot read the downstream CA file {}: {source}", path.display())]
    CaFileRead {
        /// The file named.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The `--downstream-ca-file` holds no usable CA certificate.
    #[error("the downstream CA file {} is unusable: {source}", path.display())]
    CaFileInvalid {
        /// The file named.
        path: PathBuf,
        /// What is wrong with it.
        source: DownstreamSetupError,
    },
    /// The HTTP server failed to start or ended abnormally.
    #[error("HTTP server: {0}")]
    Http(#[from] tc_http::ServeError),
    /// The worker ended abnormally.
    #[error("worker: {0}")]
    Worker(#[from] tc_worker::WorkerError),
    /// The database holds tenants and no `--api-token` is set: a request
    /// without a credential would be the admin, and the tenants' keys would
    /// keep nothing apart (exit 2, as a usage error).
    #[error(
        "the database holds {tenants} tenant{s}: tenants need an admin token, since without one \
         a request without a credential is the admin and a tenant's key keeps nothing apart; \
         start the server with --api-token (or TC_API_TOKEN), or delete the tenants on a \
         server that has one",
        s = if *tenants == 1 { "" } else { "s" }
    )]
    TenantsNeedToken {
        /// How many tenants the database holds.
        tenants: usize,
    },
    /// The database's tenants could not be read at start.
    #[error("cannot read the database's tenants: {0}")]
    Tenants(tc_model::store::StoreError),
    /// The JWT keys (`--issuer`, `--jwt-key-file`) could not be had.
    #[error(transparent)]
    Jwt(#[from] crate::jwt::JwtSetupError),
    /// A `--secret-key-file` is unusable, or a stored secret does not open
    /// with the keys given.
    #[error(transparent)]
    Secrets(#[from] crate::secrets::SecretsError),
}

impl ServeError {
    /// The process's exit code for this failure: 2 where the flags must
    /// change (as clap's usage errors), 1 otherwise.
    pub(crate) fn exit_code(&self) -> std::process::ExitCode {
        match self {
            ServeError::TenantsNeedToken { .. } => std::process::ExitCode::from(2),
            _ => std::process::ExitCode::FAILURE,
        }
    }
}

pub(crate) use crate::settings::Settings;

/// A running service: the HTTP API served, the worker claiming.
pub(crate) struct Running {
    addr: SocketAddr,
    /// Released after the store closed (and by the kernel on any exit);
    /// only an SQLite file is locked.
    db_lock: Option<crate::db_lock::DbLock>,
    store: Arc<AnyStore>,
    worker: Worker<AnyStore>,
    pruner: tc_worker::Pruner,
    /// Hands PostgreSQL's notifications to the worker; stopped before the
    /// store closes.
    forward: Option<tokio::task::JoinHandle<()>>,
    /// Counts attempt endings into the dashboard's activity ring.
    activity: tokio::task::JoinHandle<()>,
    http: tc_http::Server,
    /// The admin listener, when `--admin-listen` is set.
    admin: Option<tc_http::Server>,
    /// Stops both listeners.
    stop_http: tokio::sync::watch::Sender<bool>,
    /// Exports spans, when `--otlp-endpoint` is set; flushed last.
    telemetry: Option<crate::telemetry::Telemetry>,
}

/// Opens the store, spawns the worker (which first recovers the leases a
/// crashed run left behind) and serves the API. Logs `listening` with the
/// bound address.
pub(crate) async fn start(settings: Settings) -> Result<Running, ServeError> {
    // Bind first: a taken port fails the start before a database file is
    // created or a task is touched.
    let listener = bind(settings.listen).await?;
    let admin_listener = bind_admin(settings.admin_listen).await?;
    raise_open_files_limit(&settings);
    // Export before anything makes spans; a bad endpoint fails the start.
    let otlp_metrics = crate::telemetry::OtlpMetrics::default();
    let telemetry = settings
        .otlp
        .as_ref()
        .map(|config| crate::telemetry::Telemetry::start(config, otlp_metrics.clone()))
        .transpose()?;
    let tracer = telemetry.as_ref().map(crate::telemetry::Telemetry::tracer);
    // The downstream client before the store: a bad CA file fails the start
    // before a database file is created.
    let downstream = Arc::new(downstream(&settings)?);
    // The keys too: a bad key file fails the start before the store opens.
    let sealer = crate::secrets::sealer(&settings.secret_key_files)?;
    let opened = open_store(&settings, sealer).await?;
    let store = Arc::new(opened.store);

    let mut registry = Registry::default();
    otlp_metrics.register(&mut registry);
    let pruner = spawn_pruner(&settings, &store, &mut registry);
    let metrics = WorkerMetrics::default();
    metrics.register(&mut registry);
    let worker_config = WorkerConfig {
        tracer: tracer.clone(),
        jwt: opened.jwt,
        claim_gather: claim_gather(&store, settings.worker.claim_gather),
        ..settings.worker.clone()
    };
    let worker = Worker::spawn(
        Arc::clone(&store),
        downstream,
        worker_config,
        Clock::system(),
        metrics,
    );
    let forward = match &*store {
        AnyStore::Postgres(pg) => Some(tokio::spawn(forward_notifications(
            pg.subscribe(),
            worker.control(),
        ))),
        AnyStore::Sqlite(_) => None,
    };
    let app = http_app(&settings, &store, &worker, registry, opened.jwks, tracer);
    let activity = tokio::spawn(feed_activity(worker.control().subscribe(), app.activity()));
    let app = Arc::new(app);
    let (stop_http, stopped) = tokio::sync::watch::channel(false);
    let served = serve_listeners(listener, admin_listener, app, stopped);
    let (http, admin) = match served {
        Ok(served) => served,
        Err(e) => {
            // Leave nothing running: put claimed tasks back before failing.
            for task in forward.iter().chain([&activity]) {
                task.abort();
            }
            pruner.stop().await;
            let _ = worker.shutdown().await;
            return Err(e.into());
        }
    };
    let addr = http.local_addr();
    log_listening(&settings, &store, &opened.shown, addr, admin.as_ref());
    Ok(Running {
        addr,
        db_lock: opened.db_lock,
        store,
        worker,
        pruner,
        forward,
        activity,
        http,
        admin,
        stop_http,
        telemetry,
    })
}

/// The pruner of finished tasks past their retention, its metrics in
/// `registry`.
fn spawn_pruner(
    settings: &Settings,
    store: &Arc<AnyStore>,
    registry: &mut Registry,
) -> tc_worker::Pruner {
    let metrics = tc_worker::PrunerMetrics::default();
    metrics.register(registry);
    tc_worker::Pruner::spawn(
        Arc::clone(store),
        settings.retention,
        Clock::system(),
        metrics,
    )
}

/// The API on its listener and, with `--admin-listen`, health and metrics
/// on theirs, each until `stopped` says stop.
fn serve_listeners(
    listener: TcpListener,
    admin_listener: Option<TcpListener>,
    app: Arc<tc_http::App<AnyStore, WorkerPort<AnyStore>>>,
    stopped: tokio::sync::watch::Receiver<bool>,
) -> Result<(tc_http::Server, Option<tc_http::Server>), tc_http::ServeError> {
    let until_stopped = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    let http = tc_http::serve(listener, Arc::clone(&app), until_stopped(stopped.clone()))?;
    let admin = admin_listener
        .map(|l| tc_http::serve_admin(l, app, until_stopped(stopped)))
        .transpose()?;
    Ok((http, admin))
}

/// The `listening` line (and `admin_listening`): where, on which store, and
/// where spans go.
fn log_listening(
    settings: &Settings,
    store: &AnyStore,
    db_shown: &str,
    addr: SocketAddr,
    admin: Option<&tc_http::Server>,
) {
    tracing::info!(
        addr = %addr,
        db = %db_shown,
        store = store.kind(),
        concurrency = settings.worker.concurrency,
        spans = %settings
            .otlp
            .as_ref()
            .map_or_else(|| "off".to_owned(), crate::telemetry::shown),
        "listening"
    );
    if let Some(admin) = admin {
        tracing::info!(addr = %admin.local_addr(), "admin_listening");
    }
}

/// The store, opened, its secrets sealed and checked, and the JWT keys
/// read from it (`--issuer`).
struct Opened {
    store: AnyStore,
    /// The SQLite file's lock, held while the server runs.
    db_lock: Option<crate::db_lock::DbLock>,
    /// The database as the `listening` line shows it.
    shown: String,
    jwt: Option<tc_worker::JwtSigner>,
    jwks: Option<String>,
}

/// Opens the store the settings name; on a failure after opening it, the
/// store is closed before the error returns.
async fn open_store(settings: &Settings, sealer: tc_seal::Sealer) -> Result<Opened, ServeError> {
    let (mut store, db_lock, shown) = match &settings.db {
        DbTarget::Postgres(url) => {
            let store = PgStore::open(url, settings.postgres.clone()).await?;
            let shown = store.target().to_owned();
            (AnyStore::Postgres(store), None, shown)
        }
        DbTarget::Sqlite(path) => {
            // Before the store opens the file: a second server must not
            // touch it.
            let db_lock = crate::db_lock::acquire(path)?;
            let store = SqliteStore::open(path, settings.store.clone()).await?;
            (
                AnyStore::Sqlite(store),
                Some(db_lock),
                path.display().to_string(),
            )
        }
    };
    if let Err(e) = crate::secrets::seal_store(&mut store, sealer).await {
        store.close().await;
        return Err(e.into());
    }
    if let Err(e) = tenants_have_a_token(&store, &settings.http).await {
        store.close().await;
        return Err(e);
    }
    let (jwt, jwks) = match crate::jwt::load(&settings.jwt, &store).await {
        Ok(Some((signer, jwks))) => (Some(signer), Some(jwks)),
        Ok(None) => (None, None),
        Err(e) => {
            store.close().await;
            return Err(e.into());
        }
    };
    Ok(Opened {
        store,
        db_lock,
        shown,
        jwt,
        jwks,
    })
}

/// The API over the store and the worker, with the dashboard, backups, the
/// TLS check and, when spans are exported, the tracer.
fn http_app(
    settings: &Settings,
    store: &Arc<AnyStore>,
    worker: &Worker<AnyStore>,
    registry: Registry,
    jwks: Option<String>,
    tracer: Option<Arc<opentelemetry::global::BoxedTracer>>,
) -> tc_http::App<AnyStore, WorkerPort<AnyStore>> {
    let app = tc_http::App::new(
        Arc::clone(store),
        WorkerPort(worker.control()),
        tc_http::HttpConfig {
            issuer: settings.jwt.issuer.clone(),
            jwks,
            ..settings.http.clone()
        },
        registry,
    )
    .with_dashboard(tc_http::DashboardSources {
        concurrency: Some(settings.worker.concurrency),
        signs_by_default: !settings.worker.signing_secrets.is_empty(),
    })
    .with_backups(Arc::new(match &settings.db {
        DbTarget::Sqlite(path) => crate::backup::ServerBackups::sqlite(path),
        DbTarget::Postgres(_) => crate::backup::ServerBackups::Postgres,
    }))
    .with_tls_check(Arc::new(crate::tls_check::DownstreamTlsCheck));
    match tracer {
        Some(tracer) => app.with_tracer(tracer),
        None => app,
    }
}

/// Refuses a database that holds tenants when no `--api-token` is set: every
/// request without a credential would be the admin.
async fn tenants_have_a_token(
    store: &AnyStore,
    http: &tc_http::HttpConfig,
) -> Result<(), ServeError> {
    if http.api_token.is_some() {
        return Ok(());
    }
    let tenants = store
        .tenant_settings()
        .await
        .map_err(ServeError::Tenants)?
        .len();
    if tenants > 0 {
        return Err(ServeError::TenantsNeedToken { tenants });
    }
    Ok(())
}

/// `--admin-listen`'s listener, when it is set.
async fn bind_admin(addr: Option<SocketAddr>) -> Result<Option<TcpListener>, ServeError> {
    match addr {
        Some(addr) => Ok(Some(bind(addr).await?)),
        None => Ok(None),
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}

/// Raises the open-file limit to what the listeners may hold at once (every
/// connection, every refusal past the limits), the downstream calls and the
/// store's handles; warns when the system does not allow that many.
fn raise_open_files_limit(settings: &Settings) {
    let http = &settings.http;
    let wanted = http.max_connections
        + http.admin_max_connections
        + 2 * tc_http::MAX_REFUSALS_IN_FLIGHT
        + 2 * settings.worker.concurrency
        + 256;
    let wanted = u64::try_from(wanted).unwrap_or(u64::MAX);
    match crate::fd_limit::raise_to(wanted) {
        Some(limit) if limit < wanted => tracing::warn!(
            limit,
            wanted,
            "open_files_limit_low: connections past it wait in the listen backlog"
        ),
        Some(limit) => tracing::debug!(limit, "open_files_limit"),
        None => {}
    }
}

/// Wakes the worker for submits on other nodes and drops calls canceled
/// through them. A lagging receiver has missed notifications: it claims now,
/// and the heartbeat finds any cancel it missed.
async fn forward_notifications(
    mut events: tokio::sync::broadcast::Receiver<PgEvent>,
    control: WorkerControl<AnyStore>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        match events.recv().await {
            Ok(PgEvent::Wake) => control.woken_elsewhere(),
            Err(RecvError::Lagged(_)) => control.task_submitted(),
            Ok(PgEvent::Canceled(id)) => control.canceled_elsewhere(id),
            Err(RecvError::Closed) => return,
        }
    }
}

/// Counts each attempt ending into the dashboard's per-second ring (a
/// lagging receiver has lost some: the chart misses them, nothing else).
async fn feed_activity(
    mut ended: tokio::sync::broadcast::Receiver<tc_worker::AttemptEnded>,
    activity: Arc<tc_http::Activity>,
) {
    use tokio::sync::broadcast::error::RecvError;
    let clock = Clock::system();
    loop {
        match ended.recv().await {
            Ok(event) => activity.attempt_ended(event.state, clock.now()),
            Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => return,
        }
    }
}

/// The downstream client, trusting the CA file if one is configured; an
/// unreadable or unusable file is an error, not a warning, since https calls
/// to the internal services it is for would all fail.
fn downstream(settings: &Settings) -> Result<HyperDownstream, ServeError> {
    let mut extra_root_certs_pem = Vec::new();
    if let Some(path) = &settings.downstream_ca_file {
        // A small file read once at start: no need to leave the runtime thread.
        let pem = std::fs::read(path).map_err(|source| ServeError::CaFileRead {
            path: path.clone(),
            source,
        })?;
        extra_root_certs_pem.push(pem);
    }
    HyperDownstream::try_new(DownstreamConfig {
        // Keep as many idle connections per host as calls can be in flight:
        // with fewer, every call past the pool's size opens a new TCP
        // connection.
        pool_max_idle_per_host: settings
            .worker
            .concurrency
            .max(DownstreamConfig::default().pool_max_idle_per_host),
        extra_root_certs_pem,
        deny_private_destinations: settings.deny_private_destinations,
        ..DownstreamConfig::default()
    })
    .map_err(|source| ServeError::CaFileInvalid {
        path: settings.downstream_ca_file.clone().unwrap_or_default(),
        source,
    })
}

impl Running {
    /// The address the API is served on.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The worker's handle (the demo watches attempts end through it).
    pub(crate) fn control(&self) -> WorkerControl<AnyStore> {
        self.worker.control()
    }

    /// Graceful stop: the API stops accepting and finishes open requests
    /// while the worker stops claiming, lets calls in flight finish within
    /// the grace period and puts the rest back to pending; then the store
    /// commits what is queued and closes.
    pub(crate) async fn shutdown(self) -> Result<(), ServeError> {
        let Running {
            db_lock,
            store,
            worker,
            pruner,
            forward,
            activity,
            http,
            admin,
            stop_http,
            telemetry,
            ..
        } = self;
        tracing::info!("shutdown_started");
        let _ = stop_http.send(true);
        pruner.stop().await;
        let admin = async {
            match admin {
                Some(admin) => admin.wait().await,
                None => Ok(()),
            }
        };
        let (http, admin, worker) = tokio::join!(http.wait(), admin, worker.shutdown());
        let report = worker?;
        tracing::info!(interrupted = report.interrupted, "shutdown_worker_stopped");
        http?;
        admin?;
        if let Some(forward) = forward {
            forward.abort();
            let _ = forward.await;
        }
        activity.abort();
        let _ = activity.await;
        close_store(store).await;
        drop(db_lock);
        if let Some(telemetry) = telemetry {
            // The last spans go out, within the export timeout.
            let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
        }
        tracing::info!("shutdown_complete");
        Ok(())
    }
}

async fn close_store(store: Arc<AnyStore>) {
    match Arc::try_unwrap(store) {
        Ok(store) => store.close().await,
        Err(shared) => {
            // Someone still holds the store (an HTTP request past the grace
            // period): dropping the last handle flushes and joins the writer,
            // which blocks, so do it off the runtime's threads.
            tracing::warn!("store_still_shared_at_shutdown");
            let _ = tokio::task::spawn_blocking(move || drop(shared)).await;
        }
    }
}

/// SIGTERM and SIGINT (Ctrl-C elsewhere), caught from the moment
/// [`Signals::install`] returns: before `listening` is logged, so that a
/// signal sent right after it never meets the default "terminate at once".
pub(crate) struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Signals {
    #[cfg(unix)]
    pub(crate) fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// The next signal's name.
    #[cfg(unix)]
    pub(crate) async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }

    #[cfg(not(unix))]
    pub(crate) fn install() -> std::io::Result<Signals> {
        Ok(Signals {})
    }

    /// The next Ctrl-C.
    #[cfg(not(unix))]
    pub(crate) async fn recv(&mut self) -> &'static str {
        let _ = tokio::signal::ctrl_c().await;
        "ctrl_c"
    }
}

/// How long a claim waits for a useful number of free slots on `store`:
/// longer on PostgreSQL, where nodes share the claims and each holds a share
/// of the slots, than the `configured` wait of a node that claims alone.
fn claim_gather(store: &AnyStore, configured: std::time::Duration) -> std::time::Duration {
    match store {
        AnyStore::Postgres(_) => tc_worker::SHARED_CLAIM_GATHER,
        AnyStore::Sqlite(_) => configured,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::tests::settings;

    /// A CA file that cannot be used stops the start, naming the file, before
    /// the database is created.
    #[tokio::test]
    async fn an_unusable_downstream_ca_file_stops_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let not_pem = dir.path().join("not-pem.txt");
        std::fs::write(&not_pem, "not a certificate").unwrap();
        let check = |ca_file: PathBuf, expected: &'static str| {
            let db = dir.path().join("tasks.db");
            async move {
                let mut s = settings(&["--listen=127.0.0.1:0"]);
                s.db = DbTarget::Sqlite(db.clone());
                s.downstream_ca_file = Some(ca_file.clone());
                let error = match start(s).await {
                    Ok(_) => panic!("{ca_file:?}: started"),
                    Err(error) => error,
                };
                let message = error.to_string();
                assert!(message.contains(expected), "{message}");
                assert!(
                    message.contains(&ca_file.display().to_string()),
                    "{message}"
                );
                assert!(!db.exists(), "{ca_file:?}: the database was created");
            }
        };
        check(
            dir.path().join("missing.pem"),
            "cannot read the downstream CA file",
        )
        .await;
        check(not_pem, "no PEM CERTIFICATE section").await;
    }
}
