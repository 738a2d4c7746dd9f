//! `POST /admin/backup`: a consistent copy of the database to a file on the
//! server's disk, for operators without shell access. The copying is behind
//! a port this crate owns, [`Backups`], which whoever wires the service
//! implements (tc-server: SQLite's online backup, or a refusal on
//! PostgreSQL); this crate knows only the request and the answer.
//!
//! The rules for `to`, so that the route cannot be turned against the
//! server: it needs a configured API token (it writes files); `to` is an
//! absolute path of at most 4096 bytes without `..` segments (the server's
//! working directory is nobody's business); the file must not exist (a
//! backup never overwrites) and its directory must; one backup at a time.

use std::future::Future;
use std::path::{Component, Path, PathBuf};
use std::pin::Pin;

use http::StatusCode;
use serde::Serialize;
use tc_model::Timestamp;

use crate::error::ApiError;
use crate::reply::Answer;

/// The longest `to` accepted, in bytes (Linux's PATH_MAX).
pub(crate) const MAX_TO_BYTES: usize = 4096;

/// What the HTTP layer needs to make a backup: a port owned by this crate.
pub trait Backups: Send + Sync + 'static {
    /// Copies the database to the new file `to` (absolute, checked by the
    /// caller against the rules above); returns when the copy is complete
    /// and durable.
    fn backup(
        &self,
        to: PathBuf,
    ) -> Pin<Box<dyn Future<Output = Result<BackupMade, BackupRefused>> + Send + '_>>;
}

/// A finished copy, as the answer shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupMade {
    /// The copy.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// How many tasks it holds.
    pub tasks: u64,
    /// It holds every commit made before this time.
    pub consistent_as_of: Timestamp,
    /// How long the copy took.
    pub duration_ms: u64,
}

/// Why no copy was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackupRefused {
    /// The store is backed up with its own tools; the message says which.
    Unsupported(String),
    /// The target exists.
    TargetExists(String),
    /// The target cannot be written there (no such directory).
    InvalidTarget(String),
    /// Another backup is running.
    InProgress,
    /// The copy failed (disk full, I/O error); nothing was left behind.
    Failed(String),
}

#[derive(Serialize)]
struct MadeView {
    path: String,
    bytes: u64,
    tasks: u64,
    consistent_as_of: String,
    duration_ms: u64,
}

/// Answers `POST /admin/backup` with `body`, through `backups` (none: the
/// server was wired without a backup port).
pub(crate) async fn handle(
    backups: Option<&dyn Backups>,
    token_configured: bool,
    body: &[u8],
) -> Answer {
    if !token_configured {
        return Err(ApiError::BackupNeedsToken(
            "POST /admin/backup writes files on the server's disk: start the server with \
             --api-token to use it"
                .into(),
        ));
    }
    let to = parse(body)?;
    let Some(backups) = backups else {
        return Err(ApiError::BackupUnsupported(
            "this server makes no backups".into(),
        ));
    };
    let made = backups.backup(to).await.map_err(|refused| match refused {
        BackupRefused::Unsupported(m) => ApiError::BackupUnsupported(m),
        BackupRefused::TargetExists(m) => ApiError::BackupTargetExists(format!("to: {m}")),
        BackupRefused::InvalidTarget(m) => ApiError::InvalidRequest(format!("to: {m}")),
        BackupRefused::InProgress => ApiError::BackupInProgress(
            "another backup is running: try again when it has finished".into(),
        ),
        BackupRefused::Failed(m) => ApiError::Internal(format!("the backup failed: {m}")),
    })?;
    crate::reply::json(
        StatusCode::OK,
        &MadeView {
            path: made.path.display().to_string(),
            bytes: made.bytes,
            tasks: made.tasks,
            consistent_as_of: crate::dto::rfc3339(made.consistent_as_of),
            duration_ms: made.duration_ms,
        },
    )
}

/// `{"to": "/absolute/path"}` and nothing else.
fn parse(body: &[u8]) -> Result<PathBuf, ApiError> {
    let invalid = ApiError::InvalidRequest;
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| invalid(format!("body: not valid JSON: {e}")))?;
    let serde_json::Value::Object(fields) = value else {
        return Err(invalid("body: must be a JSON object".into()));
    };
    if let Some(other) = fields.keys().find(|k| k.as_str() != "to") {
        return Err(invalid(format!(
            "{other}: unknown field; the body is {{\"to\": \"/path\"}}"
        )));
    }
    let to = match fields.get("to") {
        None => {
            return Err(invalid(
                "to: required: the absolute path of a new file".into(),
            ));
        }
        Some(serde_json::Value::String(to)) => to,
        Some(_) => return Err(invalid("to: must be a string".into())),
    };
    check_to(to).map_err(|why| invalid(format!("to: {why}")))
}

fn check_to(to: &str) -> Result<PathBuf, &'static str> {
    if to.is_empty() {
        return Err("must not be empty");
    }
    if to.len() > MAX_TO_BYTES {
        return Err("must be at most 4096 bytes");
    }
    if to.contains('\0') {
        return Err("must not contain NUL");
    }
    let path = Path::new(to);
    if !path.is_absolute() {
        return Err("must be an absolute path (the server's working directory is not yours)");
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err("must not contain .. segments");
    }
    if to.ends_with('/') || path.file_name().is_none() {
        return Err("must name a file, not a directory");
    }
    Ok(path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(body: &str, expected: Result<&str, &str>) {
        match (parse(body.as_bytes()), expected) {
            (Ok(path), Ok(want)) => assert_eq!(path, Path::new(want), "{body}"),
            (Err(ApiError::InvalidRequest(message)), Err(prefix)) => {
                assert!(message.starts_with(prefix), "{body}: {message}")
            }
            (got, want) => panic!("{body}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn targets_are_absolute_new_file_paths_and_nothing_else() {
        check(r#"{"to":"/var/backups/tc.db"}"#, Ok("/var/backups/tc.db"));
        check(r#"{"to":"tc.db"}"#, Err("to: must be an absolute path"));
        check(r#"{"to":"./tc.db"}"#, Err("to: must be an absolute path"));
        check(
            r#"{"to":"/var/../etc/tc.db"}"#,
            Err("to: must not contain .."),
        );
        check(r#"{"to":"/var/backups/"}"#, Err("to: must name a file"));
        check(r#"{"to":"/"}"#, Err("to: must name a file"));
        check(r#"{"to":""}"#, Err("to: must not be empty"));
        check(r#"{"to":"/a\u0000b"}"#, Err("to: must not contain NUL"));
        check(r#"{"to":7}"#, Err("to: must be a string"));
        check(r#"{}"#, Err("to: required"));
        check(r#"{"to":"/a","force":true}"#, Err("force: unknown field"));
        check(r#"["/a"]"#, Err("body: must be a JSON object"));
        check(r#"{"to":"#, Err("body: not valid JSON"));
        let long = format!(r#"{{"to":"/{}"}}"#, "a".repeat(MAX_TO_BYTES));
        check(&long, Err("to: must be at most 4096 bytes"));
    }
}
