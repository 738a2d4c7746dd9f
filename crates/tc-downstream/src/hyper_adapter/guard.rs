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
//! [`DownstreamConfig::deny_private_destinations`]:
//! super::DownstreamConfig::deny_private_destinations

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

/// Whether a call to `ip` is refused: every block of the IANA IPv4 and
/// IPv6 Special-Purpose Address Registries that is not globally reachable
/// ([`V4_DENIED`], [`V6_DENIED`], less the globally reachable exceptions
/// inside them), multicast, and the IPv6 forms that embed a denied IPv4
/// address (::ffff:a.b.c.d, ::a.b.c.d, 64:ff9b::a.b.c.d).
pub(crate) fn is_denied(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4_denied(v4),
        IpAddr::V6(v6) => v6_denied(v6),
    }
}

/// The IPv4 special-purpose blocks whose "Globally Reachable" is `False`
/// (or `N/A`: the deprecated 6to4 relay anycast), as (network, prefix
/// length); 224.0.0.0/4 is multicast.
const V4_DENIED: &[(u32, u8)] = &[
    (0x0000_0000, 8),  // 0.0.0.0/8 "this network"
    (0x0a00_0000, 8),  // 10.0.0.0/8 private
    (0x6440_0000, 10), // 100.64.0.0/10 shared (CGNAT)
    (0x7f00_0000, 8),  // 127.0.0.0/8 loopback
    (0xa9fe_0000, 16), // 169.254.0.0/16 link-local
    (0xac10_0000, 12), // 172.16.0.0/12 private
    (0xc000_0000, 24), // 192.0.0.0/24 IETF protocol assignments
    (0xc000_0200, 24), // 192.0.2.0/24 TEST-NET-1
    (0xc058_6300, 24), // 192.88.99.0/24 6to4 relay anycast (deprecated)
    (0xc0a8_0000, 16), // 192.168.0.0/16 private
    (0xc612_0000, 15), // 198.18.0.0/15 benchmarking
    (0xc633_6400, 24), // 198.51.100.0/24 TEST-NET-2
    (0xcb00_7100, 24), // 203.0.113.0/24 TEST-NET-3
    (0xe000_0000, 4),  // 224.0.0.0/4 multicast
    (0xf000_0000, 4),  // 240.0.0.0/4 reserved, and 255.255.255.255 broadcast
];

/// Globally reachable blocks inside [`V4_DENIED`]: 192.0.0.9 (PCP
/// anycast) and 192.0.0.10 (TURN anycast).
const V4_REACHABLE: &[(u32, u8)] = &[(0xc000_0009, 32), (0xc000_000a, 32)];

/// The IPv6 special-purpose blocks whose "Globally Reachable" is `False`
/// (or `N/A`: 6to4 and Teredo), as (network, prefix length); ff00::/8 is
/// multicast. ::ffff:0:0/96, ::/96 and 64:ff9b::/96 are judged by the IPv4
/// address they embed.
const V6_DENIED: &[(u128, u8)] = &[
    (0, 128),                          // ::/128 unspecified
    (1, 128),                          // ::1/128 loopback
    (0x0064_ff9b_0001 << 80, 48),      // 64:ff9b:1::/48 local-use translation
    (0x0100 << 112, 64),               // 100::/64 discard-only
    ((0x0100 << 112) | (1 << 64), 64), // 100:0:0:1::/64 dummy prefix
    (0x2001 << 112, 23),               // 2001::/23 IETF protocol assignments
    (0x2001 << 112, 32),               // 2001::/32 Teredo
    (0x2001_0db8 << 96, 32),           // 2001:db8::/32 documentation
    (0x2002 << 112, 16),               // 2002::/16 6to4
    (0x3fff << 112, 20),               // 3fff::/20 documentation
    (0x5f00 << 112, 16),               // 5f00::/16 segment routing SIDs
    (0xfc00 << 112, 7),                // fc00::/7 unique-local
    (0xfe80 << 112, 10),               // fe80::/10 link-local
    (0xff00 << 112, 8),                // ff00::/8 multicast
];

