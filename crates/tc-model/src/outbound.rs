//! Whose credentials a call carries: the one rule that
//! picks, for a task's try, the destination headers it sends and the
//! secrets it is signed with ([`outbound_for`]), and the destination
//! setting that lends a destination's credentials to tenants
//! ([`SharedWith`]).
//!
//! The rule, for a task **without a tenant** (the admin's), is the one from
//! before tenants: its destination's headers, signed with its destination's
//! secrets, or the server's own (`--signing-secret`) when it has none.
//!
//! For a task **of a tenant** nothing the tenant does not own reaches the
//! wire unless the operator lent it:
//! - its destination's `headers` and `signing_secrets` apply only when the
//!   destination lists the tenant in `share_with_tenants` (or lists `"*"`);
//! - it is signed with its destination's secrets when those apply and the
//!   destination has some, else with the tenant's own `signing_secrets`,
//!   else not at all;
//! - never with the server's own secrets: those are the operator's, and a
//!   tenant could otherwise make the server vouch for any body to any
//!   receiver.
//!
//! A **topic's task** whose subscription has `signing_secrets`
//! is signed with those, whoever's it is: the subscriber set them for its
//! own calls. Without them it is signed as any task, by the rule above.
//!
//! A callback task belongs to its parent's tenant ([`crate::callback`]), so
//! the same rule covers it. A tenant the worker does not know (deleted, or
//! created since its last read) has no secrets: its tasks go unsigned.

use crate::auth::DestinationAuth;
use crate::destination::DestinationSettings;
use crate::headers::Headers;
use crate::setting::InvalidSetting;
use crate::signing::SigningSecrets;
use crate::tenant::check_name;

/// The entry of `share_with_tenants` that lends to every tenant.
pub const EVERY_TENANT: &str = "*";

/// The most names `share_with_tenants` may list.
pub const MAX_SHARED_WITH: usize = 256;

/// The tenants a destination lends its `headers` and `signing_secrets` to:
/// none (the default), some by name, or every one (`["*"]`). Kept sorted
/// and without repeats, so that equal lists compare equal.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SharedWith(Vec<String>);

impl SharedWith {
    /// Checks a list as the API gives it: each entry a tenant name
    /// ([`check_name`]) or exactly `"*"`, which then stands alone; at most
    /// [`MAX_SHARED_WITH`] entries. The error names the field
    /// `share_with_tenants`.
    pub fn parse<S: AsRef<str>>(names: &[S]) -> Result<SharedWith, InvalidSetting> {
        let invalid = |message: String| InvalidSetting {
            field: "share_with_tenants",
            message,
        };
        if names.len() > MAX_SHARED_WITH {
            return Err(invalid(format!(
                "at most {MAX_SHARED_WITH} tenants, got {}",
                names.len()
            )));
        }
        let mut list = Vec::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            let name = name.as_ref();
            if name != EVERY_TENANT && check_name(name).is_err() {
                return Err(invalid(format!(
                    "entry {} is not a tenant name (1 to {} characters of a-z, 0-9, '_' and '-', \
                     starting with a letter or digit) nor \"*\"",
                    i + 1,
                    crate::tenant::MAX_NAME_BYTES
                )));
            }
            list.push(name.to_owned());
        }
        list.sort();
        list.dedup();
        if list.len() > 1 && list.iter().any(|n| n == EVERY_TENANT) {
            return Err(invalid(
                "\"*\" (every tenant) stands alone: give [\"*\"] or names".into(),
            ));
        }
        Ok(SharedWith(list))
    }

    /// Whether the destination's credentials apply to `tenant`'s tasks.
    pub fn includes(&self, tenant: &str) -> bool {
        self.0.iter().any(|n| n == EVERY_TENANT || n == tenant)
    }

    /// Whether it lends to no tenant.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The entries, sorted (`"*"` alone when it lends to every tenant).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }

    /// The text the stores keep: the entries separated by a space (no
    /// entry has one); `None` for none (a NULL column).
    pub fn to_stored(&self) -> Option<String> {
        (!self.0.is_empty()).then(|| self.0.join(" "))
    }

    /// The list [`SharedWith::to_stored`] wrote (`None`: none); `Err` for
    /// text it never writes.
    pub fn from_stored(text: Option<&str>) -> Result<SharedWith, InvalidSetting> {
        match text {
            None => Ok(SharedWith::default()),
            Some(text) => SharedWith::parse(&text.split(' ').collect::<Vec<_>>()),
        }
    }
}

