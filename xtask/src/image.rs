//! `cargo xtask image`: taskcenter's container image, built on this machine
//! without pulling anything from a container registry, then run to check it.
//!
//! The image is what the Containerfile builds, assembled by hand: the
//! release `tc-server`, the shared libraries it links (ldd), the CA
//! certificates, `/etc/passwd` and `/etc/group` naming its non-root user, an
//! empty `/tmp` and the data directory, on an empty base (`buildah from
//! scratch`), with the Containerfile's user, volume, port, environment,
//! health check and entry point ([`CONFIG`], which a test holds the
//! Containerfile to). It is committed as `taskcenter/tc-server:<version>`
//! and `:latest` in buildah's local storage (the `vfs` driver unless
//! `STORAGE_DRIVER` says otherwise), in Docker's format, which keeps the
//! health check.
//!
//! The check cannot `podman run` it (on CI crun may not set the container's
//! RLIMIT_NOFILE and NPROC), so it mounts a working container of the
//! committed image and runs the image's entry point with the image's
//! environment under `chroot` as the image's user: on a free loopback port,
//! `/healthz` answers 200, the image's own health check command passes, a
//! task reaches a loopback downstream and ends `success`, the database is
//! written into the volume as that user, SIGTERM stops the server cleanly,
//! and the health check then fails. Every wait is bounded; the working
//! containers are unmounted and removed however the run ends.

use std::io::Read as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::Value;
use tc_downstream::fake::{FakeServer, Reply, Script, Step};

use crate::harness::client::{Conn, Endpoint};
use crate::harness::server::ServerProcess;

const USAGE: &str = "usage: cargo xtask image

Builds taskcenter/tc-server:<version> and :latest with buildah (vfs storage)
from the release binary, without a registry, then runs it under chroot to
check /healthz and one task end to end. Needs root and buildah
(apt-get install -y buildah).";

/// The image's name; the Kubernetes example runs its `:<version>` tag.
pub(crate) const IMAGE: &str = "taskcenter/tc-server";
/// The non-root user and group the server runs as (distroless' `nonroot`).
const UID: u32 = 65532;
/// Its name in the image's `/etc/passwd`.
const USER_NAME: &str = "taskcenter";
/// The volume: the SQLite database lives here.
const DATA_DIR: &str = "/var/lib/taskcenter";
/// Where the binary is in the image.
const BINARY: &str = "/usr/local/bin/tc-server";
/// The CA bundle: the system roots that https:// downstreams, the client and
/// PostgreSQL TLS trust (rustls-native-certs reads this file).
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// One setting of the image: the `buildah config` flag that sets it and the
/// Containerfile line that says the same.
struct Setting {
    flag: &'static str,
    value: &'static str,
    containerfile: &'static str,
}

/// The image's configuration, as `buildah config` and the Containerfile
/// both say it.
const CONFIG: &[Setting] = &[
    Setting {
        flag: "--user",
        value: "65532:65532",
        containerfile: "USER 65532:65532",
    },
    Setting {
        flag: "--workingdir",
        value: DATA_DIR,
        containerfile: "WORKDIR /var/lib/taskcenter",
    },
    Setting {
        flag: "--env",
        value: "TC_DB=/var/lib/taskcenter/taskcenter.db",
        containerfile: "ENV TC_DB=/var/lib/taskcenter/taskcenter.db",
    },
    Setting {
        flag: "--env",
        value: "TC_LISTEN=0.0.0.0:8080",
        containerfile: "ENV TC_LISTEN=0.0.0.0:8080",
    },
    Setting {
        flag: "--volume",
        value: DATA_DIR,
        containerfile: r#"VOLUME ["/var/lib/taskcenter"]"#,
    },
    Setting {
        flag: "--port",
        value: "8080/tcp",
        containerfile: "EXPOSE 8080/tcp",
    },
    // buildah splits the health check on spaces (no JSON form).
    Setting {
        flag: "--healthcheck",
        value: "CMD /usr/local/bin/tc-server healthcheck",
        containerfile: r#"CMD ["/usr/local/bin/tc-server", "healthcheck"]"#,
    },
    Setting {
        flag: "--healthcheck-interval",
        value: "10s",
        containerfile: "--interval=10s",
    },
    Setting {
        flag: "--healthcheck-timeout",
        value: "6s",
        containerfile: "--timeout=6s",
    },
    Setting {
        flag: "--healthcheck-start-period",
        value: "5s",
        containerfile: "--start-period=5s",
    },
    Setting {
        flag: "--healthcheck-retries",
        value: "3",
        containerfile: "--retries=3",
    },
    Setting {
        flag: "--entrypoint",
        value: r#"["/usr/local/bin/tc-server"]"#,
        containerfile: r#"ENTRYPOINT ["/usr/local/bin/tc-server"]"#,
    },
];

