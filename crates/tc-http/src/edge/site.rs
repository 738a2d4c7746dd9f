//! Which requests this server answers at all, before any route or token:
//!
//! - **DNS rebinding.** A page on `evil.example` whose name the attacker
//!   then points at this server's address is, to the browser, same-origin
//!   with itself: it could read and drive the API. Its requests carry
//!   `Host: evil.example`, so a `Host` this server is not known by is
//!   refused `421 misdirected_request`.
//! - **Cross-site requests.** A form or `fetch` on another site can send a
//!   state change (a `text/plain` POST needs no preflight) and, without a
//!   token, nothing else would stop it. Browsers say where such a request
//!   comes from in `Origin`: a method other than GET or HEAD whose `Origin`
//!   is not this server's own origin is refused `403 cross_origin`. Clients
//!   that are not browsers (the CLI, curl) send no `Origin` and pass.
//!
//! This server's own origin is the scheme and host the client used: `http`
//! (the server speaks plain HTTP) or `https` when a trusted proxy says so
//! (`Forwarded: proto=` or `X-Forwarded-Proto`), and the request's `Host`
//! (or a trusted proxy's `Forwarded: host=` or `X-Forwarded-Host`), the
//! port defaulting to the scheme's.
//!
//! Both refusals say what to set: behind a TLS-terminating proxy that the
//! server does not trust, every browser's `Origin: https://…` differs from
//! the `http` it sees, and the fix is a flag, not the browser.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use http::Method;
use http::header::{HOST, ORIGIN};
use http::request::Parts;

use crate::config::HttpConfig;
use crate::edge::client_address::{Client, connection_of};
use crate::error::ApiError;

/// What both refusals add: the flags that make a proxied browser's
/// requests this server's own.
pub(crate) const PROXY_HINT: &str = "behind a proxy, start the server with --trusted-proxy <proxy address> (and --allowed-host <host>)";

/// Names that only ever mean this machine: allowed whenever hosts are
/// checked (an attacker's DNS cannot answer for them).
const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// The host rule, from the config: built once.
#[derive(Debug, Clone)]
pub(crate) struct Site {
    /// Any host is allowed (`--allowed-host '*'`).
    any: bool,
    /// The configured hosts, normalised; empty: the listen address decides.
    hosts: Vec<String>,
}

impl Site {
    pub(crate) fn new(config: &HttpConfig) -> Site {
        Site {
            any: config.allowed_hosts.iter().any(|h| h.trim() == "*"),
            hosts: config
                .allowed_hosts
                .iter()
                .filter_map(|h| split_host(h.trim()).map(|(host, _)| host))
                .collect(),
        }
    }

    /// Refuses a request to a host that is not allowed (421) or a state
    /// change from another origin (403).
    pub(crate) fn check(&self, parts: &Parts, client: &Client<'_>) -> Result<(), ApiError> {
        let host = request_host(parts);
        if let Some(host) = host {
            let local = connection_of(parts).map(|c| c.local);
            if !self.allows(host, local) {
                let flag = match split_host(host) {
                    Some((name, _)) => format!("--allowed-host {name}"),
                    None => "--allowed-host".to_owned(),
                };
                return Err(ApiError::MisdirectedRequest(format!(
                    "Host: {host:?} is not a host of this server; list it with {flag}; {PROXY_HINT}"
                )));
            }
        }
        if matches!(parts.method, Method::GET | Method::HEAD) {
            return Ok(());
        }
        let Some(origin) = parts.headers.get(ORIGIN) else {
            return Ok(());
        };
        let origin = String::from_utf8_lossy(origin.as_bytes());
        let scheme = if client.https { "https" } else { "http" };
        let own = client.forwarded_host.or(host);
        if own.is_some_and(|own| same_origin(&origin, scheme, own)) {
            Ok(())
        } else {
            let seen = own.map_or_else(|| "no Host".to_owned(), |own| format!("{scheme}://{own}"));
            Err(ApiError::CrossOrigin(format!(
                "Origin: {origin:?} is not this server's origin ({seen} as it sees the request); \
                 a state change from another site is refused; {PROXY_HINT}"
            )))
        }
    }

    /// Whether `host` (a `Host` value, port and all) is allowed on a
    /// connection accepted at `local`.
    fn allows(&self, host: &str, local: Option<SocketAddr>) -> bool {
        let local_ip = local.map(|l| l.ip().to_canonical());
        let on_loopback = local_ip.is_some_and(|ip| ip.is_loopback());
        if self.any || (self.hosts.is_empty() && !on_loopback) {
            return true;
        }
        let Some((name, _)) = split_host(host) else {
            return false;
        };
        LOOPBACK_NAMES.contains(&name.as_str())
            || (on_loopback && local_ip.is_some_and(|ip| name == ip_host(ip)))
            || self.hosts.contains(&name)
    }
}

/// Checks one `--allowed-host` value: `*`, or a host name or IP address
/// without a port (a host is allowed on any port).
pub fn check_allowed_host(value: &str) -> Result<(), String> {
    let value = value.trim();
    if value == "*" {
        return Ok(());
    }
    match split_host(value) {
        Some((_, None)) => Ok(()),
        Some((_, Some(_))) => Err(format!(
            "{value:?}: give the host without a port (it is allowed on any port)"
        )),
        None => Err(format!(
            "{value:?} is not a host name or IP address (tasks.example.com, 10.0.0.5, [::1], or *)"
        )),
    }
}

