//! What a try sends: the task, the credentials [`tc_model::outbound`]'s
//! rule gives it (its destination's headers and signing secrets, its
//! tenant's own secrets, the server's, a topic subscription's), and the worker's clock, mapped to
//! tc-downstream's plain delivery inputs ([`tc_downstream::DeliverySpec`]),
//! which builds and signs the request.
//!
//! The destinations' and tenants' settings come from the reads the worker
//! makes every second ([`crate::config::WorkerConfig::settings_interval`]). A change
//! made through this process must reach the very next claim (an operator
//! sets a bearer token, then submits): [`Outbound::changed`] marks the copy
//! stale at once, and the claim loop reads the settings again before it
//! claims while it is ([`Outbound::stale`]). Another node on a shared
//! database sees a change within its settings interval.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use tc_downstream::{ClientTls, Delivery, DeliverySpec, TraceHeaders};
use tc_model::auth::DestinationAuth;
use tc_model::destination::DestinationSettings;
use tc_model::headers::Headers;
use tc_model::outbound::{OutboundInputs, outbound_for};
use tc_model::signing::SigningSecrets;
use tc_model::tenant::TenantSettings;
use tc_model::{Task, Timestamp, TraceContext};

/// The worker's copy of every destination's credentials (and whom it
/// shares them with), every tenant's own secrets, and the server's own
/// secrets.
pub(crate) struct Outbound {
    /// The destinations with headers or secrets.
    by_destination: Mutex<HashMap<String, DestinationSettings>>,
    /// The destinations with TLS settings (a client certificate, CAs of
    /// their own): every call to one carries them, whoever's task it is
    /// (they are its connection's, not a credential a task is lent).
    tls: Mutex<HashMap<String, Arc<ClientTls>>>,
    /// The tenants with secrets.
    by_tenant: Mutex<HashMap<String, SigningSecrets>>,
    /// The topics' subscriptions with secrets, by id.
    by_subscription: Mutex<HashMap<String, SigningSecrets>>,
    default_secrets: SigningSecrets,
    /// Changes announced ([`Outbound::changed`]).
    asked: AtomicU64,
    /// The announcements the copy has caught up with: a read that began
    /// after them was applied.
    seen: AtomicU64,
}

impl Outbound {
    /// No settings yet; `default_secrets` sign the calls of tasks without a
    /// tenant to destinations that have none of their own.
    pub(crate) fn new(default_secrets: SigningSecrets) -> Outbound {
        Outbound {
            by_destination: Mutex::default(),
            tls: Mutex::default(),
            by_tenant: Mutex::default(),
            by_subscription: Mutex::default(),
            default_secrets,
            asked: AtomicU64::new(0),
            seen: AtomicU64::new(0),
        }
    }

    /// A destination's or a tenant's settings changed in the store: the
    /// copy is stale until a read that begins after this is applied.
    pub(crate) fn changed(&self) {
        self.asked.fetch_add(1, Ordering::SeqCst);
    }

    /// Whether a change was announced that no applied read covers yet.
    pub(crate) fn stale(&self) -> bool {
        self.seen.load(Ordering::SeqCst) < self.asked.load(Ordering::SeqCst)
    }

    /// Taken just before reading the settings, and handed back to
    /// [`Outbound::caught_up`] once what was read is kept.
    pub(crate) fn read_begins(&self) -> u64 {
        self.asked.load(Ordering::SeqCst)
    }

    /// Keeps the credentials of the destinations in `settings`.
    pub(crate) fn set_destinations(&self, settings: &[(String, DestinationSettings)]) {
        let copy = settings
            .iter()
            .filter(|(_, s)| {
                !s.headers.is_empty() || !s.signing_secrets.is_empty() || s.auth.is_some()
            })
            .map(|(name, s)| (name.clone(), s.clone()))
            .collect();
        *self
            .by_destination
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = copy;
        let tls = settings
            .iter()
            .filter(|(_, s)| s.client_tls.is_some() || s.ca_certs.is_some())
            .map(|(name, s)| {
                let tls = ClientTls {
                    identity: s
                        .client_tls
                        .as_ref()
                        .map(|t| (t.cert.pem.clone(), t.key.pem().to_owned())),
                    ca_certs: s.ca_certs.clone(),
                };
                (name.clone(), Arc::new(tls))
            })
            .collect();
        *self.tls.lock().unwrap_or_else(PoisonError::into_inner) = tls;
    }

