//! A delivery is data: the request one try sends (method, url, headers in a
//! defined order, body) as a plain value, built once per try by
//! [`Delivery::build`] from plain inputs, signed by a pure function
//! ([`crate::webhook_signature`]). Every [`crate::Downstream`] only sends
//! it, so the fake sends exactly what the real client sends, and tests of
//! headers and signatures need no network.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::ClientTls;
use crate::signature::webhook_signature;
/// A call's HTTP method: the domain's one enum of five, so a task's method
/// is sent as it was validated and stored, with no second list to keep.
pub use tc_model::Method;

/// The `User-Agent` of every call.
pub const USER_AGENT: &str = concat!("taskcenter/", env!("CARGO_PKG_VERSION"));

/// The plain inputs of one try: what the worker maps a task, its
/// destination's settings and its clock to. This crate knows no task.
#[derive(Clone, Copy)]
pub struct DeliverySpec<'a> {
    /// The method.
    pub method: Method,
    /// Absolute `http://` or `https://` URL.
    pub url: &'a str,
    /// The exact bytes to send; empty: no body (and no `Content-Type`).
    pub body: &'a Bytes,
    /// Bound on the whole call.
    pub timeout: Duration,
    /// The task's id: `X-Task-Id`, and `webhook-id` when signed (the same on
    /// every try, so a receiver can drop repeats).
    pub task_id: &'a str,
    /// `X-Task-Attempt`: 1 for the first try.
    pub attempt: u32,
    /// `Idempotency-Key`: the same on every try.
    pub idempotency_key: &'a str,
    /// Further headers (names lower case, already checked), sent after the
    /// delivery's own, in the order given.
    pub headers: &'a [(&'a str, &'a str)],
    /// W3C trace context: `traceparent` (the try's own span, or the
    /// stored parent when spans are not exported) and `tracestate`, both
    /// already checked; none: not sent.
    pub trace: TraceHeaders<'a>,
    /// When the try is sent, Unix seconds: `webhook-timestamp`.
    pub sent_at_s: i64,
    /// The Standard Webhooks keys to sign with (the decoded secrets); none:
    /// the call is not signed and carries no `webhook-*` header.
    pub signing_keys: &'a [&'a [u8]],
}

/// The W3C trace context headers of one try, as text already checked
/// (tc-model's `TraceContext` builds them).
#[derive(Clone, Copy, Default)]
pub struct TraceHeaders<'a> {
    /// `traceparent`; `None`: no trace context is sent.
    pub traceparent: Option<&'a str>,
    /// `tracestate`, sent only with a `traceparent`.
    pub tracestate: Option<&'a str>,
}

/// One try's request, exactly as it is sent. Its `Debug` shows header
/// names only: values may be credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The method.
    pub method: Method,
    /// Absolute `http://` or `https://` URL.
    pub url: String,
    /// Every header, names lower case, in the order sent.
    pub headers: Vec<(String, String)>,
    /// The body; empty: none.
    pub body: Bytes,
    /// Upper bound for the whole call: connect, request, response headers
    /// and response body.
    pub timeout: Duration,
    /// Its destination's TLS settings (a client certificate, its own CA
    /// certificates); none: the client's defaults.
    pub client_tls: Option<Arc<ClientTls>>,
}

