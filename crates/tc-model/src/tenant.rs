//! Tenants: the teams one server serves, kept apart. A tenant
//! has a name, a weight (its share of the workers' slots) and quotas on what
//! it submits; its API keys ([`key`]) reach only its own tasks ([`Scope`]).
//! The rules are here once: every adapter stores these records, the HTTP
//! layer scopes requests with [`Scope`], the claim shares slots with
//! [`TenantGate`].
//!
//! With no tenant defined nothing changes: tasks have no tenant, the admin
//! credential sees them all, the claim is tenant-blind.

pub mod acting;
pub mod key;
pub mod quota;

pub use acting::Acting;

use std::collections::BTreeMap;

use crate::setting::InvalidSetting;
use crate::signing::SigningSecrets;
use crate::store::StoreError;
use crate::{Task, Timestamp};

/// The longest tenant name, in bytes.
pub const MAX_NAME_BYTES: usize = 63;
/// The largest weight a tenant may be given.
pub const MAX_WEIGHT: u32 = 1000;
/// The largest token bucket a tenant's submit rate may have.
pub const MAX_SUBMIT_BURST: u32 = 1_000_000;
/// The highest submit rate a tenant may be given, per second.
pub const MAX_SUBMIT_RATE: f64 = 1_000_000.0;

/// Whether `name` is a tenant name: `[a-z0-9][a-z0-9_-]{0,62}`.
pub fn check_name(name: &str) -> Result<(), InvalidSetting> {
    let bytes = name.as_bytes();
    let first_ok = bytes
        .first()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let rest_ok = bytes
        .iter()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-');
    if first_ok && rest_ok && bytes.len() <= MAX_NAME_BYTES {
        Ok(())
    } else {
        Err(InvalidSetting {
            field: "name",
            message: format!(
                "must be 1 to {MAX_NAME_BYTES} characters of a-z, 0-9, '_' and '-', \
                 starting with a letter or digit"
            ),
        })
    }
}

/// What an operator sets for one tenant.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantSettings {
    /// Its share of the worker slots against other tenants with due tasks
    /// (1..=[`MAX_WEIGHT`]).
    pub weight: u32,
    /// The most tasks it may have not yet terminal (`None`: no limit).
    pub max_pending: Option<u64>,
    /// Submits per second, refilled continuously (`None`: no limit).
    pub submit_rate_per_s: Option<f64>,
    /// The submit bucket's size (`None`: the rate rounded up, at least 1).
    pub submit_burst: Option<u32>,
    /// The Standard Webhooks secrets its tasks are signed with, unless a
    /// destination shared with it signs them with its own
    /// ([`crate::outbound`]); none: unsigned (never the server's).
    /// Write-only: views show how many.
    pub signing_secrets: SigningSecrets,
}

impl Default for TenantSettings {
    fn default() -> Self {
        TenantSettings {
            weight: 1,
            max_pending: None,
            submit_rate_per_s: None,
            submit_burst: None,
            signing_secrets: SigningSecrets::default(),
        }
    }
}

impl TenantSettings {
    /// The submit bucket's size when a rate is set.
    pub fn bucket_size(&self) -> Option<f64> {
        let rate = self.submit_rate_per_s?;
        Some(match self.submit_burst {
            Some(burst) => f64::from(burst.max(1)),
            None => rate.ceil().max(1.0),
        })
    }
}

/// A change to a tenant's settings: `None` leaves a field as it is; for
/// the nullable fields `Some(None)` clears it. A new tenant's settings are
/// the defaults with its creation's update applied.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TenantUpdate {
    /// A new weight.
    pub weight: Option<u32>,
    /// A new pending limit, or `Some(None)` to remove it.
    pub max_pending: Option<Option<u64>>,
    /// A new submit rate, or `Some(None)` to remove it.
    pub submit_rate_per_s: Option<Option<f64>>,
    /// A new bucket size, or `Some(None)` for the default.
    pub submit_burst: Option<Option<u32>>,
    /// New signing secrets, replacing the old ones (empty: none).
    pub signing_secrets: Option<SigningSecrets>,
}