    /// Keeps the tenants' own secrets.
    pub(crate) fn set_tenants(&self, tenants: &BTreeMap<String, TenantSettings>) {
        let copy = tenants
            .iter()
            .filter(|(_, s)| !s.signing_secrets.is_empty())
            .map(|(name, s)| (name.clone(), s.signing_secrets.clone()))
            .collect();
        *self
            .by_tenant
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = copy;
    }

    /// Keeps the subscriptions' own secrets.
    pub(crate) fn set_subscriptions(&self, secrets: Vec<(String, SigningSecrets)>) {
        *self
            .by_subscription
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = secrets.into_iter().collect();
    }

    /// Both reads that began when [`Outbound::read_begins`] returned `read`
    /// were kept: the changes announced before it are covered.
    pub(crate) fn caught_up(&self, read: u64) {
        self.seen.fetch_max(read, Ordering::SeqCst);
    }

    /// [`Outbound::set_destinations`] and [`Outbound::set_tenants`], then
    /// [`Outbound::caught_up`].
    #[cfg(test)]
    pub(crate) fn set(
        &self,
        settings: &[(String, DestinationSettings)],
        tenants: &BTreeMap<String, TenantSettings>,
        read: u64,
    ) {
        self.set_destinations(settings);
        self.set_tenants(tenants);
        self.caught_up(read);
    }

