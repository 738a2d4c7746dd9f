//! Flow keys: a name a task may carry (`flow_key`, say a customer account)
//! whose limits hold on every node and combine with its destination's (a
//! call needs both), and the unit of the fair share inside a destination.
//!
//! - A key is its tenant's: another tenant's key of the same name is
//!   another key ([`KeyRef`]). The SQL stores keep `''` for a task without
//!   one ([`stored_key`]), as they do for a tenant, so one index seeks a
//!   destination's due tasks by tenant and key alike.
//! - Its settings ([`FlowKeySettings`], changed by [`FlowKeyUpdate`]):
//!   `max_in_flight` counted by the store from its running tasks (on a
//!   shared database, across nodes) and `rate_per_s`/`burst`, a token
//!   bucket per key ([`crate::cluster::Bucket`], the destinations' rule)
//!   the store keeps beside the settings and charges in the claim.
//! - The claim's rule ([`KeyRoom`]): what each key may still give in one
//!   claim, across the destinations it meets; the share of one
//!   destination's (or tenant's) slots between its due keys is
//!   [`crate::share::FairShare`], each key weight 1, the tasks without a
//!   key one more key ([`NO_KEY`]).

use std::collections::BTreeMap;

use crate::Timestamp;
use crate::cluster::{Bucket, TokenAsk};
use crate::setting::InvalidSetting;

/// The longest flow key, in bytes.
pub const MAX_KEY_BYTES: usize = 128;

pub use crate::setting::{BURST_LIMIT, MAX_IN_FLIGHT_LIMIT};

/// The most keys [`crate::store::FlowKeys::flow_keys`] answers.
pub const FLOW_KEYS_LIMIT: usize = 1000;

/// The stored key of a task without one.
pub const NO_KEY: &str = "";

/// Why `key` is not a flow key (1 to [`MAX_KEY_BYTES`] printable ASCII
/// characters, space included), or `None`.
pub fn key_problem(key: &str) -> Option<String> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Some(format!(
            "must be 1 to {MAX_KEY_BYTES} characters, got {}",
            key.len()
        ));
    }
    if !key.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
        return Some("must be printable ASCII characters".into());
    }
    None
}

/// Checks a key as a path or a field names it (`field`).
pub fn check_key(field: &'static str, key: &str) -> Result<(), InvalidSetting> {
    match key_problem(key) {
        Some(message) => Err(InvalidSetting { field, message }),
        None => Ok(()),
    }
}

/// A task's key as stored: `''` for none.
pub fn stored_key(key: Option<&str>) -> &str {
    key.unwrap_or(NO_KEY)
}

/// A stored key column back as a task's key.
pub fn key_from_stored(stored: String) -> Option<String> {
    (!stored.is_empty()).then_some(stored)
}

/// One tenant's key: `tenant` as stored (`''` for the admin's keys,
/// [`crate::tenant::NO_TENANT`]) and the key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyRef {
    /// The tenant as stored.
    pub tenant: String,
    /// The key as stored ([`NO_KEY`] for tasks without one).
    pub key: String,
}

/// What a key's hold is named among the destinations' shared holds
/// ([`crate::store::Work::share_holds`]): no destination's name has a
/// space, so none is taken for a key's.
const HOLD_PREFIX: &str = "flow-key ";

impl KeyRef {
    /// The name the key's rate-limit hold is shared under (with the
    /// destinations' holds, [`crate::cluster::DestinationHolds`]), so that
    /// a hold one node learned from a downstream's headers holds the key on
    /// every node.
    pub fn hold_name(&self) -> String {
        format!("{HOLD_PREFIX}{} {}", self.tenant, self.key)
    }

    /// The key a shared hold's name stands for, or `None` for a
    /// destination's.
    pub fn from_hold_name(name: &str) -> Option<KeyRef> {
        let (tenant, key) = name.strip_prefix(HOLD_PREFIX)?.split_once(' ')?;
        Some(KeyRef {
            tenant: tenant.to_owned(),
            key: key.to_owned(),
        })
    }

    /// `key` of `tenant` (`None`: the admin's).
    pub fn new(tenant: Option<&str>, key: &str) -> KeyRef {
        KeyRef {
            tenant: crate::tenant::stored_tenant(tenant).to_owned(),
            key: key.to_owned(),
        }
    }
}

/// What an operator set for one key; the defaults hold nothing back.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FlowKeySettings {
    /// The most of its tasks running at once, on every node together.
    pub max_in_flight: Option<u32>,
    /// Calls per second, on every node together.
    pub rate_per_s: Option<f64>,
    /// The bucket's size (`None`: the rate rounded up, at least 1).
    pub burst: Option<u32>,
}

