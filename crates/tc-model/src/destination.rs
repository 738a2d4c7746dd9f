//! Destinations: the `host:port` a task's url points at, the settings an
//! operator keeps for each, and the rules a claim follows so that one slow
//! or failing destination cannot take every worker slot.
//!
//! Who enforces what:
//! - The **store** applies the durable settings it holds, `paused` and
//!   `max_in_flight` (counted from its running tasks, so on a shared
//!   database the cap holds across nodes), and rotates claims over the
//!   destinations that have due tasks, each free slot to the one with the
//!   fewest calls in flight on the claiming node ([`FairShare`]).
//! - The **worker** adds the holds it learns from answers (a destination's
//!   Retry-After backoff, its circuit breaker) and its token buckets, and
//!   passes them to each claim as a [`ClaimGate`].

use std::collections::{BTreeMap, BTreeSet};

pub use crate::setting::InvalidSetting;
pub use crate::share::FairShare;

use crate::auth::DestinationAuth;
pub use crate::client_tls::ClientTls;
use crate::headers::Headers;
pub use crate::outbound::SharedWith;
use crate::signing::SigningSecrets;

pub use crate::setting::{BURST_LIMIT, MAX_IN_FLIGHT_LIMIT};

/// What an operator set for one destination. The defaults hold nothing back.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DestinationSettings {
    /// The most calls to this destination in flight at once (`None`: only
    /// the worker's own concurrency bounds them).
    pub max_in_flight: Option<u32>,
    /// Calls per second, refilled continuously (`None`: no rate limit).
    pub rate_per_s: Option<f64>,
    /// The token bucket's size: how many calls may start at once after a
    /// quiet spell (`None`: the rate rounded up, at least 1).
    pub burst: Option<u32>,
    /// Held entirely: no task of this destination is claimed.
    pub paused: bool,
    /// Headers sent with every call to this destination (a task's own
    /// header of the same name wins): with a tenant's task only when
    /// [`DestinationSettings::share_with_tenants`] lists the tenant
    /// ([`crate::outbound`]). Write-only: views show the names.
    pub headers: Headers,
    /// The Standard Webhooks secrets its calls are signed with (none: the
    /// server's own, if it has one, for tasks without a tenant): with a
    /// tenant's task only when shared with it. Write-only: views show how
    /// many.
    pub signing_secrets: SigningSecrets,
    /// The tenants whose tasks get `headers` and `signing_secrets` (names,
    /// or `"*"` for every tenant; default none).
    pub share_with_tenants: SharedWith,
    /// How its calls authenticate: Basic, an OAuth2 token or a
    /// JWT of the server's; its secrets are write-only. It applies to every
    /// task of the destination, a tenant's too: it names taskcenter, not
    /// the tenant (a JWT's `sub` does).
    pub auth: Option<DestinationAuth>,
    /// The client certificate and key presented on every TLS connection to
    /// it (the key write-only; views show the certificate's facts).
    pub client_tls: Option<ClientTls>,
    /// CA certificates (PEM) trusted for this destination alone, besides
    /// the server's roots.
    pub ca_certs: Option<String>,
}

impl DestinationSettings {
    /// Whether a claim must look at this destination's running tasks or
    /// skip it: the two settings the store itself enforces.
    pub fn limits_claims(&self) -> bool {
        self.paused || self.max_in_flight.is_some()
    }

    /// The token bucket's size when a rate is set.
    pub fn bucket_size(&self) -> Option<f64> {
        let rate = self.rate_per_s?;
        Some(match self.burst {
            Some(burst) => f64::from(burst.max(1)),
            None => rate.ceil().max(1.0),
        })
    }
}

