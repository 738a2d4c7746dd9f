//! What the domain needs to know about a task's url beyond "it parses":
//! dot-segments (which let a url climb out of an allowed prefix), its host
//! in one canonical form (so one destination has one name), matching an
//! allow-list prefix on the normalised url, and the parts of a url that
//! may be logged (never its query string's values, which often carry secrets).

/// Whether the path of `uri` has a `.` or `..` segment, literal or
/// percent-encoded (`%2e%2E`), also when a segment hides one behind an
/// encoded slash (`a%2F..`) that a downstream might decode.
pub(crate) fn has_dot_segment(path: &str) -> bool {
    path.split('/').any(|segment| {
        let decoded = percent_decode(segment);
        decoded
            .split(|&b| b == b'/' || b == b'\\')
            .any(|part| part == b"." || part == b"..")
    })
}

/// `host` (as a url writes it, an IPv6 address in brackets) in its one
/// canonical form, or `None` when it is no host: parsed as the WHATWG URL
/// standard parses a special url's host, so an IPv4 address in any of its
/// number forms (`127.1`, `0x7f.0.0.1`, `2130706433`, `0177.0.0.1`, a
/// trailing dot) becomes dotted-quad and a name is lower-cased; then, beyond
/// the standard, an IPv4-mapped IPv6 address (`[::ffff:127.0.0.1]`) becomes
/// its IPv4 address, an IPv6 address is written compressed, and a name
/// loses one trailing dot (`LOCALHOST.` is `localhost`). Every spelling of
/// an address or name thus names one destination, which the destination
/// settings, the allow-list and the private-address guard all judge.
pub fn canonical_host(host: &str) -> Option<String> {
    match url::Host::parse(host).ok()? {
        url::Host::Domain(name) => {
            let name = name.strip_suffix('.').unwrap_or(&name);
            (!name.is_empty()).then(|| name.to_owned())
        }
        url::Host::Ipv4(ip) => Some(ip.to_string()),
        url::Host::Ipv6(ip) => Some(match ip.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => format!("[{ip}]"),
        }),
    }
}

/// Why the allow-list refuses a task: the field whose url is under no
/// allowed prefix (`url` or `callback_url`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{field}: not under any allowed prefix of this server")]
pub struct UrlNotAllowed {
    /// `url` or `callback_url`.
    pub field: &'static str,
}

impl UrlNotAllowed {
    /// The error code the API and a schedule's `last_error` give it.
    pub const CODE: &'static str = "url_not_allowed";
}

/// The allow-list rule, the one place it is said: with no prefixes every
/// url is allowed; otherwise the task's `url`, and its `callback_url` when
/// it has one, must each lie under some prefix ([`is_under_prefix`], on the
/// canonical host). Applied to submits, schedules, their firings and
/// retries alike.
pub fn urls_allowed(
    url: &str,
    callback_url: Option<&str>,
    prefixes: &[String],
) -> Result<(), UrlNotAllowed> {
    let allowed = |u: &str| prefixes.is_empty() || prefixes.iter().any(|p| is_under_prefix(u, p));
    if !allowed(url) {
        return Err(UrlNotAllowed { field: "url" });
    }
    match callback_url {
        Some(c) if !allowed(c) => Err(UrlNotAllowed {
            field: "callback_url",
        }),
        _ => Ok(()),
    }
}

/// Whether `url` lies under the allow-list `prefix`: same scheme, host and
/// port (the hosts canonical ([`canonical_host`]), default ports made explicit), and a
/// path that starts with the prefix's path at a segment boundary, after
/// both were normalised (percent-encoded unreserved characters decoded, the
/// other escapes in upper case). A prefix that is not an absolute http(s)
/// url matches nothing; so does a url with a query when the prefix has one.
pub fn is_under_prefix(url: &str, prefix: &str) -> bool {
    let (Some(url), Some(prefix)) = (Normalised::parse(url), Normalised::parse(prefix)) else {
        return false;
    };
    if url.origin != prefix.origin || prefix.has_query {
        return false;
    }
    let Some(rest) = url.path.strip_prefix(prefix.path.as_str()) else {
        return false;
    };
    prefix.path.ends_with('/') || rest.is_empty() || rest.starts_with('/')
}