impl FlowKeySettings {
    /// The token bucket's size when a rate is set (the destinations' rule).
    pub fn bucket_size(&self) -> Option<f64> {
        let rate = self.rate_per_s?;
        Some(match self.burst {
            Some(burst) => f64::from(burst.max(1)),
            None => rate.ceil().max(1.0),
        })
    }

    /// Whether a claim must look at the key at all.
    pub fn limits_claims(&self) -> bool {
        self.max_in_flight.is_some() || self.rate_per_s.is_some()
    }
}

/// A change to a key's settings: `None` keeps a field, `Some(None)` clears
/// it (the API's `null`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FlowKeyUpdate {
    /// A new cap, or `Some(None)` to remove it.
    pub max_in_flight: Option<Option<u32>>,
    /// A new rate, or `Some(None)` to remove it.
    pub rate_per_s: Option<Option<f64>>,
    /// A new bucket size, or `Some(None)` for the default.
    pub burst: Option<Option<u32>>,
}

impl FlowKeyUpdate {
    /// Checks every given value's range; the refusal names the field.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        crate::setting::check_limits(self.max_in_flight, self.rate_per_s, self.burst)?;
        Ok(())
    }

    /// `settings` with this update applied.
    pub fn apply(&self, settings: &FlowKeySettings) -> FlowKeySettings {
        FlowKeySettings {
            max_in_flight: self.max_in_flight.unwrap_or(settings.max_in_flight),
            rate_per_s: self.rate_per_s.unwrap_or(settings.rate_per_s),
            burst: self.burst.unwrap_or(settings.burst),
        }
    }
}

/// A key as the store knows it: its settings and its tasks.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowKey {
    /// The key.
    pub key: String,
    /// Its settings.
    pub settings: FlowKeySettings,
    /// Its running tasks, on every node.
    pub in_flight: u64,
    /// Its pending tasks (due or not).
    pub pending: u64,
}

/// A key's state as one claim reads it: its settings, its running tasks
/// (every node's) and its bucket when it has a rate (`None`: first met).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct KeyState {
    /// Its settings (the defaults when it has none).
    pub settings: FlowKeySettings,
    /// Its running tasks.
    pub running: u64,
    /// Its bucket as stored.
    pub bucket: Option<Bucket>,
    /// Another claim holds the key now (a shared database's row lock, not
    /// waited for): this claim takes none of its tasks.
    pub held: bool,
}

/// What each key may still give in one claim, across every destination
/// the claim meets: its cap less its running tasks and this claim's takes,
/// and the whole tokens of its bucket refilled to `now`. The adapter reads
/// a key's [`KeyState`] when the claim first meets it
/// ([`KeyRoom::knows`]), asks [`KeyRoom::allowance`], reports takes with
/// [`KeyRoom::taken`], and at the end writes back each bucket
/// [`KeyRoom::buckets`] answers.
#[derive(Debug, Default)]
pub struct KeyRoom {
    now: Option<Timestamp>,
    /// Keys held now ([`crate::destination::ClaimGate::held_keys`]).
    held: std::collections::BTreeSet<KeyRef>,
    keys: BTreeMap<KeyRef, (KeyState, u64)>,
}

impl KeyRoom {
    /// Room for a claim at `now`.
    pub fn new(now: Timestamp) -> KeyRoom {
        KeyRoom {
            now: Some(now),
            held: std::collections::BTreeSet::new(),
            keys: BTreeMap::new(),
        }
    }

    /// The same room, giving nothing of the keys in `held` (a downstream
    /// said no calls are left; the worker passes them in its gate).
    pub fn holding(mut self, held: &std::collections::BTreeSet<KeyRef>) -> KeyRoom {
        self.held = held.clone();
        self
    }

    /// Whether `key`'s state was read already.
    pub fn knows(&self, key: &KeyRef) -> bool {
        key.key == NO_KEY || self.keys.contains_key(key)
    }

    /// Records `key`'s state, read once per claim.
    pub fn learn(&mut self, key: KeyRef, state: KeyState) {
        self.keys.entry(key).or_insert((state, 0));
    }

    fn ask(state: &KeyState, take: u32) -> Option<TokenAsk> {
        let size = state.settings.bucket_size()?;
        Some(TokenAsk {
            destination: String::new(),
            rate_per_s: state.settings.rate_per_s.unwrap_or(0.0),
            size,
            give_back: 0,
            take,
        })
    }