/// What [`outbound_for`] decides from.
#[derive(Debug, Clone, Copy)]
pub struct OutboundInputs<'a> {
    /// The task's tenant (`None`: the admin's task).
    pub task_tenant: Option<&'a str>,
    /// Its destination's settings, when it has any.
    pub destination: Option<&'a DestinationSettings>,
    /// The tenant's own signing secrets, as the worker last read them
    /// (`None`: an unknown tenant, or a task without one).
    pub tenant_secrets: Option<&'a SigningSecrets>,
    /// The server's own secrets (`--signing-secret`).
    pub server_secrets: &'a SigningSecrets,
    /// The secrets of the subscription whose task this is (a topic's
    /// task), as the worker last read them; `None` for any other task.
    pub subscription_secrets: Option<&'a SigningSecrets>,
}

/// The credentials one call carries: the destination headers it sends
/// (the task's own headers of the same name win over them) and the secrets
/// it is signed with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Credentials<'a> {
    /// The destination's headers, when they apply.
    pub headers: Option<&'a Headers>,
    /// The secrets that sign the call; `None`: it is not signed.
    pub secrets: Option<&'a SigningSecrets>,
    /// The destination's `auth`, when it applies: to a tenant's
    /// task as its headers do (when shared), except a JWT, which is the
    /// server's own word and names the tenant (`sub`), so it applies to
    /// every task.
    pub auth: Option<&'a DestinationAuth>,
}

/// The rule of this module: which destination headers a try sends and
/// which secrets sign it.
pub fn outbound_for<'a>(inputs: OutboundInputs<'a>) -> Credentials<'a> {
    let non_empty = |s: &'a SigningSecrets| (!s.is_empty()).then_some(s);
    let destination_secrets = inputs
        .destination
        .and_then(|d| non_empty(&d.signing_secrets));
    let destination_headers = inputs
        .destination
        .map(|d| &d.headers)
        .filter(|h| !h.is_empty());
    let auth = inputs.destination.and_then(|d| d.auth.as_ref());
    let mut credentials = by_tenant(inputs, destination_headers, destination_secrets, auth);
    if let Some(own) = inputs.subscription_secrets.and_then(non_empty) {
        credentials.secrets = Some(own);
    }
    credentials
}