impl TenantUpdate {
    /// Checks every given value's range; the error names the field.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if let Some(weight) = self.weight
            && !(1..=MAX_WEIGHT).contains(&weight)
        {
            return Err(InvalidSetting {
                field: "weight",
                message: format!("must be between 1 and {MAX_WEIGHT}"),
            });
        }
        if let Some(Some(0)) = self.max_pending {
            return Err(InvalidSetting {
                field: "max_pending",
                message: "must be at least 1, or null".into(),
            });
        }
        if let Some(Some(rate)) = self.submit_rate_per_s
            && !(rate.is_finite() && rate > 0.0 && rate <= MAX_SUBMIT_RATE)
        {
            return Err(InvalidSetting {
                field: "submit_rate_per_s",
                message: format!("must be a number above 0 and at most {MAX_SUBMIT_RATE}, or null"),
            });
        }
        if let Some(Some(burst)) = self.submit_burst
            && !(1..=MAX_SUBMIT_BURST).contains(&burst)
        {
            return Err(InvalidSetting {
                field: "submit_burst",
                message: format!("must be between 1 and {MAX_SUBMIT_BURST}, or null"),
            });
        }
        Ok(())
    }

    /// `settings` with this update applied.
    pub fn apply(&self, settings: &TenantSettings) -> TenantSettings {
        TenantSettings {
            weight: self.weight.unwrap_or(settings.weight),
            max_pending: self.max_pending.unwrap_or(settings.max_pending),
            submit_rate_per_s: self.submit_rate_per_s.unwrap_or(settings.submit_rate_per_s),
            submit_burst: self.submit_burst.unwrap_or(settings.submit_burst),
            signing_secrets: self
                .signing_secrets
                .clone()
                .unwrap_or_else(|| settings.signing_secrets.clone()),
        }
    }
}

/// A stored tenant.
#[derive(Debug, Clone, PartialEq)]
pub struct Tenant {
    /// Its name, checked by [`check_name`]; unique.
    pub name: String,
    /// Its settings.
    pub settings: TenantSettings,
    /// When it was created.
    pub created_at: Timestamp,
    /// When its settings last changed.
    pub updated_at: Timestamp,
}

/// A tenant as the API shows it: with its task counts and its keys.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantDetail {
    /// The tenant.
    pub tenant: Tenant,
    /// Its pending tasks (due or not).
    pub pending: u64,
    /// Its running tasks, on every node.
    pub running: u64,
    /// Its live keys, oldest first (never the secrets).
    pub keys: Vec<key::ApiKey>,
}

/// Whose request it is: the admin credential (or no credential where the
/// server has none) sees every task; a tenant's key only its own. Another
/// tenant's task is answered as unknown, never as forbidden: a key must
/// not learn that an id exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every task, every route.
    Admin,
    /// The named tenant's tasks; no admin route.
    Tenant(String),
}

impl Scope {
    /// Whether a request in this scope may see `task`.
    pub fn sees(&self, task: &Task) -> bool {
        self.owns(task.tenant.as_deref())
    }

    /// Whether a request in this scope may see a task of `tenant` (`None`:
    /// the admin's own task): what a store checks on a task it read by id
    /// before it answers or changes it.
    pub fn owns(&self, tenant: Option<&str>) -> bool {
        match self {
            Scope::Admin => true,
            Scope::Tenant(name) => tenant == Some(name.as_str()),
        }
    }

    /// [`Scope::owns`] of a tenant column as the SQL adapters store it
    /// (`''` for none, [`stored_tenant`]).
    pub fn owns_stored(&self, stored: &str) -> bool {
        self.owns((!stored.is_empty()).then_some(stored))
    }

    /// `task` if this scope sees it, else [`StoreError::NotFound`]: a
    /// store's answer to a read by id.
    pub fn seen(&self, task: Task) -> Result<Task, StoreError> {
        if self.sees(&task) {
            Ok(task)
        } else {
            Err(StoreError::NotFound)
        }
    }

    /// The tenant new tasks submitted in this scope belong to.
    pub fn tenant(&self) -> Option<&str> {
        match self {
            Scope::Admin => None,
            Scope::Tenant(name) => Some(name),
        }
    }

    /// Whether this is the admin scope (the routes that manage the server:
    /// tenants, destinations, schedules, backups).
    pub fn is_admin(&self) -> bool {
        matches!(self, Scope::Admin)
    }
}

/// The tenant a task without one counts as in the claim's share (the
/// admin's own tasks): weight 1, like a tenant left at the default.
pub const NO_TENANT: &str = "";