    /// The most tasks of `key` the claim may still take (`None`: no bound;
    /// the tasks without a key have none).
    pub fn allowance(&self, key: &KeyRef) -> Option<usize> {
        let now = self.now?;
        if self.held.contains(key) {
            return Some(0);
        }
        let (state, taken) = self.keys.get(key)?;
        if state.held {
            return Some(0);
        }
        let cap = state
            .settings
            .max_in_flight
            .map(|cap| u64::from(cap).saturating_sub(state.running.saturating_add(*taken)));
        let tokens = Self::ask(state, 0).map(|ask| {
            let bucket = state.bucket.unwrap_or_else(|| Bucket::full(ask.size, now));
            let (bucket, _) = bucket.settle(&ask, now);
            (bucket.tokens.floor().max(0.0) as u64).saturating_sub(*taken)
        });
        let room = match (cap, tokens) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        room.map(|r| usize::try_from(r).unwrap_or(usize::MAX))
    }

    /// Records that `n` tasks of `key` were claimed.
    pub fn taken(&mut self, key: &KeyRef, n: usize) {
        if let Some((_, taken)) = self.keys.get_mut(key) {
            *taken = taken.saturating_add(n as u64);
        }
    }

    /// The buckets to write back: each rated key the claim met, charged
    /// with its takes ([`Bucket::settle`]), so every node's claims together
    /// stay within the key's rate and burst.
    pub fn buckets(&self) -> Vec<(KeyRef, Bucket)> {
        let Some(now) = self.now else {
            return Vec::new();
        };
        self.keys
            .iter()
            .filter(|(_, (state, _))| !state.held)
            .filter_map(|(key, (state, taken))| {
                let ask = Self::ask(state, u32::try_from(*taken).unwrap_or(u32::MAX))?;
                let bucket = state.bucket.unwrap_or_else(|| Bucket::full(ask.size, now));
                Some((key.clone(), bucket.settle(&ask, now).0))
            })
            .collect()
    }

    /// The plan for `want` slots of one destination and tenant over its
    /// keys with due tasks (`due`, as stored), given `load` (each key's
    /// running tasks, with this claim's takes): max-min fair, each key
    /// within its [`KeyRoom::allowance`].
    pub fn plan(
        &self,
        want: usize,
        tenant: &str,
        due: Vec<String>,
        load: &BTreeMap<String, usize>,
    ) -> crate::share::FairShare {
        let candidates = due
            .into_iter()
            .map(|key| {
                let allowed = self.allowance(&KeyRef {
                    tenant: tenant.to_owned(),
                    key: key.clone(),
                });
                (key, allowed)
            })
            .collect();
        crate::share::FairShare::new(want, candidates, load)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        let check = |key: &str, ok: bool| assert_eq!(key_problem(key).is_none(), ok, "{key:?}");
        check("a", true);
        check("acct 42/x:y", true);
        check(&"k".repeat(128), true);
        check(&"k".repeat(129), false);
        check("", false);
        check("tab\there", false);
        check("é", false);
        check("\u{7f}", false);
        assert!(
            check_key("flow_key", "")
                .unwrap_err()
                .to_string()
                .starts_with("flow_key: ")
        );
    }

    #[test]
    fn updates_keep_what_they_leave_out_and_clear_on_null() {
        let set = FlowKeySettings {
            max_in_flight: Some(3),
            rate_per_s: Some(2.5),
            burst: Some(4),
        };
        let check = |update: FlowKeyUpdate, want: FlowKeySettings| {
            assert_eq!(update.apply(&set), want, "{update:?}");
        };
        check(FlowKeyUpdate::default(), set);
        check(
            FlowKeyUpdate {
                max_in_flight: Some(None),
                burst: Some(Some(9)),
                ..FlowKeyUpdate::default()
            },
            FlowKeySettings {
                max_in_flight: None,
                burst: Some(9),
                ..set
            },
        );
    }

    #[test]
    fn refusals_name_their_field() {
        let check = |update: FlowKeyUpdate, field: Option<&str>| {
            assert_eq!(
                update.validate().err().map(|e| e.field),
                field,
                "{update:?}"
            );
            if let Err(e) = update.validate() {
                assert!(e.to_string().starts_with(e.field));
            }
        };
        let cap = |n| FlowKeyUpdate {
            max_in_flight: Some(Some(n)),
            ..FlowKeyUpdate::default()
        };
        let rate = |r| FlowKeyUpdate {
            rate_per_s: Some(Some(r)),
            ..FlowKeyUpdate::default()
        };
        let burst = |n| FlowKeyUpdate {
            burst: Some(Some(n)),
            ..FlowKeyUpdate::default()
        };
        check(cap(1), None);
        check(cap(10_000), None);
        check(cap(0), Some("max_in_flight"));
        check(cap(10_001), Some("max_in_flight"));
        check(rate(0.01), None);
        check(rate(0.0), Some("rate_per_s"));
        check(rate(-1.0), Some("rate_per_s"));
        check(rate(f64::NAN), Some("rate_per_s"));
        check(burst(1), None);
        check(burst(1_000_000), None);
        check(burst(0), Some("burst"));
        check(burst(1_000_001), Some("burst"));
        check(
            FlowKeyUpdate {
                max_in_flight: Some(None),
                rate_per_s: Some(None),
                burst: Some(None),
            },
            None,
        );
    }

