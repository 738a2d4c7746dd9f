//! Runs the real `tc-server` as a child process: starts it on port 0 with a
//! database in a temp dir, reads its JSON log lines (a thread drains stdout
//! so the child never blocks on a full pipe), and signals or kills it.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::bin;

/// Failure guard for start-up and for waiting on log lines or an exit.
const GUARD: Duration = Duration::from_secs(30);

/// Flags and environment for one server run. The defaults keep tests fast:
/// short backoff and poll interval, a short grace.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    flags: Vec<(String, Option<String>)>,
    envs: Vec<(String, String)>,
    db: PathBuf,
}

impl Config {
    /// A server on 127.0.0.1:0 with its database at `dir/t.db`.
    pub(crate) fn new(dir: &Path) -> Config {
        let db = dir.join("t.db");
        let mut config = Config {
            flags: Vec::new(),
            envs: Vec::new(),
            db: db.clone(),
        };
        config
            .flag("--listen", "127.0.0.1:0")
            .flag("--db", db.to_str().unwrap())
            .flag("--log-format", "json")
            .flag("--backoff-base-ms", "20")
            .flag("--backoff-cap-ms", "100")
            .flag("--poll-interval-ms", "20")
            .flag("--shutdown-grace-ms", "2000");
        config
    }

    /// A server configured only through `envs` (no flag at all).
    pub(crate) fn env_only(db: &Path, envs: &[(&str, &str)]) -> Config {
        Config {
            flags: Vec::new(),
            envs: envs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            db: db.to_owned(),
        }
    }

    /// Sets a flag, replacing an earlier value of the same flag (repeatable
    /// flags go through [`Config::repeat`]).
    pub(crate) fn flag(&mut self, name: &str, value: &str) -> &mut Config {
        self.flags.retain(|(n, _)| n != name);
        self.flags.push((name.to_owned(), Some(value.to_owned())));
        self
    }

    /// Sets a flag that takes no value (`--metrics-public`).
    pub(crate) fn switch(&mut self, name: &str) -> &mut Config {
        self.flags.retain(|(n, _)| n != name);
        self.flags.push((name.to_owned(), None));
        self
    }

    /// Removes every occurrence of a flag.
    pub(crate) fn unset(&mut self, name: &str) -> &mut Config {
        self.flags.retain(|(n, _)| n != name);
        self
    }

    /// Adds one more occurrence of a repeatable flag.
    pub(crate) fn repeat(&mut self, name: &str, value: &str) -> &mut Config {
        self.flags.push((name.to_owned(), Some(value.to_owned())));
        self
    }

    /// Sets an environment variable of the process.
    pub(crate) fn env(&mut self, key: &str, value: &str) -> &mut Config {
        self.envs.retain(|(k, _)| k != key);
        self.envs.push((key.to_owned(), value.to_owned()));
        self
    }