/// A change to a destination's settings: `None` leaves a field as it is;
/// for the nullable fields `Some(None)` clears it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DestinationUpdate {
    /// A new cap, or `Some(None)` to remove it.
    pub max_in_flight: Option<Option<u32>>,
    /// A new rate, or `Some(None)` to remove it.
    pub rate_per_s: Option<Option<f64>>,
    /// A new bucket size, or `Some(None)` for the default.
    pub burst: Option<Option<u32>>,
    /// Pause or resume.
    pub paused: Option<bool>,
    /// New default headers, replacing the old ones (empty: none).
    pub headers: Option<Headers>,
    /// New signing secrets, replacing the old ones (empty: none).
    pub signing_secrets: Option<SigningSecrets>,
    /// A new list of tenants its credentials are lent to, replacing the
    /// old one (empty: none).
    pub share_with_tenants: Option<SharedWith>,
    /// A new `auth`, or `Some(None)` to remove it.
    pub auth: Option<Option<DestinationAuth>>,
    /// A new client certificate and key, or `Some(None)` to remove them.
    pub client_tls: Option<Option<ClientTls>>,
    /// New CA certificates, or `Some(None)` to remove them.
    pub ca_certs: Option<Option<String>>,
}

impl DestinationUpdate {
    /// Checks every given value's range.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        crate::setting::check_limits(self.max_in_flight, self.rate_per_s, self.burst)?;
        Ok(())
    }

    /// `settings` with this update applied.
    pub fn apply(&self, settings: &DestinationSettings) -> DestinationSettings {
        DestinationSettings {
            max_in_flight: self.max_in_flight.unwrap_or(settings.max_in_flight),
            rate_per_s: self.rate_per_s.unwrap_or(settings.rate_per_s),
            burst: self.burst.unwrap_or(settings.burst),
            paused: self.paused.unwrap_or(settings.paused),
            headers: self
                .headers
                .clone()
                .unwrap_or_else(|| settings.headers.clone()),
            signing_secrets: self
                .signing_secrets
                .clone()
                .unwrap_or_else(|| settings.signing_secrets.clone()),
            share_with_tenants: self
                .share_with_tenants
                .clone()
                .unwrap_or_else(|| settings.share_with_tenants.clone()),
            auth: self.auth.clone().unwrap_or_else(|| settings.auth.clone()),
            client_tls: self
                .client_tls
                .clone()
                .unwrap_or_else(|| settings.client_tls.clone()),
            ca_certs: self
                .ca_certs
                .clone()
                .unwrap_or_else(|| settings.ca_certs.clone()),
        }
    }
}

/// A destination as the store knows it: its settings and its tasks.
#[derive(Debug, Clone, PartialEq)]
pub struct Destination {
    /// `host:port`, lower case.
    pub name: String,
    /// Its settings (the defaults when none were set).
    pub settings: DestinationSettings,
    /// Its pending tasks (due or not).
    pub pending: u64,
    /// Its running tasks, on every node that shares the store.
    pub running: u64,
}

/// The most destinations [`crate::store::Destinations::destinations`] returns:
/// a bound on one answer's size, whatever the number of distinct hosts.
pub const DESTINATIONS_LIMIT: usize = 1000;

