//! Child processes under test (tc-server and the reference peers): start,
//! learn the bound address from the `listening` log line, drain the logs,
//! read memory, stop.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// How long a child may take to print its `listening` line.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running child process serving HTTP on loopback. Killed on drop.
pub(crate) struct ServerProcess {
    pub(crate) name: String,
    pub(crate) addr: SocketAddr,
    child: Child,
    warnings: Arc<AtomicU64>,
    first_warning: Arc<std::sync::Mutex<Option<String>>>,
}

/// The `addr` of a `listening` log line, if this is one.
pub(crate) fn listening_addr(line: &str) -> Option<SocketAddr> {
    let value: serde_json::Value = serde_json::from_str(line).ok()?;
    if value.get("message")?.as_str()? != "listening" {
        return None;
    }
    value.get("addr")?.as_str()?.parse().ok()
}

/// Whether a JSON log line is at WARN or ERROR level.
fn is_warning(line: &str) -> bool {
    line.contains(r#""level":"WARN""#) || line.contains(r#""level":"ERROR""#)
}

impl ServerProcess {
    /// Starts `command` with stdout captured and waits for its `listening`
    /// line. The rest of stdout is read (and dropped) by a thread, so the
    /// child never blocks on a full pipe; warnings and errors are counted.
    pub(crate) fn start(name: &str, mut command: Command) -> Result<ServerProcess, String> {
        // stdin stays open for the child's life: the reference servers exit
        // when it closes, so none outlives a killed bench.
        command.stdout(Stdio::piped()).stdin(Stdio::piped());
        let mut child = command
            .spawn()
            .map_err(|e| format!("starting {name} ({command:?}): {e}"))?;
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            return Err(format!("{name}: no stdout"));
        };
        let warnings = Arc::new(AtomicU64::new(0));
        let first_warning = Arc::new(std::sync::Mutex::new(None));
        let (tx, rx) = mpsc::channel();
        {
            let warnings = Arc::clone(&warnings);
            let first_warning = Arc::clone(&first_warning);
            std::thread::spawn(move || {
                let mut tx = Some(tx);
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if let Some(addr) = listening_addr(&line)
                        && let Some(tx) = tx.take()
                    {
                        let _ = tx.send(addr);
                    } else if is_warning(&line) {
                        warnings.fetch_add(1, Ordering::Relaxed);
                        if let Ok(mut first) = first_warning.lock() {
                            first.get_or_insert(line);
                        }
                    }
                }
            });
        }
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(addr) => Ok(ServerProcess {
                name: name.to_owned(),
                addr,
                child,
                warnings,
                first_warning,
            }),
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
                Err(format!(
                    "{name} did not log `listening` within {START_TIMEOUT:?} ({status})"
                ))
            }
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Peak and current resident set, KiB.
    pub(crate) fn memory_kib(&self) -> Result<(u64, u64), String> {
        super::procfs::memory_kib(self.pid())
    }

    /// Its thread count now.
    pub(crate) fn threads(&self) -> Result<u64, String> {
        super::procfs::threads(self.pid())
    }

    /// Warnings and errors it logged so far, with the first one.
    pub(crate) fn warnings(&self) -> (u64, Option<String>) {
        let first = self.first_warning.lock().ok().and_then(|f| f.clone());
        (self.warnings.load(Ordering::Relaxed), first)
    }

    /// Its exit status if it has exited (never waits).
    pub(crate) fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Kills it (the bench's databases are throwaway) and reaps it.
    pub(crate) fn stop(mut self) {
        self.kill();
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `tc-server` on a loopback port 0 with JSON logs.
pub(crate) fn tc_server(binary: &Path, db: &Path, flags: &[&str]) -> Command {
    let mut command = Command::new(binary);
    command
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--db")
        .arg(db)
        .arg("--log-format")
        .arg("json")
        .args(flags)
        // The operator's RUST_LOG must not change what is measured.
        .env_remove("RUST_LOG");
    command
}

/// `command` run under `taskset -c cores`: the kernel keeps it (and every
/// thread it starts) on those cores. taskset execs the command, so the
/// child's pid is the server's.
pub(crate) fn pinned(command: Command, cores: &str) -> Command {
    let mut pinned = Command::new("taskset");
    pinned.arg("-c").arg(cores).arg(command.get_program());
    pinned.args(command.get_args());
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => pinned.env(key, value),
            None => pinned.env_remove(key),
        };
    }
    pinned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_lines() {
        let check = |line: &str, want: Option<&str>| {
            assert_eq!(
                listening_addr(line),
                want.map(|a| a.parse().unwrap()),
                "{line}"
            );
        };
        check(
            r#"{"timestamp":"t","level":"INFO","message":"listening","addr":"127.0.0.1:4567","concurrency":64}"#,
            Some("127.0.0.1:4567"),
        );
        check(
            r#"{"message":"listening","addr":"[::1]:80"}"#,
            Some("[::1]:80"),
        );
        check(r#"{"message":"task_submitted","addr":"127.0.0.1:1"}"#, None);
        check(r#"{"message":"listening","addr":"nowhere"}"#, None);
        check(r#"{"message":"listening"}"#, None);
        check("listening on 127.0.0.1:1", None);
    }

    #[test]
    fn warning_levels() {
        assert!(is_warning(r#"{"level":"WARN","message":"x"}"#));
        assert!(is_warning(r#"{"level":"ERROR","message":"x"}"#));
        assert!(!is_warning(r#"{"level":"INFO","message":"WARN"}"#));
    }
}