    pub(crate) fn db(&self) -> &Path {
        &self.db
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(bin::tc_server());
        for (name, value) in &self.flags {
            cmd.arg(name);
            if let Some(v) = value {
                cmd.arg(v);
            }
        }
        // The developer's own TC_* settings must not leak into a test.
        for (key, _) in std::env::vars_os() {
            // Nor OpenTelemetry's (an exporter the test did not ask for).
            if key.to_string_lossy().starts_with("TC_")
                || key.to_string_lossy().starts_with("OTEL_")
            {
                cmd.env_remove(key);
            }
        }
        cmd.env("RUST_LOG", "info");
        for (k, v) in &self.envs {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// Runs the binary to completion (for runs that must fail at start):
    /// its exit status and stderr.
    pub(crate) async fn run_to_exit(&self) -> (ExitStatus, String) {
        let (status, _, stderr) = run(self.command()).await;
        (status, stderr)
    }

    /// Runs `tc-server demo` (flags are ignored; the environment applies):
    /// its exit status, stdout and stderr.
    pub(crate) async fn run_demo(&self) -> (ExitStatus, String, String) {
        let mut cmd = self.command();
        cmd.arg("demo");
        run(cmd).await
    }

    pub(crate) async fn start(&self) -> Server {
        Server::spawn(self).await
    }
}

async fn run(mut cmd: Command) -> (ExitStatus, String, String) {
    let out = tokio::time::timeout(
        GUARD,
        tokio::task::spawn_blocking(move || cmd.output().unwrap()),
    )
    .await
    .expect("tc-server did not exit within 30 s")
    .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A running tc-server process. Dropping it kills the process.
pub(crate) struct Server {
    pid: u32,
    pub(crate) addr: SocketAddr,
    logs: mpsc::UnboundedReceiver<Value>,
    seen: Vec<Value>,
    stderr: Arc<Mutex<String>>,
    exit: Option<oneshot::Receiver<ExitStatus>>,
    exited: Option<ExitStatus>,
}

impl Server {
    async fn spawn(config: &Config) -> Server {
        let mut child = config.command().spawn().expect("spawn tc-server");
        let pid = child.id();
        let stdout = child.stdout.take().unwrap();
        let mut stderr_pipe = child.stderr.take().unwrap();

        let (log_tx, logs) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let value = serde_json::from_str(&line).unwrap_or(Value::String(line));
                if log_tx.send(value).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let stderr_sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            loop {
                match stderr_pipe.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => stderr_sink
                        .lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&chunk[..n])),
                }
            }
        });
        let (exit_tx, exit) = oneshot::channel();
        std::thread::spawn(move || {
            if let Ok(status) = child.wait() {
                let _ = exit_tx.send(status);
            }
        });

        let mut server = Server {
            pid,
            addr: "0.0.0.0:0".parse().unwrap(),
            logs,
            seen: Vec::new(),
            stderr,
            exit: Some(exit),
            exited: None,
        };
        let listening = server
            .logged_where(
                |v| {
                    v["message"] == "listening"
                        || v.as_str().is_some_and(|l| l.contains("listening"))
                },
                "listening",
            )
            .await;
        let addr = match listening.as_str() {
            // Text format: `... listening addr=127.0.0.1:1234`.
            Some(line) => line
                .split_whitespace()
                .find_map(|word| word.strip_prefix("addr="))
                .unwrap_or_else(|| panic!("listening line without addr=: {line}"))
                .to_owned(),
            None => listening["addr"]
                .as_str()
                .unwrap_or_else(|| panic!("listening event without addr: {listening}"))
                .to_owned(),
        };
        server.addr = addr.parse().expect("addr is a socket address");
        server
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    pub(crate) fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Every log line read so far (after [`Server::logged`] pulled them in).
    pub(crate) fn seen_logs(&self) -> &[Value] {
        &self.seen
    }

    /// The first log event whose `message` is `message`, waiting for it if
    /// it has not been logged yet.
    pub(crate) async fn logged(&mut self, message: &str) -> Value {
        self.logged_where(|v| v["message"] == message, message)
            .await
    }

    /// The first log line matching `pred`, waiting for it.
    pub(crate) async fn logged_where(
        &mut self,
        pred: impl Fn(&Value) -> bool,
        what: &str,
    ) -> Value {
        if let Some(v) = self.seen.iter().find(|v| pred(v)) {
            return v.clone();
        }
        let deadline = tokio::time::Instant::now() + GUARD;
        loop {
            let next = tokio::time::timeout_at(deadline, self.logs.recv()).await;
            match next {
                Ok(Some(v)) => {
                    self.seen.push(v.clone());
                    if pred(&v) {
                        return v;
                    }
                }
                Ok(None) => panic!(
                    "tc-server's stdout ended before {what:?}; stderr:\n{}\nlogs:\n{:#?}",
                    self.stderr(),
                    self.seen
                ),
                Err(_) => panic!(
                    "no {what:?} log line within 30 s; stderr:\n{}\nlogs:\n{:#?}",
                    self.stderr(),
                    self.seen
                ),
            }
        }
    }

    /// Pulls in every log line the process wrote before it exited.
    async fn drain_logs(&mut self) {
        while let Ok(Some(v)) = tokio::time::timeout(GUARD, self.logs.recv()).await {
            self.seen.push(v);
        }
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {} failed", self.pid);
    }

    /// Sends SIGTERM.
    pub(crate) fn terminate(&self) {
        self.signal("-TERM");
    }

    /// Sends SIGINT.
    pub(crate) fn interrupt(&self) {
        self.signal("-INT");
    }

    /// Kills the process with SIGKILL and waits for it to be gone.
    pub(crate) async fn kill9(&mut self) {
        self.signal("-KILL");
        self.wait_exit().await;
    }

    /// Waits for the process to exit; its status. Every log line it wrote is
    /// in [`Server::seen_logs`] afterwards.
    pub(crate) async fn wait_exit(&mut self) -> ExitStatus {
        if let Some(status) = self.exited {
            return status;
        }
        let exit = self.exit.take().expect("exit receiver");
        let status = tokio::time::timeout(GUARD, exit)
            .await
            .unwrap_or_else(|_| panic!("tc-server did not exit within 30 s"))
            .expect("the waiter thread reports the exit");
        self.exited = Some(status);
        self.drain_logs().await;
        status
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let gone =
            self.exited.is_some() || self.exit.as_mut().is_some_and(|rx| rx.try_recv().is_ok());
        if !gone {
            let _ = Command::new("kill")
                .args(["-KILL", &self.pid.to_string()])
                .status();
        }
    }
}