/// What the worker holds back on top of the store's own settings, for one
/// claim.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimGate {
    /// Destinations none of whose tasks may be claimed now (backing off, an
    /// open breaker, no tokens left).
    pub held: BTreeSet<String>,
    /// Destinations of which at most this many tasks may be claimed (the
    /// tokens left, the one probe of a half-open breaker).
    pub at_most: BTreeMap<String, usize>,
    /// Where the rotation resumes: the first destination served is the one
    /// after this (in name order, wrapping around).
    pub after: Option<String>,
    /// The claiming node's own calls in flight, by destination (those with
    /// none may be left out). Each free slot goes to the due destination
    /// with the fewest ([`FairShare`]), so the slots are shared fairly
    /// between destinations with due tasks on each node: on a shared
    /// database every node shares its own slots, as it keeps its own rates,
    /// backoffs and breakers.
    pub in_flight: BTreeMap<String, usize>,
    /// The share between tenants inside each destination's, when tenants
    /// exist; `None`: the claim is tenant-blind ([`crate::tenant::TenantGate`]).
    pub tenants: Option<crate::tenant::TenantGate>,
    /// Flow keys none of whose tasks may be claimed now: a downstream's
    /// rate-limit fields said no calls are left ([`crate::flow_key`]).
    pub held_keys: BTreeSet<crate::flow_key::KeyRef>,
    /// How long a due task waits to count one priority level higher
    /// (`--priority-aging-ms`); `None`: [`crate::priority::DEFAULT_AGING`].
    pub priority_aging: Option<std::time::Duration>,
    /// At most this many tasks of a destination the claiming node has not
    /// met: one the gate names nowhere (not held, no bound, no call in
    /// flight here, not in `met`). One call learns whether the server
    /// states its window before more go (the worker's first contact);
    /// `None`: no bound.
    pub first_contact: Option<usize>,
    /// Destinations the claiming node has met and calls without a bound,
    /// though none of its calls is in flight now.
    pub met: BTreeSet<String>,
}

impl ClaimGate {
    /// The priority aging in force ([`crate::priority::claim_key`]).
    pub fn aging(&self) -> std::time::Duration {
        self.priority_aging
            .unwrap_or(crate::priority::DEFAULT_AGING)
    }

    /// The claiming node's calls in flight to `destination`.
    pub fn in_flight(&self, destination: &str) -> usize {
        self.in_flight.get(destination).copied().unwrap_or(0)
    }
    /// The most tasks of `destination` a claim may take, on the worker's
    /// side (`None`: no bound but the claim's own size): none when held,
    /// its bound when it has one, else [`ClaimGate::first_contact`] for a
    /// destination the node has not met.
    pub fn allowance(&self, destination: &str) -> Option<usize> {
        if self.held.contains(destination) {
            return Some(0);
        }
        if let Some(n) = self.at_most.get(destination) {
            return Some(*n);
        }
        self.first_contact.filter(|_| {
            !self.in_flight.contains_key(destination) && !self.met.contains(destination)
        })
    }

