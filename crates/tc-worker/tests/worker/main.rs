//! tc-worker's tests, one binary: the worker's scenarios on the reference
//! store and the scripted downstream, and its log events as a public
//! interface.

#![allow(clippy::unwrap_used)]

mod gather;
mod logs;
mod scenarios;
mod schedules;