/// Globally reachable blocks inside [`V6_DENIED`]'s 2001::/23.
const V6_REACHABLE: &[(u128, u8)] = &[
    ((0x2001_0001 << 96) | 1, 128), // 2001:1::1 PCP anycast
    ((0x2001_0001 << 96) | 2, 128), // 2001:1::2 TURN anycast
    ((0x2001_0001 << 96) | 3, 128), // 2001:1::3 DNS-SD service registration
    (0x2001_0003 << 96, 32),        // 2001:3::/32 AMT
    (0x2001_0004_0112 << 80, 48),   // 2001:4:112::/48 AS112-v6
    (0x2001_0020 << 96, 28),        // 2001:20::/28 ORCHIDv2
    (0x2001_0030 << 96, 28),        // 2001:30::/28 drone remote ID
];

/// Whether `addr` lies in one of `blocks` (`BITS`-bit addresses).
fn within<const BITS: u32, T>(addr: T, blocks: &[(T, u8)]) -> bool
where
    T: Copy + PartialEq + std::ops::Shr<u32, Output = T>,
{
    blocks.iter().any(|&(net, len)| {
        let shift = BITS - u32::from(len);
        // A shift by the whole width would overflow: a /0 holds everything.
        shift == BITS || (addr >> shift) == (net >> shift)
    })
}

fn v4_denied(ip: Ipv4Addr) -> bool {
    let bits = u32::from(ip);
    within::<32, u32>(bits, V4_DENIED) && !within::<32, u32>(bits, V4_REACHABLE)
}

fn v6_denied(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return v4_denied(v4);
    }
    let s = ip.segments();
    // IPv4-compatible (::a.b.c.d, deprecated) and the NAT64 well-known
    // prefix 64:ff9b::/96 both reach an IPv4 address (:: and ::1 are in
    // the table).
    let embedded = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    let bits = u128::from(ip);
    if bits > 1 && (s[..6] == [0; 6] || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0]) {
        return v4_denied(embedded);
    }
    within::<128, u128>(bits, V6_DENIED) && !within::<128, u128>(bits, V6_REACHABLE)
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