    /// The most tasks of `destination` one claim may take, all rules
    /// together: its stored `settings` (paused: none; a cap: the cap less
    /// its `running` tasks) and this gate. `None`: no bound.
    pub fn claim_allowance(
        &self,
        destination: &str,
        settings: Option<&DestinationSettings>,
        running: u64,
    ) -> Option<usize> {
        let stored = match settings {
            Some(s) if s.paused => Some(0),
            Some(DestinationSettings {
                max_in_flight: Some(cap),
                ..
            }) => {
                Some(usize::try_from(u64::from(*cap).saturating_sub(running)).unwrap_or(usize::MAX))
            }
            _ => None,
        };
        match (stored, self.allowance(destination)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Orders `names` for a claim's rotation: those after `after` first, then
/// the rest from the start (each once).
pub fn rotation<'a>(names: &'a [String], after: Option<&str>) -> impl Iterator<Item = &'a String> {
    let split = match after {
        Some(after) => names.partition_point(|n| n.as_str() <= after),
        None => 0,
    };
    names[split..].iter().chain(names[..split].iter())
}

pub use crate::url::{MAX_HOST_BYTES, is_destination_host};

/// Parses a destination as a client names it in a path (`host:port`): a
/// host (a name, an IPv4 address or a bracketed IPv6 address) and a port,
/// the host canonical as [`crate::destination_of`] writes it (`127.1:9` is
/// `127.0.0.1:9`, see [`crate::canonical_host`]); a host the WHATWG URL
/// standard refuses, which no task's url has, is only lower-cased.
pub fn parse_destination(s: &str) -> Result<String, InvalidSetting> {
    let bad = |message: &str| InvalidSetting {
        field: "destination",
        message: message.to_owned(),
    };
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| bad("must be host:port, the port written"))?;
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) || port.parse::<u16>().is_err()
    {
        return Err(bad("the port must be a number up to 65535"));
    }
    if !is_destination_host(host) {
        return Err(bad("the host must be a name or an address"));
    }
    let port: u16 = port
        .parse()
        .map_err(|_| bad("the port must be a number up to 65535"))?;
    let host = crate::canonical_host(host).unwrap_or_else(|| host.to_ascii_lowercase());
    Ok(format!("{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One candidate of a test claim: its name, due tasks, allowance and
    /// calls in flight on this node.
    type Due<'a> = (&'a str, usize, Option<usize>, usize);

    /// A test claim: what it shows, its size, its candidates, and each
    /// destination's total it must take.
    type Case<'a> = (&'a str, usize, &'a [Due<'a>], &'a [(&'a str, usize)]);

    /// Plays a claim of `n` over `due` (in rotation order): each take gets
    /// what the destination has left. Returns the takes in order.
    fn run_plan(n: usize, due: &[Due]) -> Vec<(String, usize)> {
        let in_flight = due
            .iter()
            .map(|(d, _, _, busy)| ((*d).to_owned(), *busy))
            .collect();
        let candidates = due
            .iter()
            .map(|(d, _, allowed, _)| ((*d).to_owned(), *allowed))
            .collect();
        let mut plan = FairShare::new(n, candidates, &in_flight);
        let mut left: BTreeMap<String, usize> = due
            .iter()
            .map(|(d, k, _, _)| ((*d).to_owned(), *k))
            .collect();
        let mut got = Vec::new();
        let mut guard = 0;
        while let Some((dest, want)) = plan.next_take() {
            guard += 1;
            assert!(guard < 1000, "the plan does not end");
            let have = left.get_mut(&dest).expect("a candidate");
            let n = want.min(*have);
            *have -= n;
            plan.taken(n);
            got.push((dest, n));
        }
        got
    }

    fn total(got: &[(String, usize)], dest: &str) -> usize {
        got.iter().filter(|(d, _)| d == dest).map(|(_, n)| n).sum()
    }

    /// Checks a claim of `n` over `due`: each destination's total is as
    /// `want` says, and the claim takes all it can (work-conserving).
    fn check(case: &str, n: usize, due: &[Due], want: &[(&str, usize)]) {
        let got = run_plan(n, due);
        for (dest, expected) in want {
            assert_eq!(total(&got, dest), *expected, "{case}: {dest} in {got:?}");
        }
        let all: usize = got.iter().map(|(_, k)| k).sum();
        let available: usize = due
            .iter()
            .map(|(_, k, a, _)| (*k).min(a.unwrap_or(usize::MAX)))
            .sum();
        assert_eq!(all, n.min(available), "{case}: claimed in all, {got:?}");
    }

    #[test]
    fn equal_loads_share_in_rotation_order() {
        let cases: &[Case] = &[
            (
                "two backlogs",
                8,
                &[("a", 100, None, 0), ("b", 100, None, 0)],
                &[("a", 4), ("b", 4)],
            ),
            (
                "more destinations than slots: the first in rotation",
                3,
                &[
                    ("a", 9, None, 0),
                    ("b", 9, None, 0),
                    ("c", 9, None, 0),
                    ("d", 9, None, 0),
                ],
                &[("a", 1), ("b", 1), ("c", 1), ("d", 0)],
            ),
            (
                "an odd slot goes to the first in rotation",
                7,
                &[("b", 9, None, 2), ("a", 9, None, 2), ("c", 9, None, 2)],
                &[("b", 3), ("a", 2), ("c", 2)],
            ),
            ("an empty claim", 0, &[("a", 9, None, 0)], &[("a", 0)]),
            ("nothing due", 5, &[], &[]),
        ];
        for (case, n, due, want) in cases {
            check(case, *n, due, want);
        }
    }

    #[test]
    fn the_least_loaded_destination_is_served_first() {
        let cases: &[Case] = &[
            (
                "one slot freed beside a loaded destination",
                1,
                &[("slow", 100, None, 63), ("fast", 100, None, 1)],
                &[("slow", 0), ("fast", 1)],
            ),
            (
                "the others catch up first",
                3,
                &[("a", 10, None, 5), ("b", 10, None, 0)],
                &[("a", 0), ("b", 3)],
            ),
            (
                "then the slots are shared",
                9,
                &[("a", 10, None, 5), ("b", 10, None, 0)],
                &[("a", 2), ("b", 7)],
            ),
            (
                "water-filling over three levels",
                6,
                &[("a", 10, None, 4), ("b", 10, None, 2), ("c", 10, None, 0)],
                &[("a", 0), ("b", 2), ("c", 4)],
            ),
            (
                "the allowance bounds the least loaded",
                4,
                &[("a", 10, None, 5), ("b", 10, Some(1), 0)],
                &[("a", 3), ("b", 1)],
            ),
            (
                "a held destination is skipped however idle",
                2,
                &[("a", 10, None, 5), ("b", 10, Some(0), 0)],
                &[("a", 2), ("b", 0)],
            ),
            (
                "fewer due tasks than the share: the rest to the others",
                6,
                &[("a", 10, None, 3), ("b", 1, None, 0), ("c", 2, None, 0)],
                &[("a", 3), ("b", 1), ("c", 2)],
            ),
            (
                "more slots than due tasks",
                50,
                &[("a", 4, None, 9), ("b", 3, Some(2), 0), ("c", 0, None, 0)],
                &[("a", 4), ("b", 2), ("c", 0)],
            ),
            (
                "alone, a loaded destination takes every slot",
                5,
                &[("a", 100, None, 60)],
                &[("a", 5)],
            ),
        ];
        for (case, n, due, want) in cases {
            check(case, *n, due, want);
        }
    }

    #[test]
    fn takes_come_in_rotation_order_round_by_round() {
        // Round one: a (load 1) and b (load 0) level at 3: a 2, b 3; b has
        // 1 due, so round two shares b's 2 spare slots: a takes them.
        let got = run_plan(
            5,
            &[("a", 10, None, 1), ("b", 1, None, 0), ("c", 10, Some(0), 0)],
        );
        let want: Vec<(String, usize)> = vec![("a".into(), 2), ("b".into(), 1), ("a".into(), 2)];
        assert_eq!(got, want);
    }

    #[test]
    fn rotation_starts_after_the_cursor_and_wraps() {
        let names: Vec<String> = ["a", "b", "c"].iter().map(|s| (*s).to_owned()).collect();
        let order = |after: Option<&str>| rotation(&names, after).cloned().collect::<Vec<_>>();
        assert_eq!(order(None), ["a", "b", "c"]);
        assert_eq!(order(Some("a")), ["b", "c", "a"]);
        assert_eq!(order(Some("bb")), ["c", "a", "b"]);
        assert_eq!(order(Some("z")), ["a", "b", "c"]);
    }

    #[test]
    fn destinations_parse_as_the_task_view_writes_them() {
        let rows: &[(&str, Option<&str>)] = &[
            ("api.example.com:443", Some("api.example.com:443")),
            ("API.Example.com:80", Some("api.example.com:80")),
            ("127.0.0.2:8080", Some("127.0.0.2:8080")),
            ("[::1]:9000", Some("[::1]:9000")),
            ("api.example.com", None),
            ("api.example.com:", None),
            ("api.example.com:70000", None),
            (":80", None),
            ("a/b:80", None),
            ("[zz]:80", None),
            // Every spelling of a host names its one destination.
            ("127.0.0.1.:9", Some("127.0.0.1:9")),
            ("127.1:9", Some("127.0.0.1:9")),
            ("0x7f.0.0.1:9", Some("127.0.0.1:9")),
            ("2130706433:9", Some("127.0.0.1:9")),
            ("0177.0.0.1:9", Some("127.0.0.1:9")),
            ("[::ffff:127.0.0.1]:9", Some("127.0.0.1:9")),
            ("LOCALHOST.:9", Some("localhost:9")),
            ("[0:0::1]:9", Some("[::1]:9")),
        ];
        for (input, want) in rows {
            assert_eq!(parse_destination(input).ok().as_deref(), *want, "{input}");
        }
    }

    #[test]
    fn updates_validate_and_apply() {
        let bad = |u: DestinationUpdate| u.validate().map_err(|e| e.field);
        let cap = |c| DestinationUpdate {
            max_in_flight: Some(Some(c)),
            ..Default::default()
        };
        assert_eq!(bad(cap(0)), Err("max_in_flight"));
        assert_eq!(bad(cap(10_001)), Err("max_in_flight"));
        assert_eq!(bad(cap(10_000)), Ok(()));
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let u = DestinationUpdate {
                rate_per_s: Some(Some(rate)),
                ..Default::default()
            };
            assert_eq!(bad(u), Err("rate_per_s"), "{rate}");
        }
        let u = DestinationUpdate {
            burst: Some(Some(0)),
            ..Default::default()
        };
        assert_eq!(bad(u), Err("burst"));

        let start = DestinationSettings {
            max_in_flight: Some(2),
            rate_per_s: Some(5.0),
            ..Default::default()
        };
        let cleared = DestinationUpdate {
            max_in_flight: Some(None),
            paused: Some(true),
            ..Default::default()
        }
        .apply(&start);
        assert_eq!(cleared.max_in_flight, None);
        assert_eq!(cleared.rate_per_s, Some(5.0));
        assert!(cleared.paused);
        assert_eq!(start.bucket_size(), Some(5.0));
        assert_eq!(
            DestinationSettings {
                rate_per_s: Some(0.5),
                ..Default::default()
            }
            .bucket_size(),
            Some(1.0)
        );
    }

    #[test]
    fn headers_and_secrets_are_replaced_when_named_and_kept_otherwise() {
        let headers =
            Headers::parse([("Authorization".to_owned(), "Bearer t".to_owned())]).unwrap();
        let secret = format!("whsec_{}", "A".repeat(32));
        let secrets = SigningSecrets::parse(&[secret]).unwrap();
        let set = DestinationUpdate {
            headers: Some(headers.clone()),
            signing_secrets: Some(secrets.clone()),
            ..Default::default()
        }
        .apply(&DestinationSettings::default());
        assert_eq!((&set.headers, &set.signing_secrets), (&headers, &secrets));
        assert!(set != DestinationSettings::default() && !set.limits_claims());
        let paused = DestinationUpdate {
            paused: Some(true),
            ..Default::default()
        }
        .apply(&set);
        assert_eq!(
            (&paused.headers, &paused.signing_secrets),
            (&headers, &secrets)
        );
        let cleared = DestinationUpdate {
            headers: Some(Headers::default()),
            signing_secrets: Some(SigningSecrets::default()),
            paused: Some(false),
            ..Default::default()
        }
        .apply(&paused);
        assert_eq!(cleared, DestinationSettings::default());
    }

    #[test]
    fn first_contact_bounds_only_destinations_not_met() {
        let mut gate = ClaimGate {
            first_contact: Some(1),
            ..ClaimGate::default()
        };
        gate.held.insert("held:1".into());
        gate.at_most.insert("bounded:1".into(), 3);
        gate.in_flight.insert("calling:1".into(), 2);
        gate.met.insert("met:1".into());
        for (destination, expected) in [
            ("new:1", Some(1)),
            ("held:1", Some(0)),
            ("bounded:1", Some(3)),
            ("calling:1", None),
            ("met:1", None),
        ] {
            assert_eq!(gate.allowance(destination), expected, "{destination}");
        }
        gate.first_contact = None;
        assert_eq!(gate.allowance("new:1"), None);
    }
}
