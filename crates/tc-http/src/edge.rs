//! The connection edge: what happens to a request before the API or the
//! dashboard sees it, and to its answer after. Nothing here knows a route,
//! a task or a store.
//!
//! - [`server`]: the HTTP/1.1 accept loop, its connection bound and
//!   graceful shutdown.
//! - [`body`]: a request body read once, within its size, time and budget
//!   bounds, the rest drained.
//! - [`write_timeout`]: an answer that a client does not read in time
//!   closes its connection.
//! - [`client_address`]: who sent a request (the peer, or the address a
//!   trusted proxy names).
//! - [`site`]: the site rules (allowed hosts, plain HTTP or behind a TLS
//!   proxy) checked before any route.

pub(crate) mod body;
pub(crate) mod client_address;
pub(crate) mod server;
pub(crate) mod site;
pub(crate) mod write_timeout;