/// The IP address `uri`'s host is, in any of its spellings (`127.1`,
/// `0x7f.0.0.1`, `2130706433`, `127.0.0.1.`, `[::ffff:127.0.0.1]`), read
/// as the WHATWG URL standard parses hosts, as tc-model's canonical host
/// that names the task's destination: the literal gate judges what the
/// resolver would otherwise be asked to read (an IPv4-mapped IPv6 address
/// is judged by its IPv4 address in [`is_denied`]).
fn literal_ip(uri: &Uri) -> Option<IpAddr> {
    match url::Host::parse(uri.host()?).ok()? {
        url::Host::Ipv4(v4) => Some(IpAddr::V4(v4)),
        url::Host::Ipv6(v6) => Some(IpAddr::V6(v6)),
        url::Host::Domain(_) => None,
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
        let literal = literal_ip(&uri);
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

    /// Checks that a call to `ip` is refused exactly when `denied`.
    fn check(ip: &str, denied: bool) {
        let addr: IpAddr = ip.parse().expect("a test address");
        assert_eq!(is_denied(addr), denied, "{ip}");
    }

    /// Every spelling of an IP address in a url is read as that
    /// address before connecting, so the literal gate judges it (a name is
    /// left to the resolver).
    #[test]
    fn ip_literals_are_read_in_every_spelling() {
        let check = |url: &str, ip: Option<&str>| {
            let uri: Uri = url.parse().expect("a test url");
            let want = ip.map(|ip| ip.parse::<IpAddr>().expect("a test address"));
            assert_eq!(literal_ip(&uri), want, "{url}");
        };
        for url in [
            "http://127.0.0.1:9/",
            "http://127.1:9/",
            "http://0x7f.1:9/",
            "http://0x7f.0.0.1:9/",
            "http://2130706433:9/",
            "http://0177.0.0.1:9/",
            "http://127.0.0.1.:9/",
        ] {
            check(url, Some("127.0.0.1"));
        }
        check("http://[::ffff:127.0.0.1]:9/", Some("::ffff:127.0.0.1"));
        check("http://[::1]:9/", Some("::1"));
        check("http://10.1:9/", Some("10.0.0.1"));
        check("http://localhost:9/", None);
        check("http://LOCALHOST.:9/", None);
        check("http://example.com/", None);
    }

    #[test]
    fn private_and_special_addresses_are_denied() {
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

    /// Every block of the IANA IPv4 and IPv6 Special-Purpose Address
    /// Registries (as of 2025), with its "Globally Reachable" column: each
    /// row's first, last and a middle address are denied exactly when the
    /// block is not globally reachable (`False`, or `N/A` for the
    /// deprecated 6to4 and Teredo blocks), and the addresses just outside
    /// a denied block are not (unless another denied block holds them).
    #[test]
    fn every_special_purpose_block_that_is_not_globally_reachable_is_denied() {
        // (block, first, middle, last, denied)
        let registry: &[(&str, &str, &str, &str, bool)] = &[
            // IPv4 (RFC 6890 and its updates)
            ("0.0.0.0/8", "0.0.0.0", "0.128.0.1", "0.255.255.255", true),
            (
                "10.0.0.0/8",
                "10.0.0.0",
                "10.128.0.1",
                "10.255.255.255",
                true,
            ),
            (
                "100.64.0.0/10",
                "100.64.0.0",
                "100.100.0.1",
                "100.127.255.255",
                true,
            ),
            (
                "127.0.0.0/8",
                "127.0.0.0",
                "127.1.2.3",
                "127.255.255.255",
                true,
            ),
            (
                "169.254.0.0/16",
                "169.254.0.0",
                "169.254.1.1",
                "169.254.255.255",
                true,
            ),
            (
                "172.16.0.0/12",
                "172.16.0.0",
                "172.20.0.1",
                "172.31.255.255",
                true,
            ),
            (
                "192.0.0.0/24",
                "192.0.0.0",
                "192.0.0.100",
                "192.0.0.255",
                true,
            ),
            ("192.0.0.0/29", "192.0.0.0", "192.0.0.4", "192.0.0.7", true),
            ("192.0.0.8/32", "192.0.0.8", "192.0.0.8", "192.0.0.8", true),
            ("192.0.0.9/32", "192.0.0.9", "192.0.0.9", "192.0.0.9", false),
            (
                "192.0.0.10/32",
                "192.0.0.10",
                "192.0.0.10",
                "192.0.0.10",
                false,
            ),
            (
                "192.0.0.170/31",
                "192.0.0.170",
                "192.0.0.170",
                "192.0.0.171",
                true,
            ),
            (
                "192.0.2.0/24",
                "192.0.2.0",
                "192.0.2.100",
                "192.0.2.255",
                true,
            ),
            (
                "192.31.196.0/24",
                "192.31.196.0",
                "192.31.196.1",
                "192.31.196.255",
                false,
            ),
            (
                "192.52.193.0/24",
                "192.52.193.0",
                "192.52.193.1",
                "192.52.193.255",
                false,
            ),
            (
                "192.88.99.0/24",
                "192.88.99.0",
                "192.88.99.1",
                "192.88.99.255",
                true,
            ),
            (
                "192.168.0.0/16",
                "192.168.0.0",
                "192.168.100.1",
                "192.168.255.255",
                true,
            ),
            (
                "192.175.48.0/24",
                "192.175.48.0",
                "192.175.48.1",
                "192.175.48.255",
                false,
            ),
            (
                "198.18.0.0/15",
                "198.18.0.0",
                "198.18.200.1",
                "198.19.255.255",
                true,
            ),
            (
                "198.51.100.0/24",
                "198.51.100.0",
                "198.51.100.7",
                "198.51.100.255",
                true,
            ),
            (
                "203.0.113.0/24",
                "203.0.113.0",
                "203.0.113.7",
                "203.0.113.255",
                true,
            ),
            (
                "240.0.0.0/4",
                "240.0.0.0",
                "250.1.2.3",
                "255.255.255.254",
                true,
            ),
            (
                "255.255.255.255/32",
                "255.255.255.255",
                "255.255.255.255",
                "255.255.255.255",
                true,
            ),
            // IPv4 multicast (its own registry; never a unicast destination)
            (
                "224.0.0.0/4",
                "224.0.0.0",
                "230.1.2.3",
                "239.255.255.255",
                true,
            ),
            // IPv6 (RFC 6890 and its updates)
            ("::1/128", "::1", "::1", "::1", true),
            ("::/128", "::", "::", "::", true),
            (
                "::ffff:0:0/96 (a private IPv4)",
                "::ffff:10.0.0.0",
                "::ffff:10.1.2.3",
                "::ffff:10.255.255.255",
                true,
            ),
            (
                "::ffff:0:0/96 (a public IPv4)",
                "::ffff:8.8.8.8",
                "::ffff:8.8.4.4",
                "::ffff:1.1.1.1",
                false,
            ),
            (
                "64:ff9b::/96 (a public IPv4)",
                "64:ff9b::8.8.8.8",
                "64:ff9b::1.1.1.1",
                "64:ff9b::9.9.9.9",
                false,
            ),
            (
                "64:ff9b::/96 (a private IPv4)",
                "64:ff9b::192.168.0.1",
                "64:ff9b::198.18.0.1",
                "64:ff9b::240.0.0.1",
                true,
            ),
            (
                "64:ff9b:1::/48",
                "64:ff9b:1::",
                "64:ff9b:1:8000::1",
                "64:ff9b:1:ffff:ffff:ffff:ffff:ffff",
                true,
            ),
            (
                "100::/64",
                "100::",
                "100::8000:0:0:1",
                "100::ffff:ffff:ffff:ffff",
                true,
            ),
            (
                "100:0:0:1::/64",
                "100:0:0:1::",
                "100:0:0:1:8000::1",
                "100:0:0:1:ffff:ffff:ffff:ffff",
                true,
            ),
            (
                "2001::/23",
                "2001::",
                "2001:100::1",
                "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff",
                true,
            ),
            (
                "2001::/32",
                "2001::",
                "2001:0:4136:e378:8000:63bf:3fff:fdd2",
                "2001:0:ffff:ffff:ffff:ffff:ffff:ffff",
                true,
            ),
            (
                "2001:1::1/128",
                "2001:1::1",
                "2001:1::1",
                "2001:1::1",
                false,
            ),
            (
                "2001:1::2/128",
                "2001:1::2",
                "2001:1::2",
                "2001:1::2",
                false,
            ),
            (
                "2001:1::3/128",
                "2001:1::3",
                "2001:1::3",
                "2001:1::3",
                false,
            ),
            (
                "2001:2::/48",
                "2001:2::",
                "2001:2:0:8000::1",
                "2001:2:0:ffff:ffff:ffff:ffff:ffff",
                true,
            ),
            (
                "2001:3::/32",
                "2001:3::",
                "2001:3:8000::1",
                "2001:3:ffff:ffff:ffff:ffff:ffff:ffff",
                false,
            ),
            (
                "2001:4:112::/48",
                "2001:4:112::",
                "2001:4:112:8000::1",
                "2001:4:112:ffff:ffff:ffff:ffff:ffff",
                false,
            ),
            (
                "2001:10::/28",
                "2001:10::",
                "2001:18::1",
                "2001:1f:ffff:ffff:ffff:ffff:ffff:ffff",
                true,
            ),
            (
                "2001:20::/28",
                "2001:20::",
                "2001:28::1",
                "2001:2f:ffff:ffff:ffff:ffff:ffff:ffff",
                false,
            ),
            (
                "2001:30::/28",
                "2001:30::",
                "2001:38::1",
                "2001:3f:ffff:ffff:ffff:ffff:ffff:ffff",
                false,
            ),
            (
                "2001:db8::/32",
                "2001:db8::",
                "2001:db8:8000::1",
                "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
                true,
            ),
            (
                "2002::/16",
                "2002::",
                "2002:c0a8:101::1",
                "2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                true,
            ),
            (
                "2620:4f:8000::/48",
                "2620:4f:8000::",
                "2620:4f:8000:8000::1",
                "2620:4f:8000:ffff:ffff:ffff:ffff:ffff",
                false,
            ),
            (
                "3fff::/20",
                "3fff::",
                "3fff:800::1",
                "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff",
                true,
            ),
            (
                "5f00::/16",
                "5f00::",
                "5f00:8000::1",
                "5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                true,
            ),
            (
                "fc00::/7",
                "fc00::",
                "fd00::1",
                "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                true,
            ),
            (
                "fe80::/10",
                "fe80::",
                "fe90::1",
                "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                true,
            ),
            // IPv6 multicast
            (
                "ff00::/8",
                "ff00::",
                "ff02::1",
                "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                true,
            ),
        ];
        for (block, first, middle, last, denied) in registry {
            for ip in [first, middle, last] {
                let addr: IpAddr = ip.parse().expect("a test address");
                assert_eq!(is_denied(addr), *denied, "{ip} in {block}");
            }
        }
        // Just outside the new blocks: public unicast.
        for ip in [
            "198.17.255.255",
            "198.20.0.0",
            "191.255.255.255",
            "192.0.1.0",
            "64:ff9b:2::1",
            "2001:200::1",
            "2003::1",
            "2001:db9::1",
            "3fff:1000::1",
            "5f01::1",
            "100:0:0:2::1",
        ] {
            check(ip, false);
        }
    }
}