/// How long the server may take to answer `/healthz` 200 once listening.
const HEALTHY_WITHIN: Duration = Duration::from_secs(15);
/// How long the check's task may take to end.
const TASK_WITHIN: Duration = Duration::from_secs(30);
/// How long the server may take to exit after SIGTERM.
const STOP_WITHIN: Duration = Duration::from_secs(20);
/// How long one run of the health check command may take.
const PROBE_WITHIN: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(50);

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    if let Some(arg) = args.first() {
        if arg == "-h" || arg == "--help" {
            println!("{USAGE}");
            return Ok(());
        }
        return Err(format!("unknown argument {arg:?}\n{USAGE}"));
    }
    preflight()?;
    let root = crate::harness::workspace_root();
    let missing = containerfile_drift(&read(&root.join("Containerfile"))?);
    if !missing.is_empty() {
        return Err(format!(
            "the Containerfile's run stage no longer says what this image has: {}",
            missing.join("; ")
        ));
    }
    let started = Instant::now();
    crate::harness::build(&root, crate::harness::PRODUCT_PACKAGES)?;
    let built = Instant::now();
    let version = version(&read(&root.join("crates/tc-server/Cargo.toml"))?)?;
    let binary = crate::harness::target_dir(&root)
        .join("release")
        .join("tc-server");
    let tag = format!("{IMAGE}:{version}");
    remove_abandoned_containers()?;
    let files = assemble(&binary, &tag, &version)?;
    println!(
        "image: {tag} and {IMAGE}:latest from scratch: {} files ({})",
        files.len(),
        files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let assembled = Instant::now();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    runtime.block_on(check(&tag))?;
    let done = Instant::now();
    println!(
        "image: ok in {:.1} s: release build {:.1} s, image {:.1} s, check {:.1} s",
        (done - started).as_secs_f64(),
        (built - started).as_secs_f64(),
        (assembled - built).as_secs_f64(),
        (done - assembled).as_secs_f64(),
    );
    Ok(())
}

/// The settings of [`CONFIG`] the Containerfile's run stage (after its last
/// `FROM`) does not say, each as the line it lacks.
fn containerfile_drift(containerfile: &str) -> Vec<String> {
    let run_stage = containerfile
        .rsplit_once("\nFROM ")
        .map_or("", |(_, stage)| stage);
    let chown = format!("--chown={UID}:{UID} /out{DATA_DIR} {DATA_DIR}");
    CONFIG
        .iter()
        .map(|s| s.containerfile.to_owned())
        .chain([chown])
        .filter(|line| !run_stage.contains(line.as_str()))
        .collect()
}

/// What the command needs of the machine, each missing piece said with its
/// remedy before anything is built.
fn preflight() -> Result<(), String> {
    for (tool, install) in [
        ("buildah", "apt-get install -y buildah"),
        ("chroot", "apt-get install -y coreutils"),
        ("ldd", "apt-get install -y libc-bin"),
    ] {
        let found = Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !found {
            return Err(format!("{tool} is missing: {install}"));
        }
    }
    let uid = output(Command::new("id").arg("-u"), "id -u")?;
    if uid.trim() != "0" {
        return Err(
            "needs root: buildah's vfs storage and chroot (run it as root or with sudo)".into(),
        );
    }
    Ok(())
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The `version` of a Cargo.toml's `[package]`.
pub(crate) fn version(manifest: &str) -> Result<String, String> {
    let mut in_package = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package
            && let Some((key, value)) = line.split_once('=')
            && key.trim() == "version"
        {
            let value = value.trim();
            if let Some(version) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
                return Ok(version.to_owned());
            }
        }
    }
    Err("tc-server's Cargo.toml: no [package] version = \"…\"".into())
}

