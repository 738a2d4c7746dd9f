//! Who sent a request: the addresses of its connection, and, when the peer
//! is a trusted proxy (`--trusted-proxy`), the client's address, scheme and
//! host as that proxy forwarded them (`X-Forwarded-For`, `-Proto`, `-Host`,
//! or the standard `Forwarded` header's `proto=` and `host=`, which win
//! where a proxy sends both). Forwarded headers from any other peer are
//! ignored: a client cannot claim another address (to escape a per-client
//! limit), https, or another host.

use std::net::{IpAddr, SocketAddr};

use http::HeaderMap;
use http::request::Parts;
use ipnet::IpNet;

/// The addresses of the connection a request came on. The server puts one
/// in every request's extensions; [`crate::handle`] reads it (a request
/// without one, as in tests that call `handle` directly, has no known
/// client and no known listen address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionInfo {
    /// The address of the other end (a client, or a proxy).
    pub peer: SocketAddr,
    /// The address this server accepted the connection on.
    pub local: SocketAddr,
}

/// Who sent a request, as far as this server can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Client<'r> {
    /// The client's address: the peer's, or behind trusted proxies the
    /// nearest address in `X-Forwarded-For` that is not one of them.
    /// `None` without a connection.
    pub(crate) addr: Option<IpAddr>,
    /// The client reached a trusted proxy over https (`Forwarded: proto=`
    /// or `X-Forwarded-Proto`). This server itself serves plain http.
    pub(crate) https: bool,
    /// The host the client asked a trusted proxy for (`Forwarded: host=` or
    /// `X-Forwarded-Host`).
    pub(crate) forwarded_host: Option<&'r str>,
}

/// The connection's addresses, if the server recorded them.
pub(crate) fn connection_of(parts: &Parts) -> Option<ConnectionInfo> {
    parts.extensions.get::<ConnectionInfo>().copied()
}

/// Who sent the request, believing forwarded headers only from a peer in
/// `trusted`.
pub(crate) fn client_of<'r>(parts: &'r Parts, trusted: &[IpNet]) -> Client<'r> {
    let Some(connection) = connection_of(parts) else {
        return Client {
            addr: None,
            https: false,
            forwarded_host: None,
        };
    };
    let peer = connection.peer.ip().to_canonical();
    if !is_trusted(peer, trusted) {
        return Client {
            addr: Some(peer),
            https: false,
            forwarded_host: None,
        };
    }
    let headers = &parts.headers;
    let proto =
        forwarded_param(headers, "proto").or_else(|| last_value(headers, "x-forwarded-proto"));
    let host = forwarded_param(headers, "host").or_else(|| last_value(headers, "x-forwarded-host"));
    Client {
        addr: Some(forwarded_for(headers, peer, trusted)),
        https: proto.is_some_and(|p| p.eq_ignore_ascii_case("https")),
        forwarded_host: host.filter(|h| !h.is_empty()),
    }
}

/// The value of `name` (`proto`, `host`) in the nearest proxy's element of
/// `Forwarded` (RFC 7239: `for=...;proto=https;host=tc.example`, elements
/// comma-separated, the last one written by the nearest proxy), unquoted.
/// `None` without the header, or when that element does not say: the
/// `X-Forwarded-*` header decides then.
fn forwarded_param<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    let element = headers
        .get_all(http::header::FORWARDED)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .next_back()?
        .rsplit(',')
        .next()?;
    let value = element.split(';').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        key.trim()
            .eq_ignore_ascii_case(name)
            .then_some(value.trim())
    })?;
    match value.strip_prefix('"') {
        // A quoted-string; an escape (`\`) is nothing a scheme or host has.
        Some(quoted) => quoted.strip_suffix('"').filter(|v| !v.contains('\\')),
        None => Some(value),
    }
}

fn is_trusted(addr: IpAddr, trusted: &[IpNet]) -> bool {
    trusted.iter().any(|net| net.contains(&addr))
}

/// Walks `X-Forwarded-For` from the nearest hop back: each trusted proxy
/// names the one before it, and the first hop that is not trusted is the
/// client. An entry that is not an address ends the walk at the last hop
/// known.
fn forwarded_for(headers: &HeaderMap, peer: IpAddr, trusted: &[IpNet]) -> IpAddr {
    let mut client = peer;
    let entries: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    for entry in entries.into_iter().rev() {
        let Some(hop) = parse_hop(entry) else {
            break;
        };
        client = hop;
        if !is_trusted(hop, trusted) {
            break;
        }
    }
    client
}

/// `1.2.3.4`, `1.2.3.4:5678`, `::1` or `[::1]:5678`.
fn parse_hop(entry: &str) -> Option<IpAddr> {
    let ip = entry
        .parse::<IpAddr>()
        .ok()
        .or_else(|| entry.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| entry.strip_prefix('[')?.strip_suffix(']')?.parse().ok())?;
    Some(ip.to_canonical())
}

