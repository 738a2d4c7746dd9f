//! Refusing private destinations (SSRF protection), inside the client's
//! connector: the check runs on the addresses DNS returned, at the moment of
//! connecting, so a name that resolves to a public address when submitted
//! and to 127.0.0.1 when called (DNS rebinding) is still refused.
//!
//! Three gates, all off unless [`DownstreamConfig::deny_private_destinations`]
//! is set: the resolver drops denied addresses (a name left with none fails),
//! an IP literal in the url is checked before connecting (hyper's connector
//! does not ask the resolver for those), and the connected peer address is
//! checked once more before a byte is sent.
//!
//! [`DownstreamConfig::deny_private_destinations`]: super::DownstreamConfig::deny_private_destinations

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::{GaiResolver, Name};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tower_service::Service;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

/// A call was refused because its destination is private, loopback,
/// link-local or otherwise not a public unicast address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("destination denied: {0}")]
pub(crate) struct DestinationDenied(pub(crate) String);

/// Whether a call to `ip` is refused: loopback, private (10/8, 172.16/12,
/// 192.168/16, fc00::/7), link-local (169.254/16, fe80::/10), CGNAT
/// (100.64/10), unspecified or "this network" (0/8), broadcast, multicast,
/// and the IPv6 forms that embed such an IPv4 address (::ffff:a.b.c.d,
/// ::a.b.c.d, 64:ff9b::a.b.c.d).
pub(crate) fn is_denied(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4_denied(v4),
        IpAddr::V6(v6) => v6_denied(v6),
    }
}

fn v4_denied(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || a == 0
        || (a == 100 && (b & 0xc0) == 64)
}

fn v6_denied(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    if ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() {
        return true;
    }
    if (first & 0xfe00) == 0xfc00 || (first & 0xffc0) == 0xfe80 {
        return true;
    }
    if let Some(v4) = ip.to_ipv4_mapped() {
        return v4_denied(v4);
    }
    let s = ip.segments();
    // IPv4-compatible (::a.b.c.d, deprecated) and the NAT64 well-known
    // prefix 64:ff9b::/96 both reach an IPv4 address.
    let embedded = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if s[..6] == [0; 6] || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return v4_denied(embedded);
    }
    false
}

fn check(addr: SocketAddr) -> Result<(), DestinationDenied> {
    if is_denied(addr.ip()) {
        Err(DestinationDenied(format!(
            "{} is not a public address",
            addr.ip()
        )))
    } else {
        Ok(())
    }
}

/// hyper's getaddrinfo resolver, minus the denied addresses when `deny`.
#[derive(Clone, Debug)]
pub(crate) struct GuardedResolver {
    inner: GaiResolver,
    deny: bool,
}

impl Service<Name> for GuardedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = BoxError;
    type Future = BoxFuture<Self::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let deny = self.deny;
        let resolving = self.inner.call(name.clone());
        Box::pin(async move {
            let all: Vec<SocketAddr> = resolving.await?.collect();
            if !deny {
                return Ok(all.into_iter());
            }
            let allowed: Vec<SocketAddr> =
                all.iter().copied().filter(|a| !is_denied(a.ip())).collect();
            if allowed.is_empty() && !all.is_empty() {
                let ips: Vec<String> = all.iter().map(|a| a.ip().to_string()).collect();
                return Err(DestinationDenied(format!(
                    "{name} resolves to no public address ({})",
                    ips.join(", ")
                ))
                .into());
            }
            Ok(allowed.into_iter())
        })
    }
}

/// The TCP connector with the destination checks, when `deny`.
#[derive(Clone, Debug)]
pub(crate) struct GuardedConnector {
    inner: HttpConnector<GuardedResolver>,
    deny: bool,
}

impl GuardedConnector {
    /// A plain TCP connector; `deny` turns the checks on.
    pub(crate) fn new(deny: bool) -> GuardedConnector {
        GuardedConnector {
            inner: HttpConnector::new_with_resolver(GuardedResolver {
                inner: GaiResolver::new(),
                deny,
            }),
            deny,
        }
    }

    /// The inner connector, for its TCP settings.
    pub(crate) fn tcp(&mut self) -> &mut HttpConnector<GuardedResolver> {
        &mut self.inner
    }
}

impl Service<Uri> for GuardedConnector {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = BoxFuture<Self::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let deny = self.deny;
        let literal = uri
            .host()
            .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
            .and_then(|h| h.parse::<IpAddr>().ok());
        if deny
            && let Some(ip) = literal
            && let Err(denied) = check(SocketAddr::new(ip, 0))
        {
            return Box::pin(async move { Err(denied.into()) });
        }
        let connecting = self.inner.call(uri);
        Box::pin(async move {
            let io = connecting.await?;
            if deny {
                // What was really connected to, whatever led there.
                check(io.inner().peer_addr()?)?;
            }
            Ok(io)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_special_addresses_are_denied() {
        let check = |ip: &str, denied: bool| {
            let addr: IpAddr = ip.parse().unwrap();
            assert_eq!(is_denied(addr), denied, "{ip}");
        };
        for ip in [
            "127.0.0.1",
            "127.255.0.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "224.0.0.1",
            "239.1.1.1",
            "::1",
            "::",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "febf::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::10.0.0.1",
        ] {
            check(ip, true);
        }
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "172.15.255.255",
            "100.63.255.255",
            "100.128.0.1",
            "169.255.0.1",
            "192.169.0.1",
            "2001:4860:4860::8888",
            "fec0::1",
            "::ffff:8.8.8.8",
            "64:ff9b::8.8.8.8",
        ] {
            check(ip, false);
        }
    }
}
