//! Client certificates, through the real binary: a
//! loopback TLS server that requires a client certificate (tokio-rustls,
//! certificates made by rcgen here) answers the server's call once the
//! destination has the certificate, set with the CLI from files; without
//! it the handshake is refused. The view and the CLI show the
//! certificate's subject and expiry, the metric its expiry; the key shows
//! nowhere: not in a view, `/metrics`, the dashboard, a log line, nor the
//! database file (sealed).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::support::{self, cli::Cli};

struct Pki {
    ca_pem: String,
    client_pem: String,
    client_key_pem: String,
    acceptor: TlsAcceptor,
}

fn pki() -> Pki {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "partner CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().unwrap())
        .unwrap();
    let leaf = |names: Vec<String>, cn: &str| {
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.not_after = rcgen::date_time_ymd(2040, 1, 2);
        let key = rcgen::KeyPair::generate().unwrap();
        (params.signed_by(&key, &ca).unwrap(), key)
    };
    let (server, server_key) = leaf(vec!["127.0.0.1".into()], "partner");
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
        acceptor: TlsAcceptor::from(Arc::new(config)),
    }
}

/// Serves `200 ok` on TLS connections that present a client certificate
/// the CA issued (the handshake refuses the others); counts the answered.
async fn partner(acceptor: TlsAcceptor) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let answered = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&answered);
    tokio::spawn(async move {
        for _ in 0..1000 {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, count) = (acceptor.clone(), Arc::clone(&count));
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                count.fetch_add(1, Ordering::SeqCst);
                let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
                let _ = tls.write_all(answer).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (addr.to_string(), answered)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partner_that_requires_a_client_certificate_is_called_with_the_destination_s() {
    let pki = pki();
    let (destination, answered) = partner(pki.acceptor.clone()).await;
    let files = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = files.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let (cert, key, ca) = (
        write("client.pem", &pki.client_pem),
        write("client.key", &pki.client_key_pem),
        write("ca.pem", &pki.ca_pem),
    );
    let sealing = write("secret.key", &format!("{}\n", "A".repeat(43) + "="));
    let mut s = support::start_with(|c, _| {
        c.flag("--secret-key-file", &sealing);
    })
    .await;
    let url = format!("https://{destination}/hook");
    let submit = async |api: &support::Api, key: &str| {
        let reply = api
            .post_json(
                "/tasks",
                &json!({"url": url, "idempotency_key": key, "json": {}, "max_attempts": 1}),
            )
            .await;
        assert_eq!(reply.status, 201, "{:?}", reply.body);
        api.wait_terminal(&reply.id()).await
    };

    // Without the destination's CA the partner is not even trusted.
    assert_eq!(submit(&s.api, "before").await["state"], "failed");

    // The CLI sets the certificate, its key and the CA from files.
    let cli = Cli::new(&s.server.base_url());
    let run = cli
        .run(&[
            "destination",
            "set",
            &destination,
            "--client-cert",
            &cert,
            "--client-key",
            &key,
            "--ca-certs",
            &ca,
        ])
        .await;
    run.expect(0);
    assert!(run.out().contains("CN=taskcenter client"), "{}", run.out());
    let view = s
        .api
        .get(&format!("/destinations/{destination}"))
        .await
        .json();
    assert_eq!(view["client_cert"]["subject"], "CN=taskcenter client");
    assert!(
        view["client_cert"]["not_after"]
            .as_str()
            .unwrap()
            .starts_with("2040-01-02T00:00:00"),
        "{view}"
    );
    assert_eq!(view["ca_certs"], 1);

    // The call presents the certificate: answered.
    assert_eq!(submit(&s.api, "with-cert").await["state"], "success");
    assert_eq!(answered.load(Ordering::SeqCst), 1);
    let metrics = String::from_utf8(s.api.get("/metrics").await.body.to_vec()).unwrap();
    let series = format!(
        "taskcenter_destination_client_cert_expiry_seconds{{destination=\"{destination}\"}} 2209075200"
    );
    assert!(metrics.contains(&series), "{metrics}");

    // A key that is not the certificate's, or junk, is refused naming the field.
    let other = rcgen::KeyPair::generate().unwrap().serialize_pem();
    for (body, field) in [
        (
            json!({"client_cert": pki.client_pem, "client_key": other}),
            "client_key",
        ),
        (
            json!({"client_cert": "junk", "client_key": pki.client_key_pem}),
            "client_cert",
        ),
        (
            json!({"ca_certs": "-----BEGIN CERTIFICATE-----\nAA\n-----END CERTIFICATE-----\n"}),
            "ca_certs",
        ),
    ] {
        let reply = s
            .api
            .put_json(&format!("/destinations/{destination}"), &body)
            .await;
        assert_eq!(reply.status, 400, "{:?}", reply.body);
        let message = reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(message.starts_with(field), "{message}");
    }

    // Nothing shows the key.
    let key_text: String = pki.client_key_pem.lines().nth(1).unwrap().to_owned();
    let mut shown = Vec::new();
    for path in [
        "/destinations".to_owned(),
        format!("/destinations/{destination}"),
        "/metrics".to_owned(),
        "/ui/".to_owned(),
        "/ui/fragment/overview".to_owned(),
    ] {
        let reply = s.api.get(&path).await;
        assert_eq!(reply.status, 200, "{path}");
        shown.push((path, String::from_utf8_lossy(&reply.body).into_owned()));
    }
    // the dashboard's destinations show the subject
    assert!(
        shown[4].1.contains("CN=taskcenter client"),
        "{}",
        shown[4].1
    );
    shown.push(("the CLI".into(), run.out() + &run.stderr));

    // Cleared: the handshake is refused again.
    let reply = s
        .api
        .put_json(
            &format!("/destinations/{destination}"),
            &json!({"client_cert": null}),
        )
        .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(reply.json()["client_cert"], json!(null));
    assert_eq!(submit(&s.api, "cleared").await["state"], "failed");
    assert_eq!(answered.load(Ordering::SeqCst), 1);

    s.server.terminate();
    s.server.wait_exit().await;
    let logs: String = s
        .server
        .seen_logs()
        .iter()
        .map(|l| format!("{l}\n"))
        .collect();
    shown.push(("the log lines".into(), logs + &s.server.stderr()));
    for (place, text) in &shown {
        assert!(!text.contains(&key_text), "{place} shows the client key");
        assert!(!text.contains("PRIVATE KEY"), "{place} shows a private key");
    }
    let db = std::fs::read(s.config.db()).unwrap();
    assert!(!db.windows(key_text.len()).any(|w| w == key_text.as_bytes()));
}
