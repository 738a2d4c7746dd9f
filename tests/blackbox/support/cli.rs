//! Runs `tc-server task …` / `tc-server destination …`, the command-line
//! client, as a child process against a server: its exit code, stdout and
//! stderr.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::bin;

/// Failure guard for one client run (watch and --wait included).
const GUARD: Duration = Duration::from_secs(30);

/// The client, pointed at one server through `TC_SERVER_URL`.
#[derive(Debug, Clone)]
pub(crate) struct Cli {
    envs: Vec<(String, String)>,
}

/// A finished client run.
#[derive(Debug)]
pub(crate) struct Run {
    /// The exit code (`None`: killed by a signal).
    pub(crate) code: Option<i32>,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: String,
}

impl Run {
    pub(crate) fn out(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Stdout as JSON lines: each line one object, no blank line.
    pub(crate) fn json_lines(&self) -> Vec<Value> {
        let out = self.out();
        out.lines()
            .map(|line| {
                let value: Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line:?}\nin {out}"));
                assert!(value.is_object(), "not an object: {line}");
                value
            })
            .collect()
    }

    /// The one JSON object on stdout.
    pub(crate) fn json(&self) -> Value {
        let mut lines = self.json_lines();
        assert_eq!(lines.len(), 1, "one JSON line expected: {}", self.out());
        lines.remove(0)
    }

    /// The value after `label` on the line that starts with it (the human
    /// output's `label  value` rows), up to the next whitespace.
    pub(crate) fn field(&self, label: &str) -> String {
        let out = self.out();
        out.lines()
            .find_map(|line| line.strip_prefix(label))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no {label:?} line in:\n{out}"))
            .to_owned()
    }

    /// Asserts the exit code, with the output in the message.
    pub(crate) fn expect(&self, code: i32) -> &Run {
        assert_eq!(
            self.code,
            Some(code),
            "exit code; stdout:\n{}\nstderr:\n{}",
            self.out(),
            self.stderr
        );
        self
    }
}

impl Cli {
    /// The client for the server at `base_url`.
    pub(crate) fn new(base_url: &str) -> Cli {
        Cli {
            envs: vec![("TC_SERVER_URL".to_owned(), base_url.to_owned())],
        }
    }

    /// The same client with one more environment variable.
    pub(crate) fn env(&self, key: &str, value: &str) -> Cli {
        let mut cli = self.clone();
        cli.envs.retain(|(k, _)| k != key);
        cli.envs.push((key.to_owned(), value.to_owned()));
        cli
    }

    /// `program` with the developer's own settings removed (`TC_*`,
    /// `NO_COLOR`: they must not leak into a test) and this client's set.
    fn with_env(&self, mut cmd: Command) -> Command {
        for (key, _) in std::env::vars_os() {
            let name = key.to_string_lossy();
            if name.starts_with("TC_") || name == "NO_COLOR" {
                cmd.env_remove(&key);
            }
        }
        for (k, v) in &self.envs {
            cmd.env(k, v);
        }
        cmd
    }

    /// Runs `tc-server <args>` with stdin closed (not a terminal).
    pub(crate) async fn run(&self, args: &[&str]) -> Run {
        let mut cmd = self.with_env(Command::new(bin::tc_server()));
        cmd.args(args).stdin(Stdio::null());
        output(cmd, Vec::new()).await
    }

    /// Runs `tc-server <args>` on a pseudo-terminal (util-linux `script`,
    /// in Debian's essential set): stdin and stdout are a terminal, `input`
    /// is typed into it. Stdout holds what the terminal showed (`\r\n` line
    /// ends, the typed input echoed).
    pub(crate) async fn run_on_terminal(&self, args: &[&str], input: &str) -> Run {
        let mut line = shell_quote(&bin::tc_server().to_string_lossy());
        for arg in args {
            line.push(' ');
            line.push_str(&shell_quote(arg));
        }
        let mut cmd = self.with_env(Command::new("script"));
        cmd.args(["--quiet", "--return", "--command", &line, "/dev/null"])
            .stdin(Stdio::piped());
        output(cmd, input.as_bytes().to_vec()).await
    }
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

async fn output(mut cmd: Command, input: Vec<u8>) -> Run {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let program = format!("{cmd:?}");
    let out = tokio::time::timeout(
        GUARD,
        tokio::task::spawn_blocking(move || {
            let mut child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
            if let Some(mut stdin) = child.stdin.take() {
                stdin.write_all(&input).unwrap();
            }
            child.wait_with_output().unwrap()
        }),
    )
    .await
    .expect("the client did not exit within 30 s")
    .unwrap();
    Run {
        code: out.status.code(),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
