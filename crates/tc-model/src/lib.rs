//! taskcenter's domain model: what a task is, which states it moves through and
//! which moves are legal, what a valid submission looks like, and the store port
//! that every storage adapter implements.
//!
//! This crate does no I/O and knows nothing of SQL, HTTP or an async runtime:
//! the store port is a trait whose futures any executor can drive.

pub mod auth;
pub mod callback;
pub mod claim;
pub mod client_tls;
pub mod cluster;
pub mod completion;
pub mod destination;
mod first_run;
pub mod flow_key;
pub mod headers;
mod method;
mod new_task;
pub mod outbound;
pub mod priority;
pub mod schedule;
pub mod setting;
pub mod share;
pub mod signing;
mod state;
pub mod store;
pub mod stored;
mod task;
pub mod tenant;
pub mod topic;
pub mod trace;
mod url;
mod validation;
pub mod view;

pub use first_run::FirstRun;
pub use headers::Headers;
pub use method::{Method, UnknownMethod};
pub use new_task::NewTask;
pub use state::{IllegalTransition, State, UnknownState, retry_by_hand, transit};
pub use task::{AttemptRecord, Task, TaskId, Timestamp, UnknownTaskId};
pub use trace::TraceContext;
pub use url::{
    UrlNotAllowed, canonical_host, destination_of, is_under_prefix, origin_and_path, redacted_url,
    urls_allowed,
};
pub use validation::{Limits, ValidationError};
