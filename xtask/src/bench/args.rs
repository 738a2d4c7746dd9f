//! `cargo xtask bench` arguments. Besides the public `--quick`, the bench
//! starts itself as a child process to serve the reference servers (the
//! no-op ceiling and the naive peer), so that they run in a process of their
//! own like tc-server does; those flags are internal.

use std::path::PathBuf;

/// What one invocation of `xtask bench` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Invocation {
    /// Print the usage.
    Help,
    /// Run the bench.
    Run {
        /// The short smoke run (under a minute) instead of the full one.
        quick: bool,
        /// `--store postgres`: the several-nodes figures (SQLite's one node
        /// beside PostgreSQL's 1, 2 and 3) instead of the six phases.
        postgres: bool,
        /// `--phase N` (repeatable): only these phases (by their number in
        /// the table); empty runs them all.
        phases: Vec<u8>,
        /// `--big-file N`: the tasks already in the file that phase 12's
        /// random-key batches go into (default: the plan's).
        big_file: Option<u64>,
        /// `--server-cores LIST`: tc-server runs under `taskset -c LIST`, so
        /// one machine compares core counts (the load stays where the bench
        /// itself runs).
        server_cores: Option<String>,
        /// `--backup-tasks N`: the backup phase's database size, instead of
        /// the plan's.
        backup_tasks: Option<u64>,
    },
    /// Serve one of the bench's reference servers until killed (internal).
    Peer(PeerArgs),
}

/// Which reference server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PeerKind {
    /// Reads the submit request and answers tc-server's bytes: the HTTP ceiling.
    Noop,
    /// Spawns the downstream call and forgets it, then answers: no store.
    Naive,
}

/// The internal arguments of a reference server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PeerArgs {
    pub(crate) kind: PeerKind,
    /// The response body to answer with (captured from tc-server).
    pub(crate) response_body: PathBuf,
    /// The `Location` header to answer with (captured from tc-server).
    pub(crate) location: String,
}

pub(crate) const USAGE: &str = "\
usage: cargo xtask bench [--quick] [--phase N]... [--store sqlite|postgres]
                         [--big-file N] [--server-cores LIST]