/// The origin (`scheme://host:port`, the port always written) and the path
/// of `url`, without its query string: what logs may say about a task's url.
/// A url that does not parse (no task has one) is logged as `invalid`.
pub fn origin_and_path(url: &str) -> (String, &str) {
    let Ok(uri) = url.parse::<http::Uri>() else {
        return ("invalid".to_owned(), "");
    };
    let path_start = url
        .find("://")
        .and_then(|scheme_end| {
            let after = scheme_end + 3;
            url[after..].find(['/', '?']).map(|p| after + p)
        })
        .unwrap_or(url.len());
    let path_end = url[path_start..]
        .find(['?', '#'])
        .map_or(url.len(), |p| path_start + p);
    (
        origin(&uri).unwrap_or_else(|| "invalid".to_owned()),
        &url[path_start..path_end],
    )
}

/// What a span's `url.full` and a log line may show of `url`: its origin
/// and path ([`origin_and_path`], never user info) and its query with every
/// parameter's name kept and its value replaced by `REDACTED` (a query often
/// carries a token; its names still tell calls apart). No fragment.
pub fn redacted_url(url: &str) -> String {
    let (origin, path) = origin_and_path(url);
    let before_fragment = url.split('#').next().unwrap_or_default();
    let Some((_, query)) = before_fragment.split_once('?') else {
        return format!("{origin}{path}");
    };
    let redacted: Vec<String> = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) => format!("{name}=REDACTED"),
            None => pair.to_owned(),
        })
        .collect();
    if redacted.is_empty() {
        return format!("{origin}{path}");
    }
    format!("{origin}{path}?{}", redacted.join("&"))
}

/// A url's destination: its `host:port`, the host canonical
/// ([`canonical_host`]: `http://127.1:9/` is `127.0.0.1:9`), the port
/// always written (`api.example.com:443`, `[::1]:8080`). What destination
/// settings and per-downstream listing filters name; a url that does not
/// parse (no task has one) is `invalid`.
pub fn destination_of(url: &str) -> String {
    let Ok(uri) = url.parse::<http::Uri>() else {
        return "invalid".to_owned();
    };
    match origin(&uri) {
        Some(origin) => origin
            .split_once("://")
            .map_or(origin.clone(), |(_, hostport)| hostport.to_owned()),
        None => "invalid".to_owned(),
    }
}

fn origin(uri: &http::Uri) -> Option<String> {
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let host = canonical_host(uri.host()?)?;
    let port = uri.port_u16().or(match scheme.as_str() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    })?;
    Some(format!("{scheme}://{host}:{port}"))
}

struct Normalised {
    origin: String,
    path: String,
    has_query: bool,
}

impl Normalised {
    fn parse(url: &str) -> Option<Normalised> {
        let uri: http::Uri = url.parse().ok()?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) {
            return None;
        }
        let path = if uri.path().is_empty() {
            "/"
        } else {
            uri.path()
        };
        Some(Normalised {
            origin: origin(&uri)?,
            path: normalise_escapes(path),
            has_query: uri.query().is_some(),
        })
    }
}

/// RFC 3986 §6.2.2: escapes of unreserved characters decoded, the other
/// escapes' hex digits in upper case, so that equal paths compare equal.
fn normalise_escapes(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        if let Some(b) = escaped_byte(bytes, i) {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
            i += 3;
        } else {
            out.push(char::from(bytes[i]));
            i += 1;
        }
    }
    out
}