impl Delivery {
    /// The request for `spec`. Headers, in this order:
    ///
    /// 1. `content-type: application/json`, when there is a body;
    /// 2. `user-agent: taskcenter/<version>`;
    /// 3. `idempotency-key`, `x-task-id`, `x-task-attempt`;
    /// 4. with a trace context: `traceparent`, then `tracestate` if any;
    /// 5. with signing keys: `webhook-id` (the task id, or the `webhook-id`
    ///    of `spec.headers`: a topic's event id), `webhook-timestamp`
    ///    (`sent_at_s`) and `webhook-signature` (one `v1` signature per key,
    ///    over the body exactly as sent);
    /// 6. `spec.headers`, in their order.
    pub fn build(spec: DeliverySpec<'_>) -> Delivery {
        let mut headers = Vec::with_capacity(8 + spec.headers.len());
        let mut add = |name: &str, value: String| headers.push((name.to_owned(), value));
        if !spec.body.is_empty() {
            add("content-type", "application/json".to_owned());
        }
        add("user-agent", USER_AGENT.to_owned());
        add("idempotency-key", spec.idempotency_key.to_owned());
        add("x-task-id", spec.task_id.to_owned());
        add("x-task-attempt", spec.attempt.to_string());
        if let Some(traceparent) = spec.trace.traceparent {
            add("traceparent", traceparent.to_owned());
            if let Some(tracestate) = spec.trace.tracestate {
                add("tracestate", tracestate.to_owned());
            }
        }
        // A topic's task carries its event's id as its own `webhook-id`
        // (every subscriber gets one id per event): signed, that id is the
        // one signed, and it is sent once.
        let own_id = spec
            .headers
            .iter()
            .find(|(name, _)| *name == "webhook-id")
            .map(|(_, value)| *value);
        let signed = !spec.signing_keys.is_empty();
        if signed {
            let id = own_id.unwrap_or(spec.task_id);
            add("webhook-id", id.to_owned());
            add("webhook-timestamp", spec.sent_at_s.to_string());
            add(
                "webhook-signature",
                webhook_signature(spec.signing_keys, id, spec.sent_at_s, spec.body),
            );
        }
        for (name, value) in spec.headers {
            if !(signed && *name == "webhook-id") {
                add(name, (*value).to_owned());
            }
        }
        Delivery {
            method: spec.method,
            url: spec.url.to_owned(),
            headers,
            body: spec.body.clone(),
            timeout: spec.timeout,
            client_tls: None,
        }
    }

    /// This delivery sent with its destination's TLS settings.
    pub fn with_client_tls(mut self, tls: Option<Arc<ClientTls>>) -> Delivery {
        self.client_tls = tls;
        self
    }

    /// The first header called `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl fmt::Debug for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Delivery")
            .field("method", &self.method)
            .field("url", &"…")
            .field("headers", &names)
            .field("body_len", &self.body.len())
            .field("timeout", &self.timeout)
            .field("client_tls", &self.client_tls)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_A: &[u8] = &[1; 24];
    const KEY_B: &[u8] = &[2; 32];