Builds tc-server in release and measures, in one run, each figure beside its
ceiling on this machine; prints a table and writes target/bench/results.json.
  --quick   a smoke run: smaller counts and shorter windows (under 60 s)
  --phase N only phase N (1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 16, 17 or 18; 7 or 15 with
            --store postgres; repeatable), to look into one
            figure; a figure beside another phase's result leaves that row out
            (phase 3 needs phase 1 picked too)
  --backup-tasks N
            phase 11's database: N pending tasks backed up while submits are
            timed (default 1,000,000; 50,000 with --quick)
  --store postgres
            submit and end-to-end rates of 1, 2 and 3 tc-server nodes on the
            PostgreSQL test database (TC_TEST_POSTGRES_URL, default
            postgresql://postgres@127.0.0.1:5432/test) beside one node on
            SQLite, with CPU per task of the nodes and of PostgreSQL (phase 7);
            the busiest 1-s window of calls to a destination at rate_per_s 50
            from 3 nodes (phase 15)
  --big-file N
            phase 12's batches of random keys go into a file already holding
            N tasks (default 500000; 20000 with --quick)
  --server-cores LIST
            run every tc-server under `taskset -c LIST` (e.g. 0-1), to compare
            core counts on one machine; run the bench itself on other cores
";

/// The phases `--phase` can pick (7 and 15 are `--store postgres`'s).
pub(crate) const PHASES: [u8; 16] = [1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 16, 17, 18];

/// The phases `--phase` can pick with `--store postgres`.
pub(crate) const NODE_PHASES: [u8; 2] = [7, 15];

/// Parses the arguments that follow `bench`.
pub(crate) fn parse(args: &[String]) -> Result<Invocation, String> {
    let mut quick = false;
    let mut postgres = false;
    let mut phases = Vec::new();
    let mut big_file = None;
    let mut server_cores = None;
    let mut backup_tasks = None;
    let mut peer: Option<PeerKind> = None;
    let mut response_body: Option<PathBuf> = None;
    let mut location: Option<String> = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let mut value = |name: &str| {
            rest.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match arg.as_str() {
            "--quick" => quick = true,
            "--store" => {
                postgres = match value("--store")?.as_str() {
                    "postgres" => true,
                    "sqlite" => false,
                    other => return Err(format!("--store: unknown store {other:?}")),
                };
            }
            "--phase" => {
                let n = value("--phase")?;
                match n.parse::<u8>() {
                    Ok(k) if PHASES.contains(&k) || NODE_PHASES.contains(&k) => {
                        phases.push((k, n));
                    }
                    _ => return Err(format!("--phase: no phase {n:?} (phases: {PHASES:?})")),
                }
            }
            "--big-file" => {
                let n = value("--big-file")?;
                match n.parse::<u64>() {
                    Ok(n) if n > 0 => big_file = Some(n),
                    _ => return Err(format!("--big-file: {n:?} is not a positive count")),
                }
            }
            "--server-cores" => {
                let cores = value("--server-cores")?;
                let valid = !cores.is_empty()
                    && cores
                        .chars()
                        .all(|c| c.is_ascii_digit() || c == '-' || c == ',');
                if !valid {
                    return Err(format!(
                        "--server-cores: {cores:?} is not a CPU list like 0-1 or 0,2"
                    ));
                }
                server_cores = Some(cores);
            }
            "--backup-tasks" => {
                let n = value("--backup-tasks")?;
                match n.parse::<u64>() {
                    Ok(n) if (1..=100_000_000).contains(&n) => backup_tasks = Some(n),
                    _ => {
                        return Err(format!(
                            "--backup-tasks: {n:?} is not a count from 1 to 100000000"
                        ));
                    }
                }
            }
            "--help" | "-h" => return Ok(Invocation::Help),
            "--peer" => {
                peer = Some(match value("--peer")?.as_str() {
                    "noop" => PeerKind::Noop,
                    "naive" => PeerKind::Naive,
                    other => return Err(format!("--peer: unknown server {other:?}")),
                });
            }
            "--response-body" => response_body = Some(value("--response-body")?.into()),
            "--location" => location = Some(value("--location")?),
            other => return Err(format!("bench: unknown argument {other:?}\n\n{USAGE}")),
        }
    }
    let allowed: &[u8] = if postgres { &NODE_PHASES } else { &PHASES };
    if let Some((_, n)) = phases.iter().find(|(k, _)| !allowed.contains(k)) {
        return Err(format!("--phase: no phase {n:?} (phases: {allowed:?})"));
    }
    let phases: Vec<u8> = phases.into_iter().map(|(k, _)| k).collect();
    match (peer, response_body, location) {
        (None, None, None) => Ok(Invocation::Run {
            quick,
            postgres,
            phases,
            big_file,
            server_cores,
            backup_tasks,
        }),
        (Some(kind), Some(response_body), Some(location))
            if !quick
                && phases.is_empty()
                && big_file.is_none()
                && server_cores.is_none()
                && backup_tasks.is_none() =>
        {
            Ok(Invocation::Peer(PeerArgs {
                kind,
                response_body,
                location,
            }))
        }
        _ => Err("--peer needs --response-body and --location, and nothing else".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(args: &[&str], want: Result<Invocation, &str>) {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        match (parse(&args), want) {
            (Ok(got), Ok(want)) => assert_eq!(got, want, "{args:?}"),
            (Err(got), Err(part)) => assert!(got.contains(part), "{args:?}: {got}"),
            (got, want) => panic!("{args:?}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn arguments() {
        let peer = |kind| {
            Ok(Invocation::Peer(PeerArgs {
                kind,
                response_body: "/tmp/b".into(),
                location: "/tasks/x".into(),
            }))
        };
        let run = |quick, postgres| {
            Ok(Invocation::Run {
                quick,
                postgres,
                phases: vec![],
                big_file: None,
                server_cores: None,
                backup_tasks: None,
            })
        };
        check(&[], run(false, false));
        check(&["--quick"], run(true, false));
        check(&["--store", "postgres"], run(false, true));
        check(&["--quick", "--store", "sqlite"], run(true, false));
        check(&["--store", "mysql"], Err("unknown store"));
        check(&["--help"], Ok(Invocation::Help));
        check(&["-h", "--bogus"], Ok(Invocation::Help));
        check(&["--fast"], Err("unknown argument \"--fast\""));
        check(&["quick"], Err("unknown argument"));
        check(
            &["--quick", "--phase", "5", "--phase", "8"],
            Ok(Invocation::Run {
                quick: true,
                postgres: false,
                phases: vec![5, 8],
                big_file: None,
                server_cores: None,
                backup_tasks: None,
            }),
        );
        check(
            &[
                "--phase",
                "12",
                "--big-file",
                "600000",
                "--server-cores",
                "0-1,4",
            ],
            Ok(Invocation::Run {
                quick: false,
                postgres: false,
                phases: vec![12],
                big_file: Some(600_000),
                server_cores: Some("0-1,4".into()),
                backup_tasks: None,
            }),
        );
        check(
            &["--big-file", "0"],
            Err("--big-file: \"0\" is not a positive"),
        );
        check(&["--big-file", "lots"], Err("not a positive count"));
        check(&["--server-cores", "0-1; rm"], Err("not a CPU list"));
        check(&["--server-cores", ""], Err("not a CPU list"));

        check(
            &["--quick", "--phase", "11", "--backup-tasks", "2000"],
            Ok(Invocation::Run {
                quick: true,
                postgres: false,
                phases: vec![11],
                big_file: None,
                server_cores: None,
                backup_tasks: Some(2000),
            }),
        );
        check(
            &["--backup-tasks", "0"],
            Err("--backup-tasks: \"0\" is not a count"),
        );
        check(&["--backup-tasks", "many"], Err("--backup-tasks"));
        check(&["--phase", "7"], Err("no phase \"7\""));
        check(&["--phase", "15"], Err("no phase \"15\""));
        check(&["--phase", "15", "--store", "postgres"], {
            Ok(Invocation::Run {
                quick: false,
                postgres: true,
                phases: vec![15],
                big_file: None,
                server_cores: None,
                backup_tasks: None,
            })
        });
        check(
            &["--store", "postgres", "--phase", "12"],
            Err("no phase \"12\""),
        );
        check(&["--phase", "x"], Err("no phase \"x\""));
        check(&["--phase"], Err("--phase needs a value"));
        let full = ["--response-body", "/tmp/b", "--location", "/tasks/x"];
        check(
            &[&["--peer", "noop"], &full[..]].concat(),
            peer(PeerKind::Noop),
        );
        check(
            &[&full[..], &["--peer", "naive"]].concat(),
            peer(PeerKind::Naive),
        );
        check(&["--peer", "fancy"], Err("unknown server \"fancy\""));
        check(&["--peer"], Err("--peer needs a value"));
        check(&["--peer", "noop"], Err("needs --response-body"));
        check(&["--location", "/x"], Err("needs --response-body"));
        check(
            &[&["--quick", "--peer", "noop"], &full[..]].concat(),
            Err("nothing else"),
        );
    }
}
