//! [`HttpConfig`]: every setting of the HTTP layer, with its default.

use std::time::Duration;

/// How the HTTP layer behaves: limits, defaults for submissions, auth and
/// the connection bounds. Build one with `HttpConfig::default()` and change
/// the fields that differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpConfig {
    /// The largest request body accepted, in bytes (default 1 MiB). Enforced
    /// while reading: a larger body is refused with 413 before it is buffered.
    pub max_body_bytes: usize,
    /// The largest body of `POST /tasks/batch` (default 16 MiB); each task in
    /// it is still held to `max_body_bytes`.
    pub max_batch_body_bytes: usize,
    /// The most `GET /tasks/{id}?wait_ms=` requests waiting at once (default
    /// 10000, and never more than `max_connections` less a 64th of it, so
    /// that waiters cannot take every connection); beyond, such a request is
    /// answered 503.
    pub max_waiters: usize,
    /// The most of them waiting at once for one client address (default
    /// 64); beyond, `429 too_many_waiters`.
    pub max_waiters_per_client: usize,
    /// `max_attempts` of a submission that does not say (default 3).
    pub default_max_attempts: u32,
    /// `timeout_ms` of a submission that does not say (default 5 s).
    pub default_timeout: Duration,
    /// With a token, every `/tasks` route needs `Authorization: Bearer <token>`.
    pub api_token: Option<String>,
    /// Whether `GET /metrics` on the main listener stays open to anyone
    /// when `api_token` is set (`--metrics-public`). Off: it takes the
    /// admin token there, as it names every tenant; the admin listener
    /// serves it without a credential either way.
    pub metrics_public: bool,
    /// When not empty, a task's url must lie under one of these prefixes:
    /// same scheme, host and port, and a path that starts with the prefix's
    /// at a segment boundary, both normalised ([`tc_model::is_under_prefix`]).
    pub allow_url_prefixes: Vec<String>,
    /// How long a client may take to send a request's headers (default 10 s);
    /// the connection is closed when it runs out.
    pub header_read_timeout: Duration,
    /// How long a client may take to send a request's body once its headers
    /// arrived (default 30 s); then the answer is 408.
    pub body_read_timeout: Duration,
    /// After refusing a request without reading all of its body, how many more
    /// bytes are read and thrown away so that a client that writes its whole
    /// body before reading still gets the answer (default 256 MiB). A larger
    /// remainder closes the connection instead.
    pub drain_max_bytes: u64,
    /// The most time spent on that draining (default 5 s).
    pub drain_timeout: Duration,
    /// The most bytes all request bodies being read may hold together
    /// (default 64 MiB; never less than `max_body_bytes`). Each body reserves
    /// its Content-Length (the limit when chunked) before reading; a request
    /// that cannot within the body read timeout is answered 503.
    pub max_body_bytes_in_flight: usize,
    /// The most connections served at once (default 1024); a connection past
    /// it is answered `503` with `Retry-After: 1` and closed.
    pub max_connections: usize,
    /// The most connections the admin listener ([`crate::serve_admin`])
    /// serves at once (default 16).
    pub admin_max_connections: usize,
    /// The hosts (the `Host` header's name, any port) requests may be
    /// addressed to; another is answered `421 misdirected_request`, which
    /// stops DNS rebinding. `*` allows any. Empty: the default for the
    /// listen address — on a loopback address `localhost`, `127.0.0.1`,
    /// `[::1]` and the listen address, on any other address any host. On a
    /// loopback address the given hosts are added to that default.
    pub allowed_hosts: Vec<String>,
    /// Peers whose `X-Forwarded-For`, `X-Forwarded-Proto` and
    /// `X-Forwarded-Host` are believed: a reverse proxy in front. Others'
    /// are ignored.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// How long a response may make no progress because the client does not
    /// read (default 30 s); then its connection is closed.
    pub write_timeout: Duration,
    /// After shutdown starts, how long open connections get to finish their
    /// requests before they are dropped (default 10 s).
    pub shutdown_grace: Duration,
    /// The `iss` of the JWTs this server signs for destinations whose
    /// `auth` is `jwt` (`--issuer`); `None`: such an `auth` is
    /// refused and `/.well-known/openid-configuration` is not found.
    pub issuer: Option<String>,
    /// The JWK Set of the server's JWT keys, as JSON text, served at
    /// `/.well-known/jwks.json` (`None`: not found).
    pub jwks: Option<String>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            max_body_bytes: tc_model::Limits::DEFAULT_MAX_BODY_BYTES,
            max_batch_body_bytes: 16 * 1024 * 1024,
            max_waiters: 10_000,
            max_waiters_per_client: 64,
            default_max_attempts: 3,
            default_timeout: Duration::from_millis(5000),
            api_token: None,
            metrics_public: false,
            allow_url_prefixes: Vec::new(),
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            drain_max_bytes: 256 * 1024 * 1024,
            drain_timeout: Duration::from_secs(5),
            max_body_bytes_in_flight: 64 * 1024 * 1024,
            max_connections: 1024,
            admin_max_connections: 16,
            allowed_hosts: Vec::new(),
            trusted_proxies: Vec::new(),
            write_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
            issuer: None,
            jwks: None,
        }
    }
}