/// The claim's tenant share, given by the worker when tenants exist
/// (`None` in [`crate::destination::ClaimGate::tenants`]: the claim is
/// tenant-blind, exactly as before tenants). Inside each destination's
/// share ([`crate::share::FairShare`]) the slots go to the tenants
/// with due tasks there by [`crate::share::FairShare::weighted`]:
/// each to the tenant whose calls in flight on this node per weight are
/// fewest, counting what this claim already gave it. A tenant with a
/// backlog cannot take another's share, and takes every slot the others
/// leave.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantGate {
    /// Each tenant's weight ([`NO_TENANT`] and unknown tenants: 1).
    pub weights: BTreeMap<String, u32>,
    /// The claiming node's calls in flight, by tenant ([`NO_TENANT`] for
    /// tasks without one).
    pub in_flight: BTreeMap<String, usize>,
}

impl TenantGate {
    /// `tenant`'s weight.
    pub fn weight(&self, tenant: &str) -> u32 {
        self.weights.get(tenant).copied().unwrap_or(1)
    }

    /// The plan for `want` slots of one destination over the tenants with
    /// due tasks there (`due`, as stored: [`NO_TENANT`] for none), given
    /// `load`: the node's calls in flight by tenant with this claim's takes
    /// so far added (start from [`TenantGate::in_flight`]; add each take).
    pub fn plan(
        &self,
        want: usize,
        due: Vec<String>,
        load: &BTreeMap<String, usize>,
    ) -> crate::share::FairShare {
        let candidates = due
            .into_iter()
            .map(|tenant| {
                let weight = self.weight(&tenant);
                (tenant, None, weight)
            })
            .collect();
        crate::share::FairShare::weighted(want, candidates, load)
    }
}

/// A task's tenant as stored: the SQL adapters keep `''` for none, so that
/// the idempotency key is unique per tenant with one plain unique index.
pub fn stored_tenant(tenant: Option<&str>) -> &str {
    tenant.unwrap_or(NO_TENANT)
}

