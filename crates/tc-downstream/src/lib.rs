//! taskcenter's downstream: the port through which the worker POSTs a task's
//! JSON to its URL, the real adapter on hyper, and (feature `fakes`) test
//! doubles for other crates' tests.
//!
//! - [`Downstream`] is the port; [`DownRequest`], [`DownResponse`] and
//!   [`DownError`] are its vocabulary. Its docs state the contract every
//!   implementation keeps: the headers sent, the timeout covering the whole
//!   call, and that dropping a call aborts it and closes its connection.
//! - [`HyperDownstream`] is the production implementation.
//! - `fakes` (enable the `fakes` feature from `[dev-dependencies]`) holds
//!   scripted, blocking and closure-based downstreams that run on tokio's
//!   paused clock.
//!
//! The crate depends on no other workspace crate: the worker maps
//! [`DownError`] onto tc-retry's outcomes.

#[cfg(feature = "fakes")]
pub mod fakes;
mod hyper_adapter;
mod port;

pub use hyper_adapter::{DownstreamConfig, DownstreamSetupError, HyperDownstream};
pub use port::{DownError, DownRequest, DownResponse, Downstream};