/// The files `ldd` says a binary loads: each library's resolved path and the
/// dynamic loader's (the vDSO has no file).
fn shared_libraries(ldd: &str) -> Result<Vec<PathBuf>, String> {
    let mut paths = Vec::new();
    for line in ldd.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line.contains("not found") {
            return Err(format!("ldd: a library is missing: {line}"));
        }
        let file = match line.split_once("=>") {
            Some((_, resolved)) => resolved.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(file) = file.filter(|f| f.starts_with('/')) {
            paths.push(PathBuf::from(file));
        }
    }
    if paths.is_empty() {
        return Err(format!("ldd named no library:\n{ldd}"));
    }
    Ok(paths)
}

/// `buildah` on the storage driver the image lives in.
fn buildah() -> Command {
    let driver = std::env::var("STORAGE_DRIVER").unwrap_or_else(|_| "vfs".into());
    let mut command = Command::new("buildah");
    command.arg("--storage-driver").arg(driver);
    command
}

/// Runs `command`; its stdout, or an error with its stderr.
fn output(command: &mut Command, what: &str) -> Result<String, String> {
    let out = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A buildah working container, unmounted and removed on drop (so on every
/// error path as well).
struct WorkingContainer {
    name: String,
    mount: Option<PathBuf>,
}

impl WorkingContainer {
    /// A working container of `image` (`scratch`: empty), named for this
    /// process so that runs side by side never meet.
    fn from(image: &str, role: &str) -> Result<WorkingContainer, String> {
        let name = format!("taskcenter-image-{role}-{}", std::process::id());
        // A container left by a killed run of the same pid would clash.
        let _ = buildah().args(["rm", &name]).output();
        output(
            buildah().args(["from", "--pull-never", "--name", &name, image]),
            &format!("buildah from {image}"),
        )?;
        Ok(WorkingContainer { name, mount: None })
    }

    /// Its root file system on this machine.
    fn mount(&mut self) -> Result<PathBuf, String> {
        let path = output(buildah().args(["mount", &self.name]), "buildah mount")?;
        let path = PathBuf::from(path.trim());
        self.mount = Some(path.clone());
        Ok(path)
    }

    fn unmount(&mut self) -> Result<(), String> {
        if self.mount.take().is_some() {
            output(buildah().args(["umount", &self.name]), "buildah umount")?;
        }
        Ok(())
    }
}

impl Drop for WorkingContainer {
    fn drop(&mut self) {
        let _ = self.unmount();
        let _ = buildah().args(["rm", &self.name]).output();
    }
}

/// Removes the working containers of runs that were killed (their drop
/// never ran): each is named for its process, which no longer exists.
/// They would hold the old image, and a full copy of it under vfs.
fn remove_abandoned_containers() -> Result<(), String> {
    let names = output(
        buildah().args(["containers", "--format", "{{.ContainerName}}"]),
        "buildah containers",
    )?;
    for name in abandoned(&names, |pid| Path::new(&format!("/proc/{pid}")).exists()) {
        eprintln!("image: removing {name}, left by a run that was killed");
        output(buildah().args(["rm", &name]), "buildah rm")?;
    }
    Ok(())
}

/// The container names among `names` that one of this command's runs made
/// (`taskcenter-image-<role>-<pid>`) whose process is not `alive`.
fn abandoned(names: &str, alive: impl Fn(u32) -> bool) -> Vec<String> {
    names
        .lines()
        .map(str::trim)
        .filter(|name| {
            name.strip_prefix("taskcenter-image-")
                .and_then(|rest| rest.rsplit_once('-'))
                .and_then(|(_, pid)| pid.parse::<u32>().ok())
                .is_some_and(|pid| !alive(pid))
        })
        .map(str::to_owned)
        .collect()
}

/// Builds the image from scratch and commits it as `tag` and `:latest`; the
/// files it put in, by their path in the image.
fn assemble(binary: &Path, tag: &str, version: &str) -> Result<Vec<PathBuf>, String> {
    let ldd = output(Command::new("ldd").arg(binary), "ldd")?;
    let libraries = shared_libraries(&ldd)?;
    let mut container = WorkingContainer::from("scratch", "build")?;
    let rootfs = container.mount()?;
    let mut files = vec![PathBuf::from(BINARY), PathBuf::from(CA_BUNDLE)];
    put_file(&rootfs, binary, Path::new(BINARY), 0o755)?;
    put_file(&rootfs, Path::new(CA_BUNDLE), Path::new(CA_BUNDLE), 0o644)?;
    for library in &libraries {
        // Copied through symlinks (the loader's /lib64 path is one): the
        // image has a file wherever the binary will look.
        put_file(&rootfs, library, library, 0o755)?;
        files.push(library.clone());
    }
    let etc: [(&str, String); 3] = [
        (
            "/etc/passwd",
            format!(
                "root:x:0:0:root:/root:/sbin/nologin\n\
                 {USER_NAME}:x:{UID}:{UID}:taskcenter:{DATA_DIR}:/sbin/nologin\n"
            ),
        ),
        ("/etc/group", format!("root:x:0:\n{USER_NAME}:x:{UID}:\n")),
        // /etc/hosts first, then DNS, as glibc's own default would not say.
        ("/etc/nsswitch.conf", "hosts: files dns\n".to_owned()),
    ];
    for (path, text) in etc {
        let at = inside(&rootfs, Path::new(path));
        make_parent(&at)?;
        std::fs::write(&at, text).map_err(|e| format!("{}: {e}", at.display()))?;
        set_mode(&at, 0o644)?;
        files.push(PathBuf::from(path));
    }
    // SQLite's temporary files; writable by anyone, sticky as on any system.
    make_dir(&inside(&rootfs, Path::new("/tmp")), 0o1777, None)?;
    make_dir(&inside(&rootfs, Path::new(DATA_DIR)), 0o755, Some(UID))?;
    container.unmount()?;

    let mut config = buildah();
    config.arg("config");
    for setting in CONFIG {
        config.arg(setting.flag).arg(setting.value);
    }
    config
        .args(["--env", "PATH=/usr/local/bin:/usr/bin:/bin"])
        .args(["--stop-signal", "SIGTERM"])
        .args(["--created-by", "cargo xtask image"])
        .args(["--label", "org.opencontainers.image.title=taskcenter"])
        .args([
            "--label",
            &format!("org.opencontainers.image.version={version}"),
        ])
        .arg(&container.name);
    output(&mut config, "buildah config")?;
    // The previous build's image would be left untagged, a full copy under
    // vfs on every run: removed first (absent on a first run).
    let latest = format!("{IMAGE}:latest");
    let _ = buildah().args(["rmi", tag, &latest]).output();
    output(
        buildah().args(["commit", "--format", "docker", &container.name, tag]),
        "buildah commit",
    )?;
    output(buildah().args(["tag", tag, &latest]), "buildah tag")?;
    Ok(files)
}

/// `path` (absolute, in the image) under `rootfs`.
fn inside(rootfs: &Path, path: &Path) -> PathBuf {
    rootfs.join(path.strip_prefix("/").unwrap_or(path))
}

fn make_parent(path: &Path) -> Result<(), String> {
    match path.parent() {
        Some(parent) => {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))
        }
        None => Ok(()),
    }
}