    fn spec<'a>(body: &'a Bytes, keys: &'a [&'a [u8]]) -> DeliverySpec<'a> {
        DeliverySpec {
            method: Method::Post,
            url: "http://127.0.0.1:9/hook?x=1",
            body,
            timeout: Duration::from_secs(3),
            task_id: "0190f3a2-0000-7000-8000-000000000001",
            attempt: 2,
            idempotency_key: "order-7",
            headers: &[("authorization", "Bearer t"), ("x-tenant", "acme")],
            trace: TraceHeaders {
                traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
                tracestate: Some("congo=t61rcWkgMzE"),
            },
            sent_at_s: 1_767_225_600,
            signing_keys: keys,
        }
    }

    fn names(delivery: &Delivery) -> Vec<&str> {
        delivery.headers.iter().map(|(n, _)| n.as_str()).collect()
    }

    #[test]
    fn the_headers_come_in_their_defined_order() {
        let body = Bytes::from_static(b"{\"a\":1}");
        let delivery = Delivery::build(spec(&body, &[KEY_A]));
        assert_eq!(
            names(&delivery),
            [
                "content-type",
                "user-agent",
                "idempotency-key",
                "x-task-id",
                "x-task-attempt",
                "traceparent",
                "tracestate",
                "webhook-id",
                "webhook-timestamp",
                "webhook-signature",
                "authorization",
                "x-tenant",
            ]
        );
        let value = |name| delivery.header(name);
        assert_eq!(value("content-type"), Some("application/json"));
        assert_eq!(value("user-agent"), Some(USER_AGENT));
        assert!(USER_AGENT.starts_with("taskcenter/"));
        assert_eq!(value("idempotency-key"), Some("order-7"));
        assert_eq!(value("x-task-attempt"), Some("2"));
        assert_eq!(
            value("traceparent"),
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        );
        assert_eq!(value("tracestate"), Some("congo=t61rcWkgMzE"));
        assert_eq!(value("webhook-id"), value("x-task-id"));
        assert_eq!(value("webhook-timestamp"), Some("1767225600"));
        assert_eq!(value("authorization"), Some("Bearer t"));
        assert_eq!(delivery.method, Method::Post);
        assert_eq!(delivery.url, "http://127.0.0.1:9/hook?x=1");
        assert_eq!(delivery.body, body);
        assert_eq!(delivery.timeout, Duration::from_secs(3));
    }

    #[test]
    fn the_signature_covers_the_id_the_timestamp_and_the_body_sent() {
        let body = Bytes::from_static(b"{\"a\":1}");
        let delivery = Delivery::build(spec(&body, &[KEY_A, KEY_B]));
        let expected = webhook_signature(
            &[KEY_A, KEY_B],
            "0190f3a2-0000-7000-8000-000000000001",
            1_767_225_600,
            b"{\"a\":1}",
        );
        assert_eq!(
            delivery.header("webhook-signature"),
            Some(expected.as_str())
        );
        assert_eq!(expected.split(' ').count(), 2, "one signature per key");
        // A retry is sent later: the same id, a new timestamp and signature.
        let later = Delivery::build(DeliverySpec {
            attempt: 3,
            sent_at_s: 1_767_225_660,
            ..spec(&body, &[KEY_A, KEY_B])
        });
        assert_eq!(later.header("webhook-id"), delivery.header("webhook-id"));
        assert_eq!(later.header("webhook-timestamp"), Some("1767225660"));
        assert_ne!(
            later.header("webhook-signature"),
            delivery.header("webhook-signature")
        );
    }

    #[test]
    fn an_event_s_webhook_id_is_signed_and_sent_once() {
        let body = Bytes::from_static(b"{}");
        let headers = [("webhook-id", "event-1"), ("event-type", "invoice.paid")];
        for keys in [&[KEY_A][..], &[]] {
            let delivery = Delivery::build(DeliverySpec {
                headers: &headers,
                ..spec(&body, keys)
            });
            let ids = delivery.headers.iter().filter(|(n, _)| n == "webhook-id");
            assert_eq!(ids.count(), 1, "signed: {}", !keys.is_empty());
            assert_eq!(delivery.header("webhook-id"), Some("event-1"));
            assert_eq!(delivery.header("event-type"), Some("invoice.paid"));
            if !keys.is_empty() {
                let expected = webhook_signature(keys, "event-1", 1_767_225_600, b"{}");
                assert_eq!(
                    delivery.header("webhook-signature"),
                    Some(expected.as_str())
                );
            }
        }
    }

    #[test]
    fn without_keys_no_webhook_header_and_without_a_body_no_content_type() {
        let empty = Bytes::new();
        let delivery = Delivery::build(DeliverySpec {
            method: Method::Get,
            trace: TraceHeaders::default(),
            ..spec(&empty, &[])
        });
        assert_eq!(
            names(&delivery),
            [
                "user-agent",
                "idempotency-key",
                "x-task-id",
                "x-task-attempt",
                "authorization",
                "x-tenant",
            ]
        );
        assert_eq!(delivery.method.as_str(), "GET");
        assert!(delivery.body.is_empty());
    }

    #[test]
    fn debug_shows_no_header_value() {
        let body = Bytes::from_static(b"{}");
        let debug = format!("{:?}", Delivery::build(spec(&body, &[KEY_A])));
        assert!(debug.contains("authorization"), "{debug}");
        for secret in ["Bearer", "acme", "order-7", "v1,", "hook?x"] {
            assert!(!debug.contains(secret), "{secret} in {debug}");
        }
    }
}
