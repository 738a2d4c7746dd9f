//! Driving `wrk` (Debian's package `wrk`), a load generator in C with Lua
//! scripts, for the figures whose load must not be the bound (phase 14):
//! the bench's own HTTP producer tops out well below what tc-server takes
//! on a small machine. The script is `wrk_submit.lua`; its
//! `done` prints one `WRK_SUMMARY` line that [`parse_summary`] reads.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The Lua script, written next to the run's databases.
const SUBMIT_SCRIPT: &str = include_str!("wrk_submit.lua");

/// What one wrk window measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct WrkWindow {
    /// Requests answered (any status).
    pub(crate) requests: u64,
    /// The window's length, as wrk timed it.
    pub(crate) elapsed: Duration,
    /// Answers that were not 2xx or 3xx.
    pub(crate) non_2xx: u64,
    /// Connect, read, write and timeout errors.
    pub(crate) socket_errors: u64,
    /// Latency percentiles.
    pub(crate) p50: Duration,
    pub(crate) p99: Duration,
}

impl WrkWindow {
    /// Requests answered 2xx/3xx.
    pub(crate) fn ok(&self) -> u64 {
        self.requests.saturating_sub(self.non_2xx)
    }

    /// Accepted requests per second.
    pub(crate) fn per_second(&self) -> f64 {
        self.ok() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// wrk on this machine, and its script.
pub(crate) struct Wrk {
    script: PathBuf,
    threads: usize,
}

impl Wrk {
    /// `None` when no `wrk` runs here (the phase says so and is skipped).
    pub(crate) fn find(dir: &Path) -> Result<Option<Wrk>, String> {
        // `wrk -v` prints its version and exits 1: only a spawn failure
        // means it is missing.
        match Command::new("wrk").arg("-v").output() {
            Ok(out) if String::from_utf8_lossy(&out.stdout).contains("wrk") => {}
            Ok(_) => return Ok(None),
            Err(_) => return Ok(None),
        }
        let script = dir.join("wrk_submit.lua");
        std::fs::write(&script, SUBMIT_SCRIPT)
            .map_err(|e| format!("writing {}: {e}", script.display()))?;
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
        Ok(Some(Wrk { script, threads }))
    }

    /// Submits for `window` (whole seconds, at least one) over
    /// `connections`, each a new task to `url`, keys prefixed `run`.
    pub(crate) async fn submits(
        &self,
        target: SocketAddr,
        connections: usize,
        window: Duration,
        url: &str,
        run: &str,
    ) -> Result<WrkWindow, String> {
        let mut command = Command::new("wrk");
        command
            .arg(format!("-t{}", self.threads.min(connections.max(1))))
            .arg(format!("-c{connections}"))
            .arg(format!("-d{}s", window.as_secs().max(1)))
            .arg("--timeout")
            .arg("10s")
            .arg("-s")
            .arg(&self.script)
            .arg(format!("http://{target}/"))
            .env("WRK_URL", url)
            .env("WRK_RUN", run);
        let out = tokio::task::spawn_blocking(move || command.output())
            .await
            .map_err(|e| format!("wrk: {e}"))?
            .map_err(|e| format!("wrk: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        parse_summary(&stdout).ok_or_else(|| {
            format!(
                "wrk printed no summary (status {}): {}{}",
                out.status,
                stdout,
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }
}

/// The script's `WRK_SUMMARY requests duration_us non_2xx socket_errors
/// p50_us p99_us` line.
pub(crate) fn parse_summary(stdout: &str) -> Option<WrkWindow> {
    let line = stdout
        .lines()
        .find_map(|line| line.strip_prefix("WRK_SUMMARY "))?;
    let n: Vec<u64> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let [requests, duration_us, non_2xx, socket_errors, p50, p99] = n[..] else {
        return None;
    };
    Some(WrkWindow {
        requests,
        elapsed: Duration::from_micros(duration_us),
        non_2xx,
        socket_errors,
        p50: Duration::from_micros(p50),
        p99: Duration::from_micros(p99),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_are_read_from_the_script_s_line() {
        let check = |stdout: &str, want: Option<(u64, u64, f64)>| {
            let got = parse_summary(stdout).map(|w| (w.ok(), w.socket_errors, w.per_second()));
            assert_eq!(got, want, "{stdout}");
        };
        check(
            "Running 2s test\nWRK_SUMMARY 2000 2000000 10 3 900 5000\nRequests/sec: 1000\n",
            Some((1990, 3, 995.0)),
        );
        check("Running 2s test\n", None);
        check("WRK_SUMMARY 1 2 3\n", None);
        check("WRK_SUMMARY a 2 3 4 5 6\n", None);
    }
}