/// The last comma-separated value of a header (what the nearest proxy
/// wrote), trimmed.
fn last_value<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .next_back()?
        .rsplit(',')
        .next()
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(peer: Option<&str>, headers: &[(&str, &str)]) -> Parts {
        let mut builder = http::Request::builder().uri("/tasks");
        for (n, v) in headers {
            builder = builder.header(*n, *v);
        }
        let (mut parts, ()) = builder.body(()).unwrap().into_parts();
        if let Some(peer) = peer {
            parts.extensions.insert(ConnectionInfo {
                peer: peer.parse().unwrap(),
                local: "127.0.0.1:8080".parse().unwrap(),
            });
        }
        parts
    }

    fn check(
        peer: Option<&str>,
        headers: &[(&str, &str)],
        expected: (Option<&str>, bool, Option<&str>),
    ) {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()];
        let parts = parts(peer, headers);
        let client = client_of(&parts, &trusted);
        let want = Client {
            addr: expected.0.map(|a| a.parse().unwrap()),
            https: expected.1,
            forwarded_host: expected.2,
        };
        assert_eq!(client, want, "{peer:?} {headers:?}");
    }

    #[test]
    fn forwarded_headers_count_only_from_trusted_proxies() {
        let xff = |v| ("x-forwarded-for", v);
        let https = ("x-forwarded-proto", "https");
        let host = ("x-forwarded-host", "tasks.example.com");
        check(None, &[xff("1.2.3.4"), https], (None, false, None));
        // An untrusted peer is the client, whatever it claims.
        check(
            Some("192.0.2.7:5000"),
            &[xff("1.2.3.4"), https, host],
            (Some("192.0.2.7"), false, None),
        );
        // A trusted proxy: the client it names, its scheme and host.
        check(
            Some("10.1.2.3:5000"),
            &[xff("1.2.3.4"), https, host],
            (Some("1.2.3.4"), true, Some("tasks.example.com")),
        );
        check(
            Some("[::1]:5000"),
            &[xff("1.2.3.4:999"), ("x-forwarded-proto", "HTTP")],
            (Some("1.2.3.4"), false, None),
        );
        // Chains: the nearest untrusted hop, not what the client wrote first.
        check(
            Some("10.0.0.1:1"),
            &[xff("6.6.6.6, 1.2.3.4, 10.0.0.9")],
            (Some("1.2.3.4"), false, None),
        );
        check(
            Some("10.0.0.1:1"),
            &[xff("6.6.6.6"), xff("1.2.3.4")],
            (Some("1.2.3.4"), false, None),
        );
        check(
            Some("10.0.0.1:1"),
            &[xff("[2001:db8::1]:80")],
            (Some("2001:db8::1"), false, None),
        );
        // Every hop trusted: the farthest one.
        check(
            Some("10.0.0.1:1"),
            &[xff("10.0.0.2, 10.0.0.3")],
            (Some("10.0.0.2"), false, None),
        );
        // Garbage stops the walk at the last known hop; no header: the proxy.
        check(
            Some("10.0.0.1:1"),
            &[xff("1.2.3.4, unknown")],
            (Some("10.0.0.1"), false, None),
        );
        check(Some("10.0.0.1:1"), &[], (Some("10.0.0.1"), false, None));
        // The proxy's own word on the scheme is the last one.
        check(
            Some("10.0.0.1:1"),
            &[("x-forwarded-proto", "https, http")],
            (Some("10.0.0.1"), false, None),
        );
        check(
            Some("10.0.0.1:1"),
            &[("x-forwarded-proto", "http, https")],
            (Some("10.0.0.1"), true, None),
        );
        // The standard header: the nearest element's proto and host,
        // quoted or not, before X-Forwarded-*; only from a trusted proxy.
        let forwarded = |v| ("forwarded", v);
        check(
            Some("10.0.0.1:1"),
            &[forwarded("for=1.2.3.4;proto=https;host=tc.example")],
            (Some("10.0.0.1"), true, Some("tc.example")),
        );
        check(
            Some("10.0.0.1:1"),
            &[forwarded(
                r#"For="[2001:db8::1]:80";Proto="HTTPS";Host="tc.example:8443""#,
            )],
            (Some("10.0.0.1"), true, Some("tc.example:8443")),
        );
        check(
            Some("10.0.0.1:1"),
            &[forwarded(
                "proto=https;host=evil.example, proto=http;host=tc.example",
            )],
            (Some("10.0.0.1"), false, Some("tc.example")),
        );
        check(
            Some("10.0.0.1:1"),
            &[
                forwarded("proto=https"),
                ("x-forwarded-proto", "http"),
                host,
            ],
            (Some("10.0.0.1"), true, Some("tasks.example.com")),
        );
        check(
            Some("10.0.0.1:1"),
            &[forwarded("for=1.2.3.4"), https, host],
            (Some("10.0.0.1"), true, Some("tasks.example.com")),
        );
        check(
            Some("10.0.0.1:1"),
            &[forwarded(r#"host="a\"b""#)],
            (Some("10.0.0.1"), false, None),
        );
        check(
            Some("192.0.2.7:5000"),
            &[forwarded("proto=https;host=tc.example")],
            (Some("192.0.2.7"), false, None),
        );
        // An IPv4 client seen through a dual-stack socket.
        check(
            Some("[::ffff:192.0.2.7]:1"),
            &[],
            (Some("192.0.2.7"), false, None),
        );
    }
}