fn set_mode(path: &Path, mode: u32) -> Result<(), String> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("chmod {}: {e}", path.display()))
}

fn put_file(rootfs: &Path, from: &Path, to: &Path, mode: u32) -> Result<(), String> {
    let at = inside(rootfs, to);
    make_parent(&at)?;
    std::fs::copy(from, &at).map_err(|e| format!("{} -> {}: {e}", from.display(), at.display()))?;
    set_mode(&at, mode)
}

fn make_dir(path: &Path, mode: u32, owner: Option<u32>) -> Result<(), String> {
    std::fs::create_dir_all(path).map_err(|e| format!("{}: {e}", path.display()))?;
    set_mode(path, mode)?;
    if let Some(id) = owner {
        std::os::unix::fs::chown(path, Some(id), Some(id))
            .map_err(|e| format!("chown {}: {e}", path.display()))?;
    }
    Ok(())
}

/// What the check reads of the committed image's configuration.
struct ImageConfig {
    user: String,
    env: Vec<(String, String)>,
    command: Vec<String>,
    healthcheck: Vec<String>,
}

/// The image's configuration from `buildah inspect`, each setting the check
/// relies on checked to be there.
fn image_config(inspect: &Value) -> Result<ImageConfig, String> {
    let config = &inspect["Docker"]["config"];
    let strings = |value: &Value| -> Vec<String> {
        value
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    };
    let user = config["User"].as_str().unwrap_or_default().to_owned();
    if user != format!("{UID}:{UID}") {
        return Err(format!("the image's user is {user:?}, not {UID}:{UID}"));
    }
    if config["Volumes"].get(DATA_DIR).is_none() {
        return Err(format!("the image has no volume {DATA_DIR}"));
    }
    if config["ExposedPorts"].get("8080/tcp").is_none() {
        return Err("the image does not expose 8080/tcp".into());
    }
    let healthcheck = strings(&config["Healthcheck"]["Test"]);
    let Some(("CMD", probe)) = healthcheck.split_first().map(|(k, r)| (k.as_str(), r)) else {
        return Err(format!(
            "the image's health check is {healthcheck:?}, not CMD …"
        ));
    };
    let mut command = strings(&config["Entrypoint"]);
    command.extend(strings(&config["Cmd"]));
    if command.is_empty() {
        return Err("the image has no entry point".into());
    }
    let env = strings(&config["Env"])
        .iter()
        .filter_map(|e| e.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    Ok(ImageConfig {
        user,
        env,
        command,
        healthcheck: probe.to_vec(),
    })
}

/// `argv` run in `rootfs` as `user`, with only `env` (the image's) in its
/// environment, as a container runtime would start it.
fn in_image(rootfs: &Path, user: &str, env: &[(String, String)], argv: &[String]) -> Command {
    // Found on this process's PATH: the child's is the image's.
    let mut command = Command::new(on_path("chroot").unwrap_or_else(|| "chroot".into()));
    command
        .arg(format!("--userspec={user}"))
        .arg(rootfs)
        .args(argv)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)));
    command
}

