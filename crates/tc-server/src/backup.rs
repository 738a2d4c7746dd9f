//! `tc-server backup --db PATH --to FILE`: a consistent copy of the SQLite
//! database, safe while a server runs on it (tc-store's online backup); and
//! the same copy behind `POST /admin/backup` (tc-http's [`tc_http::Backups`]
//! port), which a PostgreSQL-backed server refuses, pointing at
//! PostgreSQL's own tools.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use tc_http::{BackupMade, BackupRefused, Backups};
use tc_store::backup::{BackupConfig, BackupError, BackupReport};

/// The flags of `backup`.
#[derive(Debug, Clone, Args)]
pub(crate) struct BackupArgs {
    /// The SQLite database to copy (a server may be running on it).
    #[arg(long, env = "TC_DB", default_value = "./taskcenter.db")]
    pub(crate) db: PathBuf,

    /// The new file to write; it must not exist (a backup never overwrites)
    /// and its directory must. Written beside it under a hidden name, then
    /// renamed: the name only ever holds a complete copy.
    #[arg(long, value_name = "FILE")]
    pub(crate) to: PathBuf,

    /// Print the result as one JSON object (the fields of `POST
    /// /admin/backup`'s answer, plus `steps` and `longest_step_us`, the
    /// longest single copy step) instead of a sentence.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Runs `tc-server backup`: 0 when the copy is made, 1 when it is not (the
/// reason on stderr).
pub(crate) fn run(args: &BackupArgs) -> ExitCode {
    if args.db.to_str().is_some_and(tc_store_pg::is_postgres_url) {
        eprintln!("tc-server backup: --db: {POSTGRES_ADVICE}");
        return ExitCode::FAILURE;
    }
    match tc_store::backup::backup(&args.db, &args.to, &BackupConfig::default()) {
        Ok(report) => {
            let made = made(&report);
            let line = if args.json {
                serde_json::json!({
                    "path": made.path.display().to_string(),
                    "bytes": made.bytes,
                    "tasks": made.tasks,
                    "consistent_as_of": tc_http::rfc3339(made.consistent_as_of),
                    "duration_ms": made.duration_ms,
                    "steps": report.steps,
                    "longest_step_us": u64::try_from(report.longest_step.as_micros())
                        .unwrap_or(u64::MAX),
                })
                .to_string()
            } else {
                format!(
                    "backed up {} to {}: {} bytes, {} tasks, consistent as of {}, in {} ms",
                    args.db.display(),
                    made.path.display(),
                    made.bytes,
                    made.tasks,
                    tc_http::rfc3339(made.consistent_as_of),
                    made.duration_ms
                )
            };
            #[allow(clippy::print_stdout)]
            {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            let flag = match e {
                BackupError::Source { .. } => "--db",
                _ => "--to",
            };
            eprintln!("tc-server backup: {flag}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What a PostgreSQL-backed server says instead of copying.
const POSTGRES_ADVICE: &str = "this server's store is PostgreSQL: back it up with PostgreSQL's own \
     tools (pg_dump, pg_basebackup and WAL archiving for point-in-time recovery)";

fn made(report: &BackupReport) -> BackupMade {
    BackupMade {
        path: report.path.clone(),
        bytes: report.bytes,
        tasks: report.tasks,
        consistent_as_of: report.consistent_as_of,
        duration_ms: u64::try_from(report.duration.as_millis()).unwrap_or(u64::MAX),
    }
}

/// `POST /admin/backup` for the running server: the SQLite file it serves,
/// one backup at a time; or, on PostgreSQL, a refusal.
pub(crate) enum ServerBackups {
    /// The file the server runs on.
    Sqlite {
        /// The database file.
        db: PathBuf,
        /// Held while a backup runs: a second one is refused, not queued.
        running: Arc<tokio::sync::Mutex<()>>,
    },
    /// PostgreSQL has its own tools.
    Postgres,
}

impl ServerBackups {
    pub(crate) fn sqlite(db: &Path) -> ServerBackups {
        ServerBackups::Sqlite {
            db: db.to_owned(),
            running: Arc::new(tokio::sync::Mutex::new(())),
        }
    }
}

impl Backups for ServerBackups {
    fn backup(
        &self,
        to: PathBuf,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<BackupMade, BackupRefused>> + Send + '_>,
    > {
        Box::pin(async move {
            let (db, running) = match self {
                ServerBackups::Postgres => {
                    return Err(BackupRefused::Unsupported(POSTGRES_ADVICE.to_owned()));
                }
                ServerBackups::Sqlite { db, running } => (db.clone(), running),
            };
            let Ok(_one_at_a_time) = running.try_lock() else {
                return Err(BackupRefused::InProgress);
            };
            let copied = tokio::task::spawn_blocking(move || {
                tc_store::backup::backup(&db, &to, &BackupConfig::default())
            })
            .await
            .map_err(|e| BackupRefused::Failed(format!("the backup thread failed: {e}")))?;
            match copied {
                Ok(report) => {
                    tracing::info!(
                        path = %report.path.display(),
                        bytes = report.bytes,
                        tasks = report.tasks,
                        duration_ms = u64::try_from(report.duration.as_millis()).unwrap_or(u64::MAX),
                        longest_step_us = u64::try_from(report.longest_step.as_micros()).unwrap_or(u64::MAX),
                        "backup_made"
                    );
                    Ok(made(&report))
                }
                Err(e) => {
                    tracing::warn!(error = %e, "backup_failed");
                    Err(match e {
                        BackupError::TargetExists(_) => BackupRefused::TargetExists(e.to_string()),
                        BackupError::NoTargetDirectory(_)
                        | BackupError::NoFileName(_)
                        | BackupError::NotWritable { .. } => {
                            BackupRefused::InvalidTarget(e.to_string())
                        }
                        BackupError::Source { .. } | BackupError::Target { .. } => {
                            BackupRefused::Failed(e.to_string())
                        }
                    })
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn postgres_is_refused_and_one_backup_runs_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let to = dir.path().join("copy.db");
        match ServerBackups::Postgres.backup(to.clone()).await {
            Err(BackupRefused::Unsupported(message)) => {
                assert!(message.contains("pg_dump"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        let sqlite = ServerBackups::sqlite(&dir.path().join("t.db"));
        let ServerBackups::Sqlite { running, .. } = &sqlite else {
            unreachable!()
        };
        let held = running.lock().await;
        assert_eq!(
            sqlite.backup(to.clone()).await,
            Err(BackupRefused::InProgress)
        );
        drop(held);
        // Free again: now the missing database is what is wrong.
        match sqlite.backup(to.clone()).await {
            Err(BackupRefused::Failed(message)) => {
                assert!(message.contains("no database file"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        assert!(!to.exists());
    }

    #[test]
    fn the_command_line_needs_a_target() {
        use clap::Parser;
        let parse = |args: &[&str]| {
            crate::cli::Cli::try_parse_from(
                std::iter::once("tc-server").chain(args.iter().copied()),
            )
        };
        let err = parse(&["backup"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("--to"), "{err}");
        let cli = parse(&["backup", "--db", "/a.db", "--to", "/b.db", "--json"]).unwrap();
        match cli.command {
            Some(crate::cli::Command::Backup(args)) => {
                assert_eq!(
                    (args.db, args.to, args.json),
                    (PathBuf::from("/a.db"), PathBuf::from("/b.db"), true)
                )
            }
            other => panic!("{other:?}"),
        }
    }
}
