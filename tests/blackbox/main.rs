//! Black-box tests: each starts the real `tc-server` binary (port 0, a temp
//! database) against a loopback downstream, and talks to it over HTTP only.
//!
//! - `api`: every row of the HTTP contract, status by status.
//! - `auth`: a destination's `auth`: Basic, an OAuth2 token from a
//!   loopback token endpoint, a JWT verified against the served JWK Set by
//!   the `jsonwebtoken` crate; no secret in a view, the CLI or a log line.
//! - `backup`: `POST /admin/backup` and `tc-server backup` under load; the
//!   copy checked by SQLite and served by a server of its own.
//! - `delivery`: what the worker does with real downstream answers (retry,
//!   Retry-After, reset, 4xx, timeout), idempotent delivery, concurrency.
//! - `callbacks`: a task's view POSTed to its `callback_url` when it ends,
//!   as a callback task of its own.
//! - `client_certs`: a partner that requires a client certificate,
//!   called with the destination's; the key shown nowhere.
//! - `cli`: the command-line client (`tc-server task …`, `destination …`)
//!   as its own process: output, exit codes, the token, a terminal.
//! - `operations`: retry a failed or canceled task, delete a finished one.
//! - `hostile`: other sites' pages, DNS rebinding, floods of logins and of
//!   connections, password guessing, long-polls from one client.
//! - `destinations`: two loopback hosts, one hanging with a backlog held at
//!   its cap while every task of the other finishes; pause and resume;
//!   settings kept across a restart; 404 and 400 answers.
//! - `nodes`: three servers on one PostgreSQL database (skipped without one).
//! - `outbound`: a PUT with the destination's bearer token, every try's
//!   Standard Webhooks signature verified by the specification's own
//!   library (rotation, a tampered body, the server's secret), and no secret
//!   in a view, the dashboard, the metrics or a log line.
//! - `lifecycle`: cancel closes the downstream connection, SIGTERM drains and
//!   puts calls back, SIGKILL loses nothing, flags and environment, a foreign
//!   database file.
//! - `tenants`: two tenants and the admin: each key reaches
//!   only its tenant's tasks, the admin's routes are 403 for a key, quotas
//!   429, a revoked key 401 at once, tenants kept across a restart.
//! - `secrets`: secrets sealed at rest: no byte of a
//!   destination's token in the file or a backup, rotation, a start refused
//!   without the key, the warning of a server without one.
//! - `traces`: W3C trace context from the submit to every try, and the
//!   spans a loopback OTLP collector receives.

// Signals and process control go through `kill`: Unix only.
#![cfg(unix)]
// The whole crate is test code (clippy's allow-unwrap-in-tests only covers
// #[test] functions, not their helpers): a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod api;
mod auth;
mod backup;
mod callbacks;
mod cli;
mod client_certs;
mod delivery;
mod destinations;
mod due_walk;
mod edge;
mod hostile;
mod lifecycle;
mod nodes;
mod operations;
mod outbound;
mod secrets;
mod support;
mod tenants;
mod traces;
