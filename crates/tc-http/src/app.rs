//! The application's state: what every request is answered with (the store,
//! the worker's port, the config, the metrics, the dashboard's state and the
//! waiters). The router (router.rs) answers requests over it.

use std::sync::Arc;

use prometheus_client::registry::Registry;
use tc_model::store::TaskStore;

use crate::config::HttpConfig;
use crate::metrics::HttpMetrics;
use crate::worker_port::Control;

/// Everything a request needs: the store, the worker's control port, the
/// config and the metrics registry. Share it behind an `Arc`.
pub struct App<S, C> {
    store: Arc<S>,
    control: C,
    /// The requests waiting for a task to end.
    waiters: Arc<crate::waiters::Waiters>,
    /// One permit per byte of request bodies being read at once.
    body_budget: Arc<tokio::sync::Semaphore>,
    config: HttpConfig,
    registry: Registry,
    metrics: HttpMetrics,
    /// The dashboard's sessions, activity ring and sources.
    ui: crate::ui::Ui,
    /// The allowed hosts.
    site: crate::edge::site::Site,
    /// Makes each request's server span (`--otlp-endpoint`); none: no spans.
    tracer: Option<crate::trace::SpanTracer>,
    /// What `POST /admin/backup` copies through, if anything.
    backups: Option<Arc<dyn crate::backup::Backups>>,
    /// Reads the TLS settings of `PUT /destinations/{d}`, if anything.
    tls_check: Option<Arc<dyn crate::client_tls::TlsCheck>>,
    /// When this node last recorded each tenant key's use.
    key_use: crate::key_use::KeyUse,
    /// This node's submit buckets, by tenant.
    buckets: crate::quota::SubmitBuckets,
}

impl<S: TaskStore, C: Control> App<S, C> {
    /// Builds the application. `registry` may already hold other components'
    /// metrics (the worker's); the HTTP layer adds its own, and `GET /metrics`
    /// serves them all.
    pub fn new(store: Arc<S>, control: C, config: HttpConfig, mut registry: Registry) -> Self {
        let metrics = HttpMetrics::register(&mut registry);
        App {
            store,
            control,
            waiters: crate::waiters::Waiters::new(&config, metrics.waiters.clone()),
            body_budget: Arc::new(tokio::sync::Semaphore::new(
                config
                    .max_body_bytes_in_flight
                    .max(config.max_body_bytes)
                    .clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
            )),
            site: crate::edge::site::Site::new(&config),
            config,
            registry,
            metrics,
            ui: crate::ui::Ui::default(),
            tracer: None,
            backups: None,
            tls_check: None,
            key_use: crate::key_use::KeyUse::default(),
            buckets: crate::quota::SubmitBuckets::default(),
        }
    }

    /// Makes a server span per request with `tracer` (the server's,
    /// exporting over OTLP), and stores submitted tasks in its trace.
    pub fn with_tracer(mut self, tracer: crate::trace::SpanTracer) -> Self {
        self.tracer = Some(tracer);
        self
    }

    /// Gives `POST /admin/backup` a way to copy the database; without one
    /// it answers `409 backup_unsupported`.
    pub fn with_backups(mut self, backups: Arc<dyn crate::backup::Backups>) -> Self {
        self.backups = Some(backups);
        self
    }

    /// Gives `PUT /destinations/{d}` a way to read client certificates and
    /// CA certificates; without one, `client_cert` and `ca_certs` are
    /// refused (400).
    pub fn with_tls_check(mut self, check: Arc<dyn crate::client_tls::TlsCheck>) -> Self {
        self.tls_check = Some(check);
        self
    }

    /// Hands the dashboard what it shows beyond the store: the worker's
    /// concurrency. (The destinations come from the store and the [`Control`]
    /// port, as `GET /destinations` reads them.)
    pub fn with_dashboard(mut self, sources: crate::ui::DashboardSources) -> Self {
        self.ui.sources = sources;
        self
    }

    /// The dashboard's per-second activity ring: the submit path feeds it
    /// here; whoever runs the worker feeds it attempt endings
    /// ([`crate::Activity::attempt_ended`]).
    pub fn activity(&self) -> Arc<crate::Activity> {
        Arc::clone(&self.ui.activity)
    }

    pub(crate) fn store(&self) -> &S {
        &self.store
    }

    pub(crate) fn control(&self) -> &C {
        &self.control
    }

    pub(crate) fn ui(&self) -> &crate::ui::Ui {
        &self.ui
    }

    /// What the dashboard's pages show: a narrow view, not the whole app.
    pub(crate) fn dashboard(&self) -> crate::ui::Source<'_, S, C> {
        crate::ui::Source {
            store: &self.store,
            control: &self.control,
            ui: &self.ui,
            registry: &self.registry,
            config: &self.config,
        }
    }

    pub(crate) fn waiters(&self) -> &Arc<crate::waiters::Waiters> {
        &self.waiters
    }

    /// The byte budget the API's request bodies share.
    pub(crate) fn body_budget(&self) -> Arc<tokio::sync::Semaphore> {
        Arc::clone(&self.body_budget)
    }

    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }

    pub(crate) fn metrics(&self) -> &HttpMetrics {
        &self.metrics
    }

    pub(crate) fn site(&self) -> &crate::edge::site::Site {
        &self.site
    }

    /// What `POST /admin/backup` copies through, if anything.
    pub(crate) fn backups(&self) -> Option<&dyn crate::backup::Backups> {
        self.backups.as_deref()
    }

    /// What reads the TLS settings of a destination, if anything.
    pub(crate) fn tls_check(&self) -> Option<&dyn crate::client_tls::TlsCheck> {
        self.tls_check.as_deref()
    }

    /// When this node last recorded each tenant key's use.
    pub(crate) fn key_use(&self) -> &crate::key_use::KeyUse {
        &self.key_use
    }

    /// This node's submit buckets, by tenant.
    pub(crate) fn buckets(&self) -> &crate::quota::SubmitBuckets {
        &self.buckets
    }

    /// The tracer of the requests' server spans, when exporting.
    pub(crate) fn tracer(&self) -> Option<&crate::trace::SpanTracer> {
        self.tracer.as_ref()
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &HttpConfig {
        &self.config
    }
}
