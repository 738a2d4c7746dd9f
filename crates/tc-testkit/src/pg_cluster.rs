//! A throwaway PostgreSQL cluster: `initdb` into a fresh temporary
//! directory, a server of its own on a free loopback port, stopped and
//! removed on drop. For what must not touch a shared server: restarting
//! PostgreSQL under load (`cargo xtask chaos --store postgres`), or
//! changing its settings. [`PgCluster::start_tls`] starts one with `ssl = on`
//! and a certificate of the caller's (a TLS test).
//!
//! The binaries come from `TC_PG_BIN_DIR`, else the newest
//! `/usr/lib/postgresql/<version>/bin` (Debian's layout), else `PATH`. As
//! root they run as the `postgres` user (`runuser -u postgres --`), which
//! owns the directory; `initdb` refuses to run as root. Local connections
//! are trusted (loopback only; the socket directory is the data directory).
//!
//! Every call blocks (it runs `pg_ctl`, which waits for the server): from
//! async code, call it on `tokio::task::spawn_blocking`.

use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::Command;

/// How long `pg_ctl` waits for a start or a stop to finish.
const PG_CTL_WAIT_S: &str = "60";

/// How a server is stopped (`pg_ctl stop -m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Sessions are ended, then a checkpoint: what `pg_ctlcluster restart`
    /// does.
    Fast,
    /// No checkpoint: like a crash of PostgreSQL; the next start recovers
    /// from the WAL.
    Immediate,
}

impl Stop {
    fn mode(self) -> &'static str {
        match self {
            Stop::Fast => "fast",
            Stop::Immediate => "immediate",
        }
    }
}

/// The certificate (PEM, with its chain if any) and private key (PEM) a
/// TLS cluster serves.
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// The server's certificate.
    pub cert_pem: String,
    /// Its private key.
    pub key_pem: String,
}

/// A running throwaway cluster; stopped (immediately) and deleted on drop.
pub struct PgCluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
}

impl PgCluster {
    /// Initialises a cluster and starts it on a free loopback port, with
    /// `settings` (name, value) added to its `postgresql.conf`.
    pub fn start(settings: &[(&str, &str)]) -> Result<PgCluster, String> {
        PgCluster::start_with(settings, None)
    }

    /// Like [`PgCluster::start`], with `ssl = on` and `tls`'s certificate
    /// and key (written into the data directory as `server.crt` and
    /// `server.key`, the key readable by its owner only, as PostgreSQL
    /// demands). Plain-text connections are still accepted.
    pub fn start_tls(settings: &[(&str, &str)], tls: &ServerTls) -> Result<PgCluster, String> {
        PgCluster::start_with(settings, Some(tls))
    }

    fn start_with(settings: &[(&str, &str)], tls: Option<&ServerTls>) -> Result<PgCluster, String> {
        let bin = bin_dir();
        let as_postgres = is_root()?;
        let dir = tempfile::Builder::new()
            .prefix("tc-pg-cluster-")
            .tempdir()
            .map_err(|e| format!("temporary directory: {e}"))?;
        let data = dir.path().join("data");
        std::fs::create_dir(&data).map_err(|e| format!("{}: {e}", data.display()))?;
        if as_postgres {
            run(Command::new("chown")
                .arg("-R")
                .arg("postgres:")
                .arg(dir.path()))?;
        }
        let mut cluster = PgCluster {
            dir,
            bin,
            port: 0,
            as_postgres,
        };
        cluster.pg(
            "initdb",
            &[
                "-D",
                &cluster.data_path(),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ],
        )?;
        let mut settings = settings.to_vec();
        if let Some(tls) = tls {
            cluster.install_tls(tls)?;
            settings.extend([
                ("ssl", "on"),
                ("ssl_cert_file", "server.crt"),
                ("ssl_key_file", "server.key"),
            ]);
        }
        // A port free now may be taken before the server binds it: a few
        // tries with a fresh one each.
        let mut last = String::new();
        for _ in 0..5 {
            cluster.port = free_port()?;
            cluster.configure(&settings)?;
            match cluster.resume() {
                Ok(()) => return Ok(cluster),
                Err(e) => last = e,
            }
        }
        Err(format!("the throwaway cluster did not start: {last}"))
    }

    /// `postgresql://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The data directory (its `postgresql.conf`, server certificates).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The server's log so far (`pg_ctl -l`), for a failure's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// Stops the server.
    pub fn stop(&self, how: Stop) -> Result<(), String> {
        self.pg(
            "pg_ctl",
            &[
                "stop",
                "-D",
                &self.data_path(),
                "-m",
                how.mode(),
                "-w",
                "-t",
                PG_CTL_WAIT_S,
            ],
        )
    }

    /// Starts the server again (after [`PgCluster::stop`]), waiting until
    /// it accepts connections.
    pub fn resume(&self) -> Result<(), String> {
        let log = self.dir.path().join("server.log");
        self.pg(
            "pg_ctl",
            &[
                "start",
                "-D",
                &self.data_path(),
                "-l",
                &log.to_string_lossy(),
                "-w",
                "-t",
                PG_CTL_WAIT_S,
            ],
        )
        .map_err(|e| format!("{e}\n{}", tail(&self.log(), 2000)))
    }