    /// Each row: a key's settings, running tasks and bucket tokens, the
    /// takes before, and the allowance.
    #[test]
    fn a_key_s_room_is_its_cap_and_its_tokens_less_this_claim_s_takes() {
        let now = Timestamp::from_millis(1_000_000);
        let check = |cap: Option<u32>,
                     rate: Option<f64>,
                     running: u64,
                     tokens: Option<f64>,
                     before: usize,
                     want: Option<usize>| {
            let key = KeyRef::new(Some("t"), "k");
            let mut room = KeyRoom::new(now);
            room.learn(
                key.clone(),
                KeyState {
                    settings: FlowKeySettings {
                        max_in_flight: cap,
                        rate_per_s: rate,
                        burst: Some(5),
                    },
                    running,
                    bucket: tokens.map(|tokens| Bucket { tokens, at: now }),
                    held: false,
                },
            );
            room.taken(&key, before);
            assert_eq!(room.allowance(&key), want, "{cap:?} {rate:?} {running}");
        };
        check(None, None, 7, None, 0, None);
        check(Some(3), None, 1, None, 0, Some(2));
        check(Some(3), None, 1, None, 2, Some(0));
        check(Some(3), None, 9, None, 0, Some(0));
        // A bucket first met is full (burst 5).
        check(None, Some(1.0), 0, None, 0, Some(5));
        check(None, Some(1.0), 0, Some(2.5), 0, Some(2));
        check(None, Some(1.0), 0, Some(2.5), 2, Some(0));
        check(Some(1), Some(1.0), 0, Some(4.0), 0, Some(1));
        // Another tenant's key of the same name is another key.
        let room = KeyRoom::new(now);
        assert_eq!(room.allowance(&KeyRef::new(Some("u"), "k")), None);
        assert!(room.knows(&KeyRef::new(None, NO_KEY)));
        // A held key gives nothing, whatever its settings.
        let held = std::collections::BTreeSet::from([KeyRef::new(Some("u"), "k")]);
        let room = KeyRoom::new(now).holding(&held);
        assert_eq!(room.allowance(&KeyRef::new(Some("u"), "k")), Some(0));
        assert_eq!(room.allowance(&KeyRef::new(None, "k")), None);
    }

    #[test]
    fn a_key_s_hold_name_reads_back_and_is_no_destination_s() {
        let check = |tenant: Option<&str>, key: &str| {
            let at = KeyRef::new(tenant, key);
            assert_eq!(KeyRef::from_hold_name(&at.hold_name()), Some(at.clone()));
            assert!(!crate::destination::is_destination_host(&at.hold_name()));
        };
        check(None, "k");
        check(Some("acme"), "a b c");
        check(None, " ");
        assert_eq!(KeyRef::from_hold_name("api.example.com:443"), None);
    }

    #[test]
    fn takes_are_charged_to_the_bucket() {
        let now = Timestamp::from_millis(1_000_000);
        let key = KeyRef::new(None, "k");
        let mut room = KeyRoom::new(now);
        room.learn(
            key.clone(),
            KeyState {
                settings: FlowKeySettings {
                    rate_per_s: Some(10.0),
                    burst: Some(5),
                    ..FlowKeySettings::default()
                },
                running: 0,
                bucket: None,
                held: false,
            },
        );
        room.taken(&key, 3);
        let buckets = room.buckets();
        assert_eq!(buckets.len(), 1);
        assert!((buckets[0].1.tokens - 2.0).abs() < 1e-9);
    }

    #[test]
    fn a_key_s_backlog_cannot_hold_another_key_s_tasks() {
        // Key "a" has 50 running, "b" none, the tasks without a key 1: the
        // one free slot goes to "b"; with 4 slots "b" and "" (one due task
        // each) take what they have and "a" the rest.
        let room = KeyRoom::new(Timestamp::from_millis(0));
        let load = BTreeMap::from([("a".to_owned(), 50), (NO_KEY.to_owned(), 1)]);
        let due = vec![NO_KEY.to_owned(), "a".to_owned(), "b".to_owned()];
        let mut plan = room.plan(1, "", due.clone(), &load);
        assert_eq!(plan.next_take(), Some(("b".into(), 1)));
        let mut plan = room.plan(4, "", due, &load);
        let mut got = Vec::new();
        while let Some((key, want)) = plan.next_take() {
            let n = if key == "a" { want } else { want.min(1) };
            plan.taken(n);
            got.push((key, n));
        }
        // A round's takes come in rotation order.
        assert_eq!(got, vec![("".into(), 1), ("b".into(), 1), ("a".into(), 2)]);
    }
}
