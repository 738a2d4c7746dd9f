//! Client certificates against a TLS server on 127.0.0.1
//! that requires one: a CA, the server's certificate and a client
//! certificate, all made by rcgen per test. The destination's settings
//! carry the CA (trusted for it alone: the client has no other root) and
//! the client certificate; a call with it is answered, one without it is
//! refused in the handshake. And what the server checks before it keeps a
//! certificate: its subject and end, a key that belongs to it, PEM.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio_rustls::TlsAcceptor;

use super::tests::{in_order, keep};
use crate::fake::FakeServer;
use crate::{
    ClientTls, Delivery, DeliverySpec, DownError, Downstream, DownstreamConfig, HyperDownstream,
    Method, check_ca_certs, inspect_client_cert,
};

const GUARD: Duration = Duration::from_secs(10);
const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

/// A CA, a server certificate for 127.0.0.1 and a client certificate, both
/// issued by it (PEM), and a client key of another pair.
struct Pki {
    ca_pem: String,
    client_pem: String,
    client_key_pem: String,
    other_key_pem: String,
    acceptor: TlsAcceptor,
}

fn pki() -> Pki {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "test CA");
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let leaf = |names: Vec<String>, cn: &str| {
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.not_after = rcgen::date_time_ymd(2040, 1, 2);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca).unwrap();
        (cert, key)
    };
    let (server, server_key) = leaf(vec!["127.0.0.1".into()], "server");
    let (client, client_key) = leaf(Vec::new(), "taskcenter client");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .unwrap();
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![CertificateDer::from(server.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der())),
        )
        .unwrap();
    Pki {
        ca_pem: ca.pem(),
        client_pem: client.pem(),
        client_key_pem: client_key.serialize_pem(),
        other_key_pem: rcgen::KeyPair::generate().unwrap().serialize_pem(),
        acceptor: TlsAcceptor::from(Arc::new(config)),
    }
}

fn call(url: &str, tls: ClientTls) -> Delivery {
    Delivery::build(DeliverySpec {
        method: Method::Post,
        url,
        body: &Bytes::from_static(b"{}"),
        timeout: GUARD,
        task_id: "task-1",
        attempt: 1,
        idempotency_key: "k",
        headers: &[],
        trace: crate::TraceHeaders::default(),
        sent_at_s: 0,
        signing_keys: &[],
    })
    .with_client_tls(Some(Arc::new(tls)))
}

#[tokio::test]
async fn a_server_that_requires_a_client_certificate_answers_the_call_that_presents_it() {
    let pki = pki();
    let script = in_order(vec![keep(OK), keep(OK)]);
    let server = FakeServer::start_tls(script, pki.acceptor.clone())
        .await
        .unwrap();
    let url = format!("{}/x", server.url());
    // No system root, no extra one: the destination's CA alone is trusted.
    let client = HyperDownstream::with_roots(&DownstreamConfig::default(), Vec::new(), Vec::new());
    let with_cert = ClientTls {
        identity: Some((pki.client_pem.clone(), pki.client_key_pem.clone())),
        ca_certs: Some(pki.ca_pem.clone()),
    };
    let answer = client.send(call(&url, with_cert.clone())).await.unwrap();
    assert_eq!(answer.status, 200);
    // the same setting again: the cached connector
    assert_eq!(
        client.send(call(&url, with_cert)).await.unwrap().status,
        200
    );
    let without = ClientTls {
        identity: None,
        ca_certs: Some(pki.ca_pem.clone()),
    };
    let refused = client.send(call(&url, without)).await.unwrap_err();
    assert!(
        matches!(refused, DownError::Connect(_) | DownError::Other(_)),
        "{refused:?}"
    );
    // without the destination's CA the server itself is not trusted
    let untrusted = ClientTls {
        identity: Some((pki.client_pem, pki.client_key_pem)),
        ca_certs: None,
    };
    assert!(client.send(call(&url, untrusted)).await.is_err());
}

#[test]
fn a_certificate_is_read_and_its_key_checked_before_it_is_kept() {
    let pki = pki();
    let info = inspect_client_cert(&pki.client_pem, &pki.client_key_pem).unwrap();
    assert_eq!(info.subject, "CN=taskcenter client");
    // 2040-01-02T00:00:00Z
    assert_eq!(info.not_after_s, 2_209_075_200);
    // (cert, key, the field the refusal names)
    let rows: &[(&str, &str, &str)] = &[
        (&pki.client_pem, &pki.other_key_pem, "client_key"),
        ("not pem", &pki.client_key_pem, "client_cert"),
        (
            &pki.client_pem,
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            "client_key",
        ),
        (&pki.client_pem, &pki.client_pem, "client_key"),
        (&pki.client_key_pem, &pki.client_key_pem, "client_cert"),
    ];
    for (cert, key, field) in rows {
        let err = inspect_client_cert(cert, key).unwrap_err();
        assert_eq!(err.field, *field, "{err}");
        assert!(!err.message.contains("AAAA"), "{err}");
    }
    assert_eq!(check_ca_certs(&pki.ca_pem), Ok(1));
    assert_eq!(check_ca_certs("junk").unwrap_err().field, "ca_certs");
    // the Debug of a setting shows no key
    let tls = ClientTls {
        identity: Some((pki.client_pem, pki.client_key_pem.clone())),
        ca_certs: None,
    };
    assert!(!format!("{tls:?}").contains("PRIVATE"));
}
