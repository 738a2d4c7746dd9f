//! `https://` against a TLS server on 127.0.0.1 whose certificate rcgen makes
//! per test, trusted through [`DownstreamConfig::extra_root_certs_pem`] the
//! way an internal CA is.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustls::ServerConfig;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::TlsAcceptor;

use super::tests::{closed, hold, in_order, keep, nth_call};
use super::trust_anchors;
use crate::fake::{FakeServer, Script};
use crate::{
    Delivery, DeliverySpec, DownError, Downstream, DownstreamConfig, DownstreamSetupError,
    HyperDownstream, Method,
};

/// Request timeout for calls that should not time out, and failure guard.
const GUARD: Duration = Duration::from_secs(10);

const OK_JSON: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nRetry-After: 5\r\nContent-Length: 11\r\n\r\n{\"ok\":true}";

/// A self-signed certificate for `localhost` and `127.0.0.1` (both as
/// subject alternative names), and a server configuration presenting it.
struct TestCert {
    pem: Vec<u8>,
    acceptor: TlsAcceptor,
}

/// `issuer` names the certificate: two with the same name would look like one
/// issuer to the client, whose error would then be a bad signature rather
/// than an unknown issuer.
fn test_cert(issuer: &str) -> TestCert {
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, issuer);
    let signing_key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&signing_key).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(signing_key.serialize_der()));
    let config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)
            .unwrap();
    TestCert {
        pem: cert.pem().into_bytes(),
        acceptor: TlsAcceptor::from(Arc::new(config)),
    }
}

fn trusting(pems: Vec<Vec<u8>>) -> HyperDownstream {
    HyperDownstream::try_new(DownstreamConfig {
        extra_root_certs_pem: pems,
        ..DownstreamConfig::default()
    })
    .unwrap()
}

/// A client as on a machine without system roots: only `pem` is trusted.
fn trusting_only(pem: &[u8]) -> HyperDownstream {
    HyperDownstream::with_roots(
        &DownstreamConfig::default(),
        Vec::new(),
        trust_anchors(0, pem).unwrap(),
    )
}