/// [`outbound_for`] for any task, a topic's own secrets apart.
fn by_tenant<'a>(
    inputs: OutboundInputs<'a>,
    destination_headers: Option<&'a Headers>,
    destination_secrets: Option<&'a SigningSecrets>,
    auth: Option<&'a DestinationAuth>,
) -> Credentials<'a> {
    let non_empty = |s: &'a SigningSecrets| (!s.is_empty()).then_some(s);
    match inputs.task_tenant {
        None => Credentials {
            headers: destination_headers,
            secrets: destination_secrets.or_else(|| non_empty(inputs.server_secrets)),
            auth,
        },
        Some(tenant) => {
            let tenant_secrets = inputs.tenant_secrets.and_then(non_empty);
            let shared = inputs
                .destination
                .is_some_and(|d| d.share_with_tenants.includes(tenant));
            if shared {
                Credentials {
                    headers: destination_headers,
                    secrets: destination_secrets.or(tenant_secrets),
                    auth,
                }
            } else {
                Credentials {
                    headers: None,
                    secrets: tenant_secrets,
                    auth: auth.filter(|a| matches!(a, DestinationAuth::Jwt(_))),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signing::SigningSecret;

    /// Secrets of one 24-byte key, every base64 character the `n`th letter.
    fn secrets(n: u8) -> SigningSecrets {
        let encoded: String = std::iter::repeat_n(char::from(b'A' + n), 32).collect();
        let text = format!("whsec_{encoded}");
        assert!(SigningSecret::parse(&text).is_ok());
        SigningSecrets::parse(&[text]).unwrap()
    }

    fn shared(names: &[&str]) -> SharedWith {
        SharedWith::parse(names).unwrap()
    }

    /// Where a call's headers and signature come from, as a row states it.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Signer {
        Destination,
        Tenant,
        Server,
        Unsigned,
    }

    /// One row: the task's tenant; the destination (`None`: no settings;
    /// else its secrets?, and whom it shares with); whether the tenant and
    /// the server have secrets; expected: destination headers sent?, signer.
    type Row<'a> = (
        &'a str,
        Option<&'a str>,
        Option<(bool, &'a [&'a str])>,
        bool,
        bool,
        bool,
        Signer,
    );

    fn check(row: &Row) {
        let (case, tenant, destination, tenant_has, server_has, want_headers, want_signer) = *row;
        let dest_secrets = secrets(1);
        let tenant_secrets = secrets(2);
        let server_secrets = secrets(3);
        let none = SigningSecrets::default();
        let settings = destination.map(|(has_secrets, share)| DestinationSettings {
            headers: Headers::parse([("authorization".to_owned(), "Bearer op".to_owned())])
                .unwrap(),
            signing_secrets: if has_secrets {
                dest_secrets.clone()
            } else {
                SigningSecrets::default()
            },
            share_with_tenants: shared(share),
            ..DestinationSettings::default()
        });
        let got = outbound_for(OutboundInputs {
            task_tenant: tenant,
            destination: settings.as_ref(),
            tenant_secrets: tenant_has.then_some(&tenant_secrets),
            server_secrets: if server_has { &server_secrets } else { &none },
            subscription_secrets: None,
        });
        let signer = match got.secrets {
            None => Signer::Unsigned,
            Some(s) if *s == dest_secrets => Signer::Destination,
            Some(s) if *s == tenant_secrets => Signer::Tenant,
            Some(s) if *s == server_secrets => Signer::Server,
            Some(_) => panic!("{case}: signed with secrets from nowhere"),
        };
        assert_eq!(
            (got.headers.is_some(), signer),
            (want_headers, want_signer),
            "{case}"
        );
    }

    #[test]
    fn whose_credentials_a_call_carries() {
        use Signer::*;
        let rows: &[Row] = &[
            // Tasks without a tenant: as before tenants.
            (
                "admin, destination signs",
                None,
                Some((true, &[])),
                false,
                true,
                true,
                Destination,
            ),
            (
                "admin, server signs",
                None,
                Some((false, &[])),
                false,
                true,
                true,
                Server,
            ),
            ("admin, no settings", None, None, false, true, false, Server),
            (
                "admin, nobody signs",
                None,
                None,
                false,
                false,
                false,
                Unsigned,
            ),
            // A tenant's task to a destination that does not share.
            (
                "not shared",
                Some("t"),
                Some((true, &[])),
                false,
                true,
                false,
                Unsigned,
            ),
            (
                "not shared, tenant signs",
                Some("t"),
                Some((true, &[])),
                true,
                true,
                false,
                Tenant,
            ),
            (
                "shared with another",
                Some("t"),
                Some((true, &["u"])),
                true,
                true,
                false,
                Tenant,
            ),
            (
                "no settings, tenant signs",
                Some("t"),
                None,
                true,
                true,
                false,
                Tenant,
            ),
            (
                "no settings, never the server",
                Some("t"),
                None,
                false,
                true,
                false,
                Unsigned,
            ),
            // Shared by name or with every tenant.
            (
                "shared by name",
                Some("t"),
                Some((true, &["t"])),
                true,
                true,
                true,
                Destination,
            ),
            (
                "shared with all",
                Some("t"),
                Some((true, &["*"])),
                false,
                true,
                true,
                Destination,
            ),
            (
                "shared, tenant signs",
                Some("t"),
                Some((false, &["t"])),
                true,
                true,
                true,
                Tenant,
            ),
            (
                "shared, never the server",
                Some("t"),
                Some((false, &["*"])),
                false,
                true,
                true,
                Unsigned,
            ),
        ];
        for row in rows {
            check(row);
        }
    }

    #[test]
    fn a_subscriptions_own_secrets_sign_its_tasks_else_the_rule_does() {
        let dest = DestinationSettings {
            signing_secrets: secrets(1),
            ..DestinationSettings::default()
        };
        let (tenant, server, own, none) = (
            secrets(2),
            secrets(3),
            secrets(4),
            SigningSecrets::default(),
        );
        // (case, task's tenant, the subscription's secrets, expected signer)
        type SubRow<'a> = (
            &'a str,
            Option<&'a str>,
            Option<&'a SigningSecrets>,
            Option<&'a SigningSecrets>,
        );
        let rows: [SubRow; 5] = [
            ("admin's, own", None, Some(&own), Some(&own)),
            ("tenant's, own", Some("t"), Some(&own), Some(&own)),
            (
                "admin's, none of its own",
                None,
                Some(&none),
                Some(&dest.signing_secrets),
            ),
            (
                "tenant's, none of its own",
                Some("t"),
                Some(&none),
                Some(&tenant),
            ),
            (
                "not a topic's task",
                None,
                None,
                Some(&dest.signing_secrets),
            ),
        ];
        for (case, task_tenant, subscription_secrets, want) in rows {
            let got = outbound_for(OutboundInputs {
                task_tenant,
                destination: Some(&dest),
                tenant_secrets: Some(&tenant),
                server_secrets: &server,
                subscription_secrets,
            });
            assert_eq!(got.secrets, want, "{case}");
        }
    }

    #[test]
    fn share_lists_parse_or_name_the_field() {
        let ok = |names: &[&str], want: &[&str]| {
            let got = SharedWith::parse(names).unwrap();
            assert_eq!(got.names().collect::<Vec<_>>(), want, "{names:?}");
            assert_eq!(SharedWith::from_stored(got.to_stored().as_deref()), Ok(got));
        };
        ok(&[], &[]);
        ok(&["b", "a", "b"], &["a", "b"]);
        ok(&["*"], &["*"]);
        ok(&["*", "*"], &["*"]);
        let refused = |names: &[&str]| {
            let e = SharedWith::parse(names).unwrap_err();
            assert_eq!(e.field, "share_with_tenants", "{names:?}");
        };
        refused(&["A"]);
        refused(&[""]);
        refused(&["a b"]);
        refused(&["*", "a"]);
        refused(&["**"]);
        let many: Vec<String> = (0..=MAX_SHARED_WITH).map(|i| format!("t{i}")).collect();
        refused(&many.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(SharedWith::default().to_stored(), None);
        assert!(SharedWith::from_stored(Some("a  b")).is_err());
        assert!(shared(&["*"]).includes("anyone"));
        assert!(shared(&["a", "t"]).includes("t"));
        assert!(!shared(&["a"]).includes("t"));
        assert!(!SharedWith::default().includes("t"));
    }

    #[test]
    fn auth_goes_with_the_headers_but_a_jwt_to_every_task() {
        let auth = |v: serde_json::Value| crate::auth::DestinationAuth::from_json(&v).unwrap();
        let basic = auth(serde_json::json!({"type": "basic", "username": "u", "password": "p"}));
        let jwt = auth(serde_json::json!({"type": "jwt", "audience": "a"}));
        // (case, auth, shared with, task's tenant, applies)
        let rows = [
            ("basic, no tenant", &basic, &[][..], None, true),
            (
                "basic, tenant not shared",
                &basic,
                &[][..],
                Some("t"),
                false,
            ),
            ("basic, tenant shared", &basic, &["t"][..], Some("t"), true),
            ("jwt, no tenant", &jwt, &[][..], None, true),
            ("jwt, tenant not shared", &jwt, &[][..], Some("t"), true),
        ];
        for (case, auth, share, tenant, applies) in rows {
            let settings = DestinationSettings {
                auth: auth.clone(),
                share_with_tenants: shared(share),
                ..DestinationSettings::default()
            };
            let none = SigningSecrets::default();
            let got = outbound_for(OutboundInputs {
                task_tenant: tenant,
                destination: Some(&settings),
                tenant_secrets: None,
                server_secrets: &none,
                subscription_secrets: None,
            });
            assert_eq!(got.auth.is_some(), applies, "{case}");
        }
    }
}
