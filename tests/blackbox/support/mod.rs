//! The harness: the binary, the process, the API client, the downstream.

pub(crate) mod api;
pub(crate) mod bin;
pub(crate) mod cli;
pub(crate) mod collector;
pub(crate) mod downstream;
pub(crate) mod server;

use std::time::Duration;

use tempfile::TempDir;

pub(crate) use api::Api;
pub(crate) use downstream::Downstream;
pub(crate) use server::{Config, Server};

/// A server on a fresh temp database, a downstream and a client for it.
pub(crate) struct Setup {
    /// Holds the database; removed when the setup is dropped.
    _dir: TempDir,
    pub(crate) config: Config,
    pub(crate) down: Downstream,
    pub(crate) server: Server,
    pub(crate) api: Api,
}

/// Starts everything with the harness's default flags.
pub(crate) async fn start() -> Setup {
    start_with(|_, _| {}).await
}

/// Starts everything, letting `configure` change the flags (it sees the
/// downstream, for flags that name its address).
pub(crate) async fn start_with(configure: impl FnOnce(&mut Config, &Downstream)) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let down = Downstream::start().await;
    let mut config = Config::new(dir.path());
    configure(&mut config, &down);
    let server = config.start().await;
    let api = Api::new(server.base_url());
    Setup {
        _dir: dir,
        config,
        down,
        server,
        api,
    }
}

impl Setup {
    /// A server (and downstream) on the database `dir/t.db` that already
    /// exists, e.g. a backup.
    pub(crate) async fn on(dir: &std::path::Path, configure: impl FnOnce(&mut Config)) -> Setup {
        let owned = tempfile::tempdir().unwrap();
        let down = Downstream::start().await;
        let mut config = Config::new(dir);
        configure(&mut config);
        let server = config.start().await;
        let api = Api::new(server.base_url());
        Setup {
            _dir: owned,
            config,
            down,
            server,
            api,
        }
    }

    /// Starts a new server process on the same database and flags (after
    /// the previous one exited or was killed), pointing `api` at it.
    pub(crate) async fn restart(&mut self) {
        self.server = self.config.start().await;
        self.api = Api::new(self.server.base_url());
    }
}

/// Calls `probe` every `every` until it returns `Ok`, for at most `patience`
/// and 10,000 rounds. The server is another process, so its state is
/// observable only by asking its API; `Err` says what the probe saw, and
/// the last one is in the failure's message.
pub(crate) async fn poll<T>(
    what: &str,
    patience: Duration,
    every: Duration,
    mut probe: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    let deadline = tokio::time::Instant::now() + patience;
    let mut tick = tokio::time::interval(every);
    for _ in 0..10_000 {
        let seen = match probe().await {
            Ok(found) => return found,
            Err(seen) => seen,
        };
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {patience:?}; last seen: {seen}"
        );
        tick.tick().await;
    }
    panic!("{what}: not after 10000 polls")
}