/// Where `tool` is on this process's PATH.
fn on_path(tool: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(tool))
        .find(|path| path.is_file())
}

/// Runs the check against the committed image `tag`.
async fn check(tag: &str) -> Result<(), String> {
    let inspect = output(
        buildah().args(["inspect", "--type", "image", tag]),
        "buildah inspect",
    )?;
    let inspect: Value =
        serde_json::from_str(&inspect).map_err(|e| format!("buildah inspect: {e}"))?;
    let config = image_config(&inspect)?;
    println!(
        "image: config: user {}, volume {DATA_DIR}, port 8080/tcp, entry point {:?}, health check {:?}",
        config.user, config.command, config.healthcheck
    );
    let mut container = WorkingContainer::from(tag, "check")?;
    let rootfs = container.mount()?;
    let result = check_running(&rootfs, &config).await;
    container.unmount()?;
    drop(container);
    result?;
    println!("image: the check's working container is unmounted and removed");
    Ok(())
}

async fn check_running(rootfs: &Path, config: &ImageConfig) -> Result<(), String> {
    // The image's environment but a free loopback port: the server says
    // which in its `listening` line (JSON logs, the default).
    let mut env: Vec<(String, String)> = config
        .env
        .iter()
        .filter(|(k, _)| k != "TC_LISTEN")
        .cloned()
        .collect();
    env.push(("TC_LISTEN".into(), "127.0.0.1:0".into()));
    let server = ServerProcess::start(
        "tc-server (in the image)",
        in_image(rootfs, &config.user, &env, &config.command),
    )?;
    let addr = server.addr;
    let uid = process_uid(server.pid())?;
    if uid != UID {
        return Err(format!("the server runs as uid {uid}, not {UID}"));
    }
    println!("image: the entry point runs under chroot as uid {uid}, listening on {addr}",);

    wait_healthy(addr).await?;
    println!("image: GET /healthz answered 200");

    env.push(("TC_SERVER_URL".into(), format!("http://{addr}")));
    let (passed, said) = probe(rootfs, config, &env).await?;
    if !passed || said.trim() != "ok" {
        return Err(format!(
            "the image's health check {:?} did not pass: {}",
            config.healthcheck, said
        ));
    }
    println!(
        "image: the image's health check {:?} passed",
        config.healthcheck
    );

    one_task(addr).await?;

    let db = inside(rootfs, Path::new(DATA_DIR)).join("taskcenter.db");
    let owner = std::fs::metadata(&db)
        .map_err(|e| format!("the database in the volume, {}: {e}", db.display()))?
        .uid();
    if owner != UID {
        return Err(format!(
            "{} is owned by uid {owner}, not {UID}",
            db.display()
        ));
    }
    println!("image: {DATA_DIR}/taskcenter.db was written by uid {UID}");

    stop(server).await?;
    println!("image: SIGTERM stopped the server, exit status 0");

    let (passed, _) = probe(rootfs, config, &env).await?;
    if passed {
        return Err("the health check passed with the server stopped".into());
    }
    println!("image: with the server stopped the health check fails");
    Ok(())
}