/// A stored tenant column back as a task's tenant.
pub fn tenant_from_stored(stored: String) -> Option<String> {
    (!stored.is_empty()).then_some(stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_name_case(name: &str, ok: bool) {
        assert_eq!(check_name(name).is_ok(), ok, "{name:?}");
    }

    #[test]
    fn names() {
        check_name_case("a", true);
        check_name_case("team-1_x", true);
        check_name_case("0abc", true);
        check_name_case(&"a".repeat(63), true);
        check_name_case(&"a".repeat(64), false);
        check_name_case("", false);
        check_name_case("-a", false);
        check_name_case("_a", false);
        check_name_case("A", false);
        check_name_case("a b", false);
        check_name_case("a.b", false);
        check_name_case("é", false);
    }

    fn check_update(update: TenantUpdate, field: Option<&str>) {
        assert_eq!(
            update.validate().err().map(|e| e.field),
            field,
            "{update:?}"
        );
    }

    #[test]
    fn settings_ranges() {
        let u = TenantUpdate::default;
        check_update(u(), None);
        check_update(
            TenantUpdate {
                weight: Some(1),
                ..u()
            },
            None,
        );
        check_update(
            TenantUpdate {
                weight: Some(1000),
                ..u()
            },
            None,
        );
        check_update(
            TenantUpdate {
                weight: Some(0),
                ..u()
            },
            Some("weight"),
        );
        check_update(
            TenantUpdate {
                weight: Some(1001),
                ..u()
            },
            Some("weight"),
        );
        check_update(
            TenantUpdate {
                max_pending: Some(Some(0)),
                ..u()
            },
            Some("max_pending"),
        );
        check_update(
            TenantUpdate {
                max_pending: Some(None),
                ..u()
            },
            None,
        );
        check_update(
            TenantUpdate {
                submit_rate_per_s: Some(Some(0.0)),
                ..u()
            },
            Some("submit_rate_per_s"),
        );
        check_update(
            TenantUpdate {
                submit_rate_per_s: Some(Some(f64::NAN)),
                ..u()
            },
            Some("submit_rate_per_s"),
        );
        check_update(
            TenantUpdate {
                submit_rate_per_s: Some(Some(0.5)),
                ..u()
            },
            None,
        );
        check_update(
            TenantUpdate {
                submit_burst: Some(Some(0)),
                ..u()
            },
            Some("submit_burst"),
        );
        check_update(
            TenantUpdate {
                submit_burst: Some(Some(5)),
                ..u()
            },
            None,
        );
    }

    #[test]
    fn an_update_changes_only_what_it_names() {
        let before = TenantSettings {
            weight: 3,
            max_pending: Some(10),
            submit_rate_per_s: Some(2.5),
            submit_burst: None,
            signing_secrets: SigningSecrets::default(),
        };
        let secrets = SigningSecrets::parse(&["whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"]).unwrap();
        let after = TenantUpdate {
            max_pending: Some(None),
            submit_burst: Some(Some(7)),
            signing_secrets: Some(secrets.clone()),
            ..TenantUpdate::default()
        }
        .apply(&before);
        assert_eq!(
            after,
            TenantSettings {
                weight: 3,
                max_pending: None,
                submit_rate_per_s: Some(2.5),
                submit_burst: Some(7),
                signing_secrets: secrets,
            }
        );
        assert_eq!(before.bucket_size(), Some(3.0));
        assert_eq!(after.bucket_size(), Some(7.0));
    }

    #[test]
    fn the_tenant_share_follows_the_weights() {
        // Tenant "a" (weight 3) and "b" (weight 1) both have a backlog on one
        // destination; 8 slots, nothing in flight: 6 to "a", 2 to "b".
        let gate = TenantGate {
            weights: BTreeMap::from([("a".to_owned(), 3), ("b".to_owned(), 1)]),
            in_flight: BTreeMap::new(),
        };
        let mut plan = gate.plan(8, vec!["a".into(), "b".into()], &gate.in_flight);
        let mut got: BTreeMap<String, usize> = BTreeMap::new();
        while let Some((tenant, want)) = plan.next_take() {
            plan.taken(want);
            *got.entry(tenant).or_default() += want;
        }
        assert_eq!(
            got,
            BTreeMap::from([("a".to_owned(), 6), ("b".to_owned(), 2)])
        );
    }

    #[test]
    fn a_backlog_cannot_take_a_light_tenant_s_slot() {
        // "a" has 60 calls in flight on this node, "b" none: the one free
        // slot goes to "b" although "a" has far more due tasks; "b"'s one
        // due task leaves the other slots to "a".
        let gate = TenantGate {
            weights: BTreeMap::new(),
            in_flight: BTreeMap::from([("a".to_owned(), 60)]),
        };
        let mut plan = gate.plan(1, vec!["a".into(), "b".into()], &gate.in_flight);
        assert_eq!(plan.next_take(), Some(("b".into(), 1)));
        let mut plan = gate.plan(4, vec!["a".into(), "b".into()], &gate.in_flight);
        let mut got = Vec::new();
        while let Some((tenant, want)) = plan.next_take() {
            let n = if tenant == "b" { want.min(1) } else { want };
            plan.taken(n);
            got.push((tenant, n));
        }
        assert_eq!(got, vec![("b".into(), 1), ("a".into(), 3)]);
    }

    #[test]
    fn scopes() {
        let new = crate::NewTask::new(
            "http://a.test/x".into(),
            b"{}".to_vec(),
            "k".into(),
            3,
            std::time::Duration::from_secs(1),
            &crate::Limits::default(),
        )
        .unwrap()
        .with_tenant(Some("a".into()), None);
        let at = Timestamp::from_millis(5);
        let mut task = Task::submitted(crate::TaskId::new(at, [2; 10]), &new, at);
        assert_eq!(task.tenant.as_deref(), Some("a"));
        assert!(Scope::Admin.sees(&task));
        assert!(Scope::Tenant("a".into()).sees(&task));
        assert!(!Scope::Tenant("b".into()).sees(&task));
        task.tenant = None;
        assert!(!Scope::Tenant("a".into()).sees(&task));
        let f = crate::store::TaskFilter {
            tenant: Some("b".into()),
            ..crate::store::TaskFilter::default()
        }
        .within(&Scope::Tenant("a".into()));
        assert_eq!(f.tenant.as_deref(), Some("a"));
        let all = crate::store::TaskFilter::default().within(&Scope::Admin);
        assert_eq!(all.tenant, None);
    }
}