fn percent_decode(segment: &str) -> Vec<u8> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if let Some(b) = escaped_byte(bytes, i) {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

/// The byte `%XX` at `i` stands for, if there is a well-formed escape there.
fn escaped_byte(bytes: &[u8], i: usize) -> Option<u8> {
    if bytes.get(i) != Some(&b'%') {
        return None;
    }
    let hex = |b: u8| char::from(b).to_digit(16);
    let hi = hex(*bytes.get(i + 1)?)?;
    let lo = hex(*bytes.get(i + 2)?)?;
    u8::try_from(hi * 16 + lo).ok()
}

/// The longest host name a destination may have (DNS's limit).
pub const MAX_HOST_BYTES: usize = 253;

/// Whether `host` can be a destination's host: a name of letters, digits,
/// `.`, `-` and `_` (an IPv4 address is one) of at most
/// [`MAX_HOST_BYTES`], or a valid IPv6 address in brackets. A task's url
/// must have such a host, so that every task's destination is one the
/// destination routes and filters can name.
pub fn is_destination_host(host: &str) -> bool {
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        inner.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        !host.is_empty()
            && host.len() <= MAX_HOST_BYTES
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redacted_url_keeps_the_query_s_names_and_hides_its_values() {
        let check = |url: &str, expected: &str| {
            assert_eq!(redacted_url(url), expected, "{url}");
        };
        check("https://b.test/hooks/1", "https://b.test:443/hooks/1");
        check(
            "https://b.test/hooks?token=s3cret&page=2",
            "https://b.test:443/hooks?token=REDACTED&page=REDACTED",
        );
        check(
            "http://user:pw@b.test:8080/p?flag&sig=abc#frag",
            "http://b.test:8080/p?flag&sig=REDACTED",
        );
        check(
            "http://b.test/p?a=1=2&&b=",
            "http://b.test:80/p?a=REDACTED&b=REDACTED",
        );
        check("http://b.test?x=1", "http://b.test:80?x=REDACTED");
        check("http://b.test/p?", "http://b.test:80/p");
        check("http://b.test/p#x?y=1", "http://b.test:80/p");
    }

    #[test]
    fn dot_segments_are_found_literal_or_encoded() {
        let check = |path: &str, expected: bool| {
            assert_eq!(has_dot_segment(path), expected, "{path}");
        };
        check("/hooks/1", false);
        check("/hooks/a.b/..c/.d/...", false);
        check("/", false);
        check("", false);
        check("/hooks/../admin", true);
        check("/hooks/./x", true);
        check("/hooks/..", true);
        check("/hooks/.", true);
        check("/hooks/%2e%2e/admin", true);
        check("/hooks/%2E%2e/admin", true);
        check("/hooks/.%2E/admin", true);
        check("/hooks/%2e/admin", true);
        check("/hooks/x%2F..%2Fadmin", true);
        check("/hooks/x%5C..%5Cadmin", true);
        check("/hooks/%2e%2ex", false);
        check("/hooks/%zz/..%", false);
    }

    #[test]
    fn prefixes_match_the_normalised_url_at_a_segment_boundary() {
        let check = |url: &str, prefix: &str, expected: bool| {
            assert_eq!(
                is_under_prefix(url, prefix),
                expected,
                "{url} under {prefix}"
            );
        };
        let hooks = "https://b.test/hooks/";
        check("https://b.test/hooks/1", hooks, true);
        check("https://b.test/hooks/", hooks, true);
        check("https://B.TEST/hooks/1", hooks, true);
        check("HTTPS://b.test:443/hooks/1?x=1", hooks, true);
        check("https://b.test/%68ooks/1", hooks, true);
        check("https://b.test/hooks", hooks, false);
        check("https://b.test/hooksx/1", hooks, false);
        check("https://b.test/other", hooks, false);
        check("http://b.test/hooks/1", hooks, false);
        check("https://b.test:8443/hooks/1", hooks, false);
        check("https://b.test.evil/hooks/1", hooks, false);
        check("https://b.test/hooks%2F1", hooks, false);
        // Without a trailing slash, the prefix still ends at a boundary.
        let bare = "https://b.test/hooks";
        check("https://b.test/hooks", bare, true);
        check("https://b.test/hooks/1", bare, true);
        check("https://b.test/hooks?x", bare, true);
        check("https://b.test/hooksx", bare, false);
        let host = "http://a.test";
        check("http://a.test/x", host, true);
        check("http://a.test", host, true);
        check("http://a.test.evil/", host, false);
        check("http://a.test:8080/", host, false);
        check("http://a.test/x", "not a url", false);
        check("http://a.test/x?y", "http://a.test/x?y", false);
    }

    #[test]
    fn a_destination_is_host_and_port() {
        let check = |url: &str, destination: &str| {
            assert_eq!(destination_of(url), destination, "{url}");
        };
        check("http://127.0.0.1:9000/hook?x=1", "127.0.0.1:9000");
        check("https://API.Example.com/a", "api.example.com:443");
        check("http://h", "h:80");
        check("http://user:pw@h:81/x", "h:81");
        check("http://[::1]:8080/x", "[::1]:8080");
        check("https://[2001:DB8::1]/x", "[2001:db8::1]:443");
        check("nonsense", "invalid");
    }

    /// Every spelling of one host names one destination, as the
    /// WHATWG URL standard parses hosts (and an IPv4-mapped IPv6 address is
    /// its IPv4 address).
    #[test]
    fn one_destination_has_one_name() {
        let check = |url: &str, destination: &str| {
            assert_eq!(destination_of(url), destination, "{url}");
        };
        for url in [
            "http://127.0.0.1:9/",
            "http://127.0.0.1.:9/",
            "http://127.1:9/",
            "http://0x7f.0.0.1:9/",
            "http://0X7F.0.0.1:9/x",
            "http://2130706433:9/",
            "http://0177.0.0.1:9/",
            "http://0x7f.1:9/",
            "http://[::ffff:127.0.0.1]:9/",
            "http://[::FFFF:7f00:1]:9/",
        ] {
            check(url, "127.0.0.1:9");
        }
        check("http://LOCALHOST.:9/", "localhost:9");
        check("http://LocalHost:9/", "localhost:9");
        check("https://API.Example.com./a", "api.example.com:443");
        check("http://[0:0:0:0:0:0:0:1]:8080/", "[::1]:8080");
        check("http://[2001:DB8:0:0::1]/", "[2001:db8::1]:80");
        // Not an IPv4 address: a name that ends in a letter stays a name.
        check("http://0x7f.0.0.1x:9/", "0x7f.0.0.1x:9");
        // A number past IPv4's range is no host.
        check("http://4294967296:9/", "invalid");
        check("http://1.2.3.4.5:9/", "invalid");
    }

    #[test]
    fn the_allow_list_judges_the_canonical_host() {
        let check = |url: &str, prefix: &str, expected: bool| {
            assert_eq!(
                is_under_prefix(url, prefix),
                expected,
                "{url} under {prefix}"
            );
            let prefixes = [prefix.to_owned()];
            assert_eq!(
                urls_allowed(url, None, &prefixes).is_ok(),
                expected,
                "{url} allowed by {prefix}"
            );
        };
        let loopback = "http://127.0.0.1:9/";
        check("http://127.1:9/x", loopback, true);
        check("http://2130706433:9/x", loopback, true);
        check("http://[::ffff:127.0.0.1]:9/x", loopback, true);
        check("http://127.0.0.2:9/x", loopback, false);
        check("http://0x7f.0.0.2:9/x", loopback, false);
        check("http://LOCALHOST.:9/x", "http://localhost:9/", true);
        check("http://localhost:9/x", "http://LOCALHOST.:9/", true);
        check("http://localhost.evil:9/x", "http://localhost:9/", false);
    }

    #[test]
    fn urls_allowed_names_the_field_refused() {
        let check = |url: &str, callback: Option<&str>, prefixes: &[&str], expected| {
            let prefixes: Vec<String> = prefixes.iter().map(|p| (*p).to_owned()).collect();
            assert_eq!(
                urls_allowed(url, callback, &prefixes).map_err(|e| e.field),
                expected,
                "{url} {callback:?} {prefixes:?}"
            );
        };
        let a = &["http://a.test/"][..];
        check("http://anything/", Some("http://else/"), &[], Ok(()));
        check("http://a.test/x", None, a, Ok(()));
        check("http://a.test/x", Some("http://a.test/cb"), a, Ok(()));
        check("http://b.test/x", None, a, Err("url"));
        check("http://b.test/x", Some("http://a.test/cb"), a, Err("url"));
        check(
            "http://a.test/x",
            Some("http://b.test/cb"),
            a,
            Err("callback_url"),
        );
        assert_eq!(
            UrlNotAllowed { field: "url" }.to_string(),
            "url: not under any allowed prefix of this server"
        );
    }

    #[test]
    fn logs_see_the_origin_and_path_never_the_query() {
        let check = |url: &str, origin: &str, path: &str| {
            assert_eq!(origin_and_path(url), (origin.to_owned(), path), "{url}");
        };
        check(
            "http://127.0.0.1:9000/hook?token=s3cret",
            "http://127.0.0.1:9000",
            "/hook",
        );
        check(
            "https://Example.com/a/b#frag",
            "https://example.com:443",
            "/a/b",
        );
        check("http://h?x=1", "http://h:80", "");
        check("http://h", "http://h:80", "");
        check("http://[::1]:8080/x", "http://[::1]:8080", "/x");
        check("nonsense", "invalid", "");
    }
}