/// The uid a process runs as (`/proc/PID/status`'s real uid).
fn process_uid(pid: u32) -> Result<u32, String> {
    let status = read(Path::new(&format!("/proc/{pid}/status")))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next())
        .and_then(|id| id.parse().ok())
        .ok_or_else(|| format!("/proc/{pid}/status has no Uid line"))
}

async fn wait_healthy(addr: std::net::SocketAddr) -> Result<(), String> {
    let endpoint = Endpoint::new(addr);
    let deadline = Instant::now() + HEALTHY_WITHIN;
    let mut last = String::new();
    while Instant::now() < deadline {
        let attempt = async {
            let mut conn = Conn::open(addr).await?;
            conn.send(endpoint.request(Method::GET, "/healthz", None)?)
                .await
        };
        match attempt.await {
            Ok(reply) if reply.status == StatusCode::OK => return Ok(()),
            Ok(reply) => {
                last = format!("{} {}", reply.status, String::from_utf8_lossy(&reply.body))
            }
            Err(e) => last = e,
        }
        tokio::time::sleep(POLL).await;
    }
    Err(format!(
        "/healthz did not answer 200 within {HEALTHY_WITHIN:?}: {last}"
    ))
}

/// The image's health check command, run as the image would: whether it
/// exited 0, and its stdout and stderr.
async fn probe(
    rootfs: &Path,
    config: &ImageConfig,
    env: &[(String, String)],
) -> Result<(bool, String), String> {
    let mut command = in_image(rootfs, &config.user, env, &config.healthcheck);
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .map_err(|e| format!("the health check: {e}"))?;
    let deadline = Instant::now() + PROBE_WITHIN;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => tokio::time::sleep(POLL).await,
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("the health check ran past {PROBE_WITHIN:?}"));
            }
            Err(e) => return Err(format!("the health check: {e}")),
        }
    };
    let mut text = String::new();
    for stream in [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read>),
    ]
    .into_iter()
    .flatten()
    {
        let mut stream = stream;
        let _ = stream.read_to_string(&mut text);
    }
    Ok((status.success(), text))
}