    /// The request of `task`'s current try, sent at `now`: its method, url
    /// and body, its own headers over the destination headers it gets,
    /// signed with the secrets it gets ([`outbound_for`]). Its
    /// `traceparent` names `span` (the try's own span, when spans are
    /// exported) or else the task's stored parent; a task stored without a
    /// trace context sends one only when the try has a span of its own
    /// (`trace`, from that span).
    ///
    /// With it, the destination's `auth` when it applies to the task
    /// ([`outbound_for`]), which [`crate::auth`] adds as the call is made.
    pub(crate) fn call(
        &self,
        task: &Task,
        now: Timestamp,
        span: Option<&TraceContext>,
    ) -> (Delivery, Option<DestinationAuth>) {
        let by_destination = self
            .by_destination
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let by_tenant = self
            .by_tenant
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let by_subscription = self
            .by_subscription
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let credentials = outbound_for(OutboundInputs {
            task_tenant: task.tenant.as_deref(),
            destination: by_destination.get(&task.destination),
            tenant_secrets: task.tenant.as_deref().and_then(|t| by_tenant.get(t)),
            server_secrets: &self.default_secrets,
            subscription_secrets: task
                .topic
                .as_ref()
                .and_then(|link| by_subscription.get(&link.subscription)),
        });
        let keys: Vec<&[u8]> = credentials
            .secrets
            .map(|secrets| secrets.iter().map(|s| s.key()).collect())
            .unwrap_or_default();
        let none = Headers::default();
        let mut headers = task.headers.over(credentials.headers.unwrap_or(&none));
        let task_id = task.id.to_string();
        let body = Bytes::from(task.body.clone());
        let (traceparent, tracestate) = match (span, &task.trace) {
            (Some(span), _) => (Some(span.traceparent()), span.state()),
            (None, Some(stored)) => (Some(stored.traceparent()), stored.state()),
            (None, None) => (None, None),
        };
        // Headers stored before these names were taskcenter's own must not
        // send a second trace context (a receiver would find it invalid).
        if traceparent.is_some() {
            headers.retain(|(name, _)| !matches!(*name, "traceparent" | "tracestate"));
        }
        let auth = credentials.auth.cloned();
        let delivery = Delivery::build(DeliverySpec {
            method: task.method,
            url: &task.url,
            body: &body,
            timeout: task.timeout,
            task_id: &task_id,
            attempt: task.attempt,
            idempotency_key: &task.idempotency_key,
            headers: &headers,
            trace: TraceHeaders {
                traceparent: traceparent.as_deref(),
                tracestate,
            },
            sent_at_s: now.as_millis().div_euclid(1000),
            signing_keys: &keys,
        })
        .with_client_tls(
            self.tls
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&task.destination)
                .cloned(),
        );
        (delivery, auth)
    }

    /// [`Outbound::call`]'s request alone.
    #[cfg(test)]
    pub(crate) fn delivery(
        &self,
        task: &Task,
        now: Timestamp,
        span: Option<&TraceContext>,
    ) -> Delivery {
        self.call(task, now, span).0
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tc_downstream::webhook_signature;
    use tc_model::signing::SigningSecret;
    use tc_model::{Limits, NewTask, TaskId};

    use super::*;
    use tc_model::Method;

    /// A secret of 24 bytes: 32 base64 characters, all the `n`th letter.
    fn secret(n: u8) -> SigningSecret {
        let encoded: String = std::iter::repeat_n(char::from(b'A' + n), 32).collect();
        SigningSecret::parse(&format!("whsec_{encoded}")).unwrap()
    }

    fn headers(list: &[(&str, &str)]) -> Headers {
        Headers::parse(list.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))).unwrap()
    }

    fn task(method: Method, body: &[u8], own: Headers) -> Task {
        let new = NewTask::new(
            "http://127.0.0.1:9/hook".into(),
            body.to_vec(),
            "key-1".into(),
            3,
            Duration::from_secs(5),
            &Limits::default(),
        )
        .unwrap()
        .with_method(method)
        .unwrap()
        .with_headers(own);
        let mut task = Task::submitted(
            TaskId::new(Timestamp::from_millis(1), [3; 10]),
            &new,
            Timestamp::from_millis(1),
        );
        task.attempt = 2;
        task
    }

    fn settings(headers: Headers, secrets: &[SigningSecret]) -> DestinationSettings {
        let texts: Vec<&str> = secrets.iter().map(SigningSecret::expose).collect();
        DestinationSettings {
            headers,
            signing_secrets: SigningSecrets::parse(&texts).unwrap(),
            ..Default::default()
        }
    }

    const NOW: Timestamp = Timestamp::from_millis(1_767_225_600_999);

    #[test]
    fn a_task_s_own_headers_win_over_its_destination_s_and_the_call_is_signed() {
        let outbound = Outbound::new(SigningSecrets::default());
        let (old, new) = (secret(1), secret(2));
        outbound.set(
            &[(
                "127.0.0.1:9".to_owned(),
                settings(
                    headers(&[("authorization", "Bearer d"), ("x-region", "eu")]),
                    &[old.clone(), new.clone()],
                ),
            )],
            &BTreeMap::new(),
            0,
        );
        let task = task(
            Method::Put,
            b"{\"a\":1}",
            headers(&[("Authorization", "Bearer t")]),
        );
        let delivery = outbound.delivery(&task, NOW, None);
        assert_eq!(delivery.method, Method::Put);
        assert_eq!(delivery.url, task.url);
        assert_eq!(delivery.timeout, Duration::from_secs(5));
        assert_eq!(delivery.header("authorization"), Some("Bearer t"));
        assert_eq!(delivery.header("x-region"), Some("eu"));
        assert_eq!(delivery.header("x-task-attempt"), Some("2"));
        assert_eq!(delivery.header("webhook-timestamp"), Some("1767225600"));
        let id = task.id.to_string();
        assert_eq!(delivery.header("webhook-id"), Some(id.as_str()));
        let expected = webhook_signature(&[old.key(), new.key()], &id, 1_767_225_600, b"{\"a\":1}");
        assert_eq!(
            delivery.header("webhook-signature"),
            Some(expected.as_str())
        );
    }

    #[test]
    fn the_server_s_secret_signs_only_destinations_without_their_own() {
        let (server, own) = (secret(3), secret(4));
        let outbound = Outbound::new(SigningSecrets::parse(&[server.expose()]).unwrap());
        outbound.set(
            &[
                (
                    "127.0.0.1:9".to_owned(),
                    settings(Headers::default(), std::slice::from_ref(&own)),
                ),
                (
                    "other:80".to_owned(),
                    settings(headers(&[("x-a", "1")]), &[]),
                ),
            ],
            &BTreeMap::new(),
            0,
        );
        let task = task(Method::Post, b"{}", Headers::default());
        let signature = |task: &Task| {
            outbound
                .delivery(task, NOW, None)
                .header("webhook-signature")
                .map(str::to_owned)
        };
        let id = task.id.to_string();
        assert_eq!(
            signature(&task),
            Some(webhook_signature(&[own.key()], &id, 1_767_225_600, b"{}"))
        );
        let elsewhere = Task {
            destination: "other:80".into(),
            ..task.clone()
        };
        assert_eq!(
            signature(&elsewhere),
            Some(webhook_signature(
                &[server.key()],
                &id,
                1_767_225_600,
                b"{}"
            ))
        );
        let unsigned = Outbound::new(SigningSecrets::default());
        assert_eq!(
            unsigned.delivery(&task, NOW, None).header("webhook-id"),
            None
        );
    }

    #[test]
    fn a_tenant_s_task_is_signed_with_its_own_secret_never_the_server_s() {
        let (server, destination, own) = (secret(5), secret(6), secret(7));
        let outbound = Outbound::new(SigningSecrets::parse(&[server.expose()]).unwrap());
        let tenants = BTreeMap::from([(
            "t".to_owned(),
            TenantSettings {
                signing_secrets: SigningSecrets::parse(&[own.expose()]).unwrap(),
                ..TenantSettings::default()
            },
        )]);
        outbound.set(
            &[(
                "127.0.0.1:9".to_owned(),
                settings(
                    headers(&[("x-operator", "yes")]),
                    std::slice::from_ref(&destination),
                ),
            )],
            &tenants,
            0,
        );
        let of = |tenant: Option<&str>| Task {
            tenant: tenant.map(str::to_owned),
            ..task(Method::Post, b"{}", Headers::default())
        };
        let sent = |task: &Task| {
            let delivery = outbound.delivery(task, NOW, None);
            (
                delivery.header("x-operator").map(str::to_owned),
                delivery.header("webhook-signature").map(str::to_owned),
            )
        };
        let id = of(None).id.to_string();
        let signed_by =
            |s: &SigningSecret| Some(webhook_signature(&[s.key()], &id, 1_767_225_600, b"{}"));
        // (task, destination header sent, signature)
        let rows = [
            (of(None), Some("yes".to_owned()), signed_by(&destination)),
            (of(Some("t")), None, signed_by(&own)),
            // A tenant this worker does not know: unsigned, never the server.
            (of(Some("u")), None, None),
        ];
        for (task, header, signature) in rows {
            assert_eq!(sent(&task), (header, signature), "{:?}", task.tenant);
        }
    }

    #[test]
    fn a_get_sends_no_body() {
        let outbound = Outbound::new(SigningSecrets::default());
        let delivery = outbound.delivery(&task(Method::Get, b"", Headers::default()), NOW, None);
        assert_eq!((delivery.method, delivery.body.len()), (Method::Get, 0));
        assert_eq!(delivery.header("content-type"), None);
    }

    #[test]
    fn the_trace_context_names_the_try_s_span_or_else_the_stored_parent() {
        const CALLER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let outbound = Outbound::new(SigningSecrets::default());
        let stored = TraceContext::from_headers(Some(CALLER), Some("congo=t61rcWkgMzE")).unwrap();
        let traced = Task {
            trace: Some(stored.clone()),
            ..task(Method::Post, b"{}", Headers::default())
        };
        let check =
            |task: &Task, span: Option<&TraceContext>, expected: (Option<&str>, Option<&str>)| {
                let delivery = outbound.delivery(task, NOW, span);
                assert_eq!(
                    (
                        delivery.header("traceparent"),
                        delivery.header("tracestate")
                    ),
                    expected
                );
            };
        check(&traced, None, (Some(CALLER), Some("congo=t61rcWkgMzE")));
        let span = stored.with_parent([7; 8], true).unwrap();
        check(
            &traced,
            Some(&span),
            (
                Some("00-0af7651916cd43dd8448eb211c80319c-0707070707070707-01"),
                Some("congo=t61rcWkgMzE"),
            ),
        );
        let untraced = task(Method::Post, b"{}", Headers::default());
        check(&untraced, None, (None, None));
        // A header of the same name stored before it was refused is not
        // sent besides the context.
        let older = Task {
            headers: Headers::from_stored(Some(r#"{"traceparent":"00-x","x-a":"1"}"#)).unwrap(),
            ..traced.clone()
        };
        let delivery = outbound.delivery(&older, NOW, None);
        let sent: Vec<&str> = delivery
            .headers
            .iter()
            .filter(|(n, _)| n == "traceparent")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(sent, [CALLER]);
        assert_eq!(delivery.header("x-a"), Some("1"));
    }

    #[test]
    fn a_change_leaves_the_copy_stale_until_a_read_begun_after_it_is_applied() {
        let outbound = Outbound::new(SigningSecrets::default());
        assert!(!outbound.stale());
        let before = outbound.read_begins();
        outbound.changed();
        assert!(outbound.stale());
        // A read that began before the change does not cover it.
        outbound.set(&[], &BTreeMap::new(), before);
        assert!(outbound.stale());
        let after = outbound.read_begins();
        outbound.set(&[], &BTreeMap::new(), after);
        assert!(!outbound.stale());
    }
}