    /// Stops the server and starts it again.
    pub fn restart(&self, how: Stop) -> Result<(), String> {
        self.stop(how)?;
        self.resume()
    }

    /// Writes the server's certificate and key into the data directory.
    fn install_tls(&self, tls: &ServerTls) -> Result<(), String> {
        use std::os::unix::fs::PermissionsExt;
        let data = self.data_dir();
        for (name, pem) in [("server.crt", &tls.cert_pem), ("server.key", &tls.key_pem)] {
            let path = data.join(name);
            std::fs::write(&path, pem).map_err(|e| format!("{}: {e}", path.display()))?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            if self.as_postgres {
                run(Command::new("chown").arg("postgres:").arg(&path))?;
            }
        }
        Ok(())
    }

    fn data_path(&self) -> String {
        self.data_dir().to_string_lossy().into_owned()
    }

    /// Appends this run's settings to `postgresql.conf` (a later line wins
    /// over an earlier one, so a new port replaces the last try's).
    fn configure(&self, settings: &[(&str, &str)]) -> Result<(), String> {
        let path = self.data_dir().join("postgresql.conf");
        let mut conf =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let socket_dir = self.dir.path().to_string_lossy().into_owned();
        let port = self.port.to_string();
        let ours = [
            ("listen_addresses", "127.0.0.1"),
            ("port", port.as_str()),
            ("unix_socket_directories", socket_dir.as_str()),
            ("max_connections", "100"),
            ("shared_buffers", "32MB"),
        ];
        for (name, value) in ours.iter().chain(settings) {
            conf.push_str(&format!("\n{name} = '{}'", value.replace('\'', "''")));
        }
        conf.push('\n');
        std::fs::write(&path, conf).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Runs one of PostgreSQL's programs, as `postgres` when we are root.
    fn pg(&self, program: &str, args: &[&str]) -> Result<(), String> {
        let path = self.bin.join(program);
        let mut command = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&path);
            c
        } else {
            Command::new(&path)
        };
        command.args(args).current_dir(self.dir.path());
        run(&mut command)
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        // Nothing to keep: no checkpoint, then the directory goes.
        let _ = self.stop(Stop::Immediate);
    }
}

/// Where PostgreSQL's programs are.
fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TC_PG_BIN_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("pg_ctl").is_file().then_some((version, bin))
        })
        .max_by_key(|(version, _)| *version);
    // Empty: the programs are looked up on PATH.
    newest.map_or_else(PathBuf::new, |(_, bin)| bin)
}

fn is_root() -> Result<bool, String> {
    let out = Command::new("id")
        .arg("-u")
        .output()
        .map_err(|e| format!("id -u: {e}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim() == "0")
}

fn free_port() -> Result<u16, String> {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| format!("a free port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("a free port: {e}"))
}

/// Runs `command` to its end; its output in the error when it fails.
fn run(command: &mut Command) -> Result<(), String> {
    let shown = format!("{command:?}");
    let out = command
        .output()
        .map_err(|e| format!("{shown}: {e} (is PostgreSQL installed? TC_PG_BIN_DIR)"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{shown}: {}\n{}{}",
            out.status,
            tail(&String::from_utf8_lossy(&out.stdout), 2000),
            tail(&String::from_utf8_lossy(&out.stderr), 2000)
        ))
    }
}

fn tail(text: &str, max: usize) -> &str {
    let start = text.len().saturating_sub(max);
    let start = (start..=text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    &text[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Started, stopped for a while, started again and restarted, then
    /// gone with its directory. Passes, saying why, where PostgreSQL is not
    /// installed (unless TC_REQUIRE_POSTGRES=1, as in CI).
    #[test]
    fn a_throwaway_cluster_starts_stops_restarts_and_goes_away() {
        let cluster = match PgCluster::start(&[("log_min_messages", "warning")]) {
            Ok(cluster) => cluster,
            Err(e) if std::env::var("TC_REQUIRE_POSTGRES").as_deref() != Ok("1") => {
                #[allow(clippy::print_stdout)]
                {
                    println!("skipped: no throwaway PostgreSQL cluster: {e}");
                }
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let accepting =
            |c: &PgCluster| std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, c.port())).is_ok();
        assert!(accepting(&cluster), "{}", cluster.log());
        assert!(
            cluster
                .url()
                .ends_with(&format!(":{}/postgres", cluster.port()))
        );
        cluster.stop(Stop::Fast).unwrap();
        assert!(!accepting(&cluster));
        cluster.resume().unwrap();
        assert!(accepting(&cluster));
        cluster.restart(Stop::Immediate).unwrap();
        assert!(accepting(&cluster));
        let dir = cluster.data_dir();
        drop(cluster);
        assert!(!dir.exists(), "{} left behind", dir.display());
    }

    #[test]
    fn tails_cut_at_character_boundaries() {
        let check = |text: &str, max: usize, want: &str| assert_eq!(tail(text, max), want);
        check("abcdef", 3, "def");
        check("ab", 10, "ab");
        check("aé", 1, "");
        check("éa", 2, "a");
    }
}