/// Submits one task to a loopback downstream and waits for `success`.
async fn one_task(addr: std::net::SocketAddr) -> Result<(), String> {
    let script = Script::with_rule(|_, _| {
        Step::Reply(Reply::json(200, Bytes::from_static(br#"{"ok":true}"#)))
    });
    let downstream = FakeServer::start(Arc::clone(&script))
        .await
        .map_err(|e| format!("the downstream: {e}"))?;
    let endpoint = Endpoint::new(addr);
    let mut conn = Conn::open(addr).await?;
    let body = serde_json::json!({
        "url": format!("{}/hook", downstream.url()),
        "idempotency_key": "image-check",
        "json": {"from": "cargo xtask image"},
    });
    let reply = conn
        .send(endpoint.request(Method::POST, "/tasks", Some(Bytes::from(body.to_string())))?)
        .await?;
    if reply.status != StatusCode::CREATED {
        return Err(format!(
            "POST /tasks answered {}: {}",
            reply.status,
            String::from_utf8_lossy(&reply.body)
        ));
    }
    let task: Value =
        serde_json::from_slice(&reply.body).map_err(|e| format!("POST /tasks: {e}"))?;
    let id = task["id"].as_str().unwrap_or_default().to_owned();
    let deadline = Instant::now() + TASK_WITHIN;
    let state = loop {
        let path = format!("/tasks/{id}?wait_ms=1000");
        let reply = conn
            .send(endpoint.request(Method::GET, &path, None)?)
            .await?;
        let task: Value =
            serde_json::from_slice(&reply.body).map_err(|e| format!("GET /tasks/{id}: {e}"))?;
        let state = task["state"].as_str().unwrap_or_default().to_owned();
        if matches!(state.as_str(), "success" | "failed" | "canceled") {
            break state;
        }
        if Instant::now() >= deadline {
            return Err(format!("task {id} still {state} after {TASK_WITHIN:?}"));
        }
    };
    if state != "success" {
        return Err(format!("task {id} ended {state}, not success"));
    }
    let calls = script.calls("/hook");
    let delivered = calls.len() == 1
        && calls[0].idempotency_key.as_deref() == Some("image-check")
        && calls[0].body.as_ref() == br#"{"from":"cargo xtask image"}"#;
    if !delivered {
        return Err(format!("the downstream saw {calls:?}, not the one call"));
    }
    println!(
        "image: task {id} called the loopback downstream ({}) once with its payload and key, and ended success",
        downstream.addr()
    );
    Ok(())
}

/// SIGTERM, then a bounded wait for a clean exit.
async fn stop(mut server: ServerProcess) -> Result<(), String> {
    output(
        Command::new("kill").args(["-TERM", &server.pid().to_string()]),
        "kill -TERM",
    )?;
    let deadline = Instant::now() + STOP_WITHIN;
    loop {
        if let Some(status) = server.exited() {
            return if status.success() {
                Ok(())
            } else {
                Err(format!("the server exited {status} on SIGTERM"))
            };
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the server still runs {STOP_WITHIN:?} after SIGTERM"
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repository_file(path: &str) -> String {
        read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)).unwrap()
    }

    #[test]
    fn the_containerfile_configures_what_the_image_has() {
        let containerfile = repository_file("Containerfile");
        assert_eq!(containerfile_drift(&containerfile), Vec::<String>::new());
        // A changed setting is caught, naming the line.
        let check = |from: &str, to: &str| {
            assert!(containerfile.contains(from), "{from}");
            let drift = containerfile_drift(&containerfile.replacen(from, to, 1));
            assert_eq!(drift, vec![from.to_owned()], "{from} -> {to}");
        };
        check("USER 65532:65532", "USER 0:0");
        check("EXPOSE 8080/tcp", "EXPOSE 80/tcp");
        check(r#"VOLUME ["/var/lib/taskcenter"]"#, r#"VOLUME ["/data"]"#);
        check("ENV TC_LISTEN=0.0.0.0:8080", "ENV TC_LISTEN=127.0.0.1:8080");
        check("--interval=10s", "--interval=30s");
        // Said in the build stage only: not the image's.
        let build_stage_only = containerfile
            .replacen("USER 65532:65532\n", "", 1)
            .replacen("WORKDIR /src\n", "WORKDIR /src\nUSER 65532:65532\n", 1);
        assert_eq!(
            containerfile_drift(&build_stage_only),
            vec!["USER 65532:65532"]
        );
    }

    #[test]
    fn ldd_output_gives_the_files_to_copy() {
        let check = |ldd: &str, expected: Result<&[&str], &str>| {
            let got = shared_libraries(ldd);
            match expected {
                Ok(paths) => assert_eq!(
                    got.unwrap(),
                    paths.iter().map(PathBuf::from).collect::<Vec<_>>(),
                    "{ldd}"
                ),
                Err(part) => assert!(got.unwrap_err().contains(part), "{ldd}"),
            }
        };
        check(
            "\tlinux-vdso.so.1 (0x00007ffd)\n\
             \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f03)\n\
             \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f03)\n\
             \t/lib64/ld-linux-x86-64.so.2 (0x00007f03)\n",
            Ok(&[
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2",
            ]),
        );
        check(
            "\tlibssl.so.3 => not found\n\t/lib64/ld-linux-x86-64.so.2 (0x1)\n",
            Err("missing"),
        );
        check("\tstatically linked\n", Err("no library"));
    }

    #[test]
    fn only_the_containers_of_dead_runs_are_abandoned() {
        let names = "taskcenter-image-build-10\ntaskcenter-image-check-11\n\
                     taskcenter-image-check-12\nworking-container\n\
                     taskcenter-image-x\nother-image-build-13\n";
        assert_eq!(
            abandoned(names, |pid| pid == 12),
            vec!["taskcenter-image-build-10", "taskcenter-image-check-11"]
        );
    }

    #[test]
    fn the_version_is_the_package_s() {
        let check =
            |manifest: &str, expected: Result<&str, &str>| match (version(manifest), expected) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{manifest}"),
                (Err(got), Err(part)) => assert!(got.contains(part), "{manifest}: {got}"),
                (got, want) => panic!("{manifest}: {got:?}, expected {want:?}"),
            };
        check(
            "[package]\nname = \"tc-server\"\nversion = \"0.1.0\"\n",
            Ok("0.1.0"),
        );
        check(
            "[dependencies]\nversion = \"9\"\n[package]\nversion = \"1.2.3\"\n",
            Ok("1.2.3"),
        );
        check(
            "[package]\nname = \"x\"\n[dependencies]\nversion = \"9\"\n",
            Err("no [package]"),
        );
        assert!(version(&repository_file("crates/tc-server/Cargo.toml")).is_ok());
    }
}
