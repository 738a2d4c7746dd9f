//! taskcenter's downstream: the port through which the worker sends a
//! task's call to its URL, the one fake everybody tests with, and (feature
//! `hyper-client`) the real client on hyper.
//!
//! - [`Delivery`] is one try's request as a plain value (method, url,
//!   headers in a defined order, body), built by [`Delivery::build`] from
//!   plain inputs and signed by [`webhook_signature`] (Standard Webhooks):
//!   pure code, tested without a network.
//! - [`JwtKeys`] signs a destination's JWTs (ES256) with the server's own
//!   keys and writes the JWK Set that publishes them.
//! - [`Downstream`] is the port; [`Delivery`], [`DownResponse`] and
//!   [`DownError`] are its vocabulary. Its docs state the contract every
//!   implementation keeps: it sends the delivery as built, the timeout
//!   covers the whole call, and dropping a call aborts it and closes its
//!   connection.
//! - [`fake`] holds the scripted fake: in process, or served over loopback
//!   HTTP for the real client. Tests, the demo and the bench all use it.
//! - `HyperDownstream` (feature `hyper-client`, enabled by tc-server and the
//!   tests that exercise the real client) is the production implementation:
//!   glue between the port and hyper-util's client, as hyper-util is glue
//!   between hyper's traits and tokio. Without the feature the crate links no
//!   HTTP client and no TLS.
//!
//! The crate depends on no other workspace crate: the worker maps
//! [`DownError`] onto tc-retry's outcomes.

mod client_tls;
mod delivery;
pub mod fake;
#[cfg(feature = "hyper-client")]
mod hyper_adapter;
mod jwt;
mod port;
mod signature;

pub use client_tls::ClientTls;
pub use delivery::{Delivery, DeliverySpec, Method, TraceHeaders, USER_AGENT};
#[cfg(feature = "hyper-client")]
pub use hyper_adapter::client_tls::{
    CertInfo, TlsSettingError, check_ca_certs, inspect_client_cert,
};
#[cfg(feature = "hyper-client")]
pub use hyper_adapter::{DownstreamConfig, DownstreamSetupError, HyperDownstream};
pub use jwt::{JwtKeyError, JwtKeys};
pub use port::{DownError, DownResponse, Downstream, RATE_LIMIT_HEADERS};
pub use signature::webhook_signature;