/// The host the request was sent to: the authority of an absolute-form
/// target, else the `Host` header.
fn request_host(parts: &Parts) -> Option<&str> {
    match parts.uri.authority() {
        Some(authority) => Some(authority.as_str()),
        None => parts
            .headers
            .get(HOST)
            .map(|h| h.to_str().unwrap_or("\u{fffd}")),
    }
}

/// An address as a `Host` writes it: IPv6 in brackets.
fn ip_host(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// `name[:port]` or `[v6][:port]` as (normalised host, port): names
/// lower-cased without a trailing dot, IPv6 in its canonical form in
/// brackets. `None` for anything else (userinfo, a path, stray characters,
/// an empty or non-numeric port).
fn split_host(value: &str) -> Option<(String, Option<u16>)> {
    // A bare IPv6 address (no brackets), as a flag may give it.
    if let Ok(v6) = value.parse::<Ipv6Addr>() {
        return Some((format!("[{v6}]"), None));
    }
    let (host, port) = if let Some(rest) = value.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let v6: Ipv6Addr = inside.parse().ok()?;
        (format!("[{v6}]"), after)
    } else {
        let (name, port) = match value.rsplit_once(':') {
            Some((name, _)) => (name, &value[name.len()..]),
            None => (value, ""),
        };
        let name = name.strip_suffix('.').unwrap_or(name);
        let valid = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
        if !valid {
            return None;
        }
        (name.to_ascii_lowercase(), port)
    };
    let port = match port {
        "" => None,
        p => Some(p.strip_prefix(':')?.parse::<u16>().ok()?),
    };
    Some((host, port))
}

/// Whether `origin` (an `Origin` header: `scheme://host[:port]`, nothing
/// more) is `scheme` at `host` (a `Host` value), default ports filled in.
fn same_origin(origin: &str, scheme: &str, host: &str) -> bool {
    let Some((origin_scheme, origin_host)) = origin.split_once("://") else {
        return false;
    };
    let origin_scheme = origin_scheme.to_ascii_lowercase();
    let (Some((origin_name, origin_port)), Some((name, port))) =
        (split_host(origin_host), split_host(host))
    else {
        return false;
    };
    origin_scheme == scheme
        && origin_name == name
        && origin_port.or(default_port(&origin_scheme)) == port.or(default_port(scheme))
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_split_and_normalised() {
        let check = |value: &str, expected: Option<(&str, Option<u16>)>| {
            let got = split_host(value);
            let got = got.as_ref().map(|(h, p)| (h.as_str(), *p));
            assert_eq!(got, expected, "{value:?}");
        };
        check("LocalHost:3000", Some(("localhost", Some(3000))));
        check("example.com.", Some(("example.com", None)));
        check("127.0.0.1", Some(("127.0.0.1", None)));
        check("[::1]:8080", Some(("[::1]", Some(8080))));
        check("[2001:DB8:0::7]", Some(("[2001:db8::7]", None)));
        check("2001:db8::7", Some(("[2001:db8::7]", None)));
        check("x:", None);
        check("x:abc", None);
        check("x:99999", None);
        check("", None);
        check(":80", None);
        check("user@host", None);
        check("a b", None);
        check("host/path", None);
        check("[::1", None);
        check("[::1]x", None);
        check("[evil]", None);
    }

    #[test]
    fn allowed_host_values_are_hosts_without_ports() {
        for ok in [
            "*",
            "tasks.example.com",
            "LOCALHOST",
            "10.0.0.5",
            "[::1]",
            "::1",
            " a.b ",
        ] {
            assert_eq!(check_allowed_host(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "a.b:8080",
            "[::1]:80",
            "http://a.b",
            "a b",
            "a.b/x",
            "*.a.b",
        ] {
            assert!(check_allowed_host(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn origins_compare_scheme_host_and_port() {
        let check = |origin: &str, scheme: &str, host: &str, same: bool| {
            assert_eq!(
                same_origin(origin, scheme, host),
                same,
                "{origin} vs {scheme}://{host}"
            );
        };
        check("http://127.0.0.1:8080", "http", "127.0.0.1:8080", true);
        check("http://localhost", "http", "localhost:80", true);
        check(
            "https://tasks.example.com",
            "https",
            "tasks.example.com:443",
            true,
        );
        check(
            "HTTPS://Tasks.Example.com:443",
            "https",
            "tasks.example.com",
            true,
        );
        check("http://[::1]:8080", "http", "[::1]:8080", true);
        check("http://127.0.0.1", "http", "127.0.0.1:8080", false);
        check("https://127.0.0.1:8080", "http", "127.0.0.1:8080", false);
        check("http://evil.example", "http", "127.0.0.1:8080", false);
        check("null", "http", "127.0.0.1:8080", false);
        check("http://127.0.0.1:8080/", "http", "127.0.0.1:8080", false);
        check("http://127.0.0.1:8080 ", "http", "127.0.0.1:8080", false);
        check("ftp://127.0.0.1:8080", "http", "127.0.0.1:8080", false);
        check("http://127.0.0.1:8080", "http", "not a host", false);
    }
}