fn request(url: String) -> Delivery {
    Delivery::build(DeliverySpec {
        method: Method::Post,
        url: &url,
        body: &Bytes::from_static(br#"{"amount":42}"#),
        timeout: GUARD,
        task_id: "task-1",
        attempt: 2,
        idempotency_key: "order-17:charge",
        headers: &[],
        trace: crate::TraceHeaders::default(),
        sent_at_s: 0,
        signing_keys: &[],
    })
}

#[tokio::test]
async fn https_with_the_certificate_as_an_extra_root_works_like_http() {
    let cert = test_cert("internal CA");
    let clients = [
        (
            "system roots plus the extra one",
            trusting(vec![cert.pem.clone()]),
        ),
        (
            "the extra root alone, no system roots",
            trusting_only(&cert.pem),
        ),
    ];
    for (name, client) in clients {
        assert!(client.https_enabled(), "{name}");
        let script = in_order(vec![keep(OK_JSON)]);
        let server = FakeServer::start_tls(Arc::clone(&script), cert.acceptor.clone())
            .await
            .unwrap();
        let port = server.addr().port();
        // The IP address and the DNS name: the certificate names both.
        for (n, url) in [
            format!("{}/x?n=1", server.url()),
            format!("https://localhost:{port}/x?n=1"),
        ]
        .into_iter()
        .enumerate()
        {
            let response = client.send(request(url.clone())).await;
            let response = response.unwrap_or_else(|error| panic!("{name}, {url}: {error:?}"));
            assert_eq!(response.status, 200, "{name}, {url}");
            assert_eq!(response.retry_after.as_deref(), Some("5"));
            assert_eq!(response.content_type.as_deref(), Some("application/json"));
            assert_eq!(response.body, Bytes::from_static(b"{\"ok\":true}"));

            let received = nth_call(&script, n).await;
            assert_eq!(received.method, "POST", "{name}, {url}");
            assert_eq!(received.path, "/x?n=1");
            assert_eq!(received.header("content-type"), Some("application/json"));
            assert_eq!(received.header("idempotency-key"), Some("order-17:charge"));
            assert_eq!(received.header("x-task-id"), Some("task-1"));
            assert_eq!(received.header("x-task-attempt"), Some("2"));
            assert_eq!(&received.body[..], br#"{"amount":42}"#);
        }
    }
}

/// An unknown certificate fails inside hyper's connector, before any request
/// is sent. It is [`DownError::Other`], not `Connect`: the same certificate
/// would be refused on every retry.
#[tokio::test]
async fn an_untrusted_certificate_fails_fast_and_is_not_a_connect_error() {
    let served = test_cert("unknown CA");
    let other = test_cert("internal CA");
    let script = in_order(vec![keep(OK_JSON)]);
    let server = FakeServer::start_tls(Arc::clone(&script), served.acceptor)
        .await
        .unwrap();
    let started = Instant::now();
    let result = trusting_only(&other.pem)
        .send(request(format!("{}/x", server.url())))
        .await;
    assert!(
        matches!(&result, Err(DownError::Other(message)) if message.contains("UnknownIssuer")),
        "{result:?}"
    );
    assert!(started.elapsed() < GUARD / 2, "{:?}", started.elapsed());
    let failed = script.wait_for(|r| (r.handshakes_failed() > 0).then_some(()));
    tokio::time::timeout(GUARD, failed)
        .await
        .expect("the server saw the handshake fail");
    assert_eq!(script.read(|r| r.count()), 0, "no request got through");
}

#[tokio::test]
async fn dropping_an_https_call_closes_its_connection() {
    let cert = test_cert("internal CA");
    let script: Arc<Script> = in_order(vec![hold(b"")]);
    let server = FakeServer::start_tls(Arc::clone(&script), cert.acceptor)
        .await
        .unwrap();
    let client = trusting(vec![cert.pem]);
    let call = tokio::spawn({
        let request = request(format!("{}/x", server.url()));
        async move { client.send(request).await }
    });
    // The server has the request, so the call is in flight.
    let received = nth_call(&script, 0).await;

    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    closed(&script, received.connection).await;
}

/// `try_new` refuses each bad entry naming it; `new` skips it and keeps the
/// good ones. No runtime needed: nothing is called.
#[test]
fn unusable_extra_roots_are_refused_by_try_new_and_skipped_by_new() {
    let good = test_cert("internal CA").pem;
    let check = |name: &str, bad: &[u8], expected: DownstreamSetupError| {
        let config = DownstreamConfig {
            extra_root_certs_pem: vec![good.clone(), bad.to_vec()],
            ..DownstreamConfig::default()
        };
        let refused = HyperDownstream::try_new(config.clone()).map(|_| ());
        let shape = |result: Result<(), DownstreamSetupError>| match result {
            // The reasons are pki-types' and webpki's words.
            Err(DownstreamSetupError::InvalidPem { index, .. }) => format!("InvalidPem {index}"),
            Err(DownstreamSetupError::InvalidCertificate { index, .. }) => {
                format!("InvalidCertificate {index}")
            }
            other => format!("{other:?}"),
        };
        assert_eq!(shape(refused), shape(Err(expected)), "{name}");
        let mut anchors = Vec::new();
        for (index, pem) in config.extra_root_certs_pem.iter().enumerate() {
            anchors.extend(trust_anchors(index, pem).ok().into_iter().flatten());
        }
        assert_eq!(anchors.len(), 1, "{name}: only the good root is kept");
        assert!(HyperDownstream::new(config).https_enabled(), "{name}");
    };
    let reason = String::new();
    check(
        "no PEM at all",
        b"not a certificate",
        DownstreamSetupError::NoCertificate { index: 1 },
    );
    check(
        "a key, no certificate",
        b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        DownstreamSetupError::NoCertificate { index: 1 },
    );
    check(
        "broken base64",
        b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
        DownstreamSetupError::InvalidPem {
            index: 1,
            reason: reason.clone(),
        },
    );
    check(
        "valid PEM, not a certificate inside",
        b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        DownstreamSetupError::InvalidCertificate { index: 1, reason },
    );
}

#[test]
fn with_no_root_at_all_https_is_disabled_and_http_still_served() {
    let client = HyperDownstream::with_roots(&DownstreamConfig::default(), Vec::new(), Vec::new());
    assert!(!client.https_enabled());
    let refused = client.build_request(request("https://127.0.0.1:9/".into()));
    assert!(
        matches!(&refused, Err(DownError::Other(message)) if message.contains("https is unavailable")),
        "{refused:?}"
    );
    assert!(
        client
            .build_request(request("http://127.0.0.1:9/".into()))
            .is_ok()
    );
}

#[test]
fn several_certificates_in_one_entry_are_all_trusted() {
    let bundle = [test_cert("CA 1").pem, test_cert("CA 2").pem].concat();
    assert_eq!(trust_anchors(0, &bundle).unwrap().len(), 2);
}
