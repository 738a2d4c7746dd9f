//! taskcenter's HTTP API on raw hyper 1.x.
//!
//! An adapter: it drives the store port ([`tc_model::store::TaskStore`]) and
//! the worker through its own port, [`Control`]; it knows neither SQLite nor
//! the worker's insides. It is the only crate that knows the JSON shapes, and
//! the one place where store errors become HTTP statuses.
//!
//! - [`App`] holds the store, the control port, the [`HttpConfig`] and the
//!   metrics registry; [`handle`] (the router, router.rs) answers one request
//!   without a socket, reading its body once and handing the resource's
//!   handler plain values: tasks.rs, destinations.rs, admin.rs (health and
//!   metrics), auth.rs (who may call a route).
//! - [`serve`] runs the HTTP/1.1 server on a listener and returns a
//!   [`Server`] handle to await after triggering its shutdown;
//!   [`serve_admin`] serves `/healthz` and `/metrics` alone on another.
//! - `POST /admin/backup` copies the database through the [`Backups`] port
//!   ([`App::with_backups`]).
//! - [`ROUTES`] lists every route; docs/openapi.yaml documents each of them.
//! - `/ui/` is the dashboard (the `ui` module): HTML pages over the same
//!   store, fed by an [`Activity`] ring; [`App::with_dashboard`] adds what
//!   it shows beyond the store.
//!
//! ```no_run
//! # async fn demo<S: tc_model::store::TaskStore, C: tc_http::Control>(store: std::sync::Arc<S>, control: C) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! let registry = prometheus_client::registry::Registry::default();
//! let app = Arc::new(tc_http::App::new(store, control, tc_http::HttpConfig::default(), registry));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! let server = tc_http::serve(listener, app, async { let _ = stopped.await; })?;
//! println!("listening on {}", server.local_addr());
//! let _ = stop.send(());
//! server.wait().await?;
//! # Ok(()) }
//! ```

mod admin;
mod app;
mod auth;
mod backup;
mod call_fields;
mod client_tls;
mod config;
mod destinations;
mod dto;
mod edge;
mod error;
mod flow_keys;
mod key_use;
mod metrics;
mod query;
mod quota;
mod reply;
mod router;
mod schedules;
mod tasks;
mod tenants;
mod topic_body;
mod topics;
mod trace;
mod ui;
mod waiters;
mod well_known;
mod worker_port;

#[cfg(test)]
mod openapi_tests;

pub use app::App;
pub use backup::{BackupMade, BackupRefused, Backups};
pub use client_tls::TlsCheck;
pub use config::HttpConfig;
pub use dto::rfc3339;
pub use edge::client_address::ConnectionInfo;
pub use edge::server::{MAX_REFUSALS_IN_FLIGHT, ServeError, Server, serve, serve_admin};
pub use edge::site::check_allowed_host;
pub use router::{ROUTES, Route, handle};
pub use trace::SpanTracer;
pub use ui::{Activity, DashboardSources, Event as ActivityEvent, Series as ActivitySeries};
pub use worker_port::{Control, DestinationRuntime};
