//! TLS to a throwaway PostgreSQL cluster started with `ssl = on` and a
//! certificate made here (the machine's own server is left as it is):
//! `require` connects encrypted, `verify-full` with the CA that signed the
//! certificate connects, with another CA or for another host name it is
//! refused and says why; `disable` stays plain text.

use std::path::Path;

use tc_store_pg::{OpenError, PgConfig, PgStore};
use tc_testkit::pg_cluster::{PgCluster, ServerTls};

/// A CA, and a server certificate for 127.0.0.1 that it signed; the CA's
/// PEM is returned beside what the server serves.
fn certificates(ca_name: &str) -> (String, ServerTls) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, ca_name);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let server_key = rcgen::KeyPair::generate().unwrap();
    let mut server = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    server
        .distinguished_name
        .push(rcgen::DnType::CommonName, "taskcenter test PostgreSQL");
    let server_cert = server.signed_by(&server_key, &issuer).unwrap();
    (
        ca_cert.pem(),
        ServerTls {
            cert_pem: server_cert.pem(),
            key_pem: server_key.serialize_pem(),
        },
    )
}

/// The cluster, or `None` (with a line saying so) where PostgreSQL's
/// programs are not installed, unless TC_REQUIRE_POSTGRES=1.
async fn cluster(tls: ServerTls) -> Option<PgCluster> {
    let started = tokio::task::spawn_blocking(move || PgCluster::start_tls(&[], &tls))
        .await
        .unwrap();
    match started {
        Ok(cluster) => Some(cluster),
        Err(e) if std::env::var("TC_REQUIRE_POSTGRES").as_deref() != Ok("1") => {
            #[allow(clippy::print_stdout)]
            {
                println!("skipped: no throwaway PostgreSQL cluster: {e}");
            }
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// How many of the connections named `name` are encrypted, and how many
/// are not, asked over a plain connection of the test's own.
async fn ssl_of(cluster: &PgCluster, name: &str) -> (i64, i64) {
    let url = format!("{}?sslmode=disable", cluster.url());
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let driver = tokio::spawn(connection);
    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl) \
             FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = $1",
            &[&name],
        )
        .await
        .unwrap();
    drop(client);
    let _ = driver.await;
    (row.get(0), row.get(1))
}

async fn open(url: &str) -> Result<PgStore, OpenError> {
    PgStore::open(url, PgConfig::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_modes_connect_or_refuse_as_libpq_does() {
    let (ca_pem, server) = certificates("taskcenter test CA");
    let (wrong_pem, _) = certificates("some other CA");
    let Some(cluster) = cluster(server).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    let wrong = dir.path().join("wrong.pem");
    std::fs::write(&ca, ca_pem).unwrap();
    std::fs::write(&wrong, wrong_pem).unwrap();
    let path = |p: &Path| p.to_str().unwrap().to_owned();
    let url = |host: &str, name: &str, params: &str| {
        format!(
            "postgresql://postgres@{host}:{}/postgres?application_name={name}{params}",
            cluster.port()
        )
    };

    // Connects: (name, host, params, encrypted?)
    let connects = [
        (
            "tc_require",
            "127.0.0.1",
            "&sslmode=require".to_owned(),
            true,
        ),
        ("tc_default", "127.0.0.1", String::new(), true),
        (
            "tc_disable",
            "127.0.0.1",
            "&sslmode=disable".to_owned(),
            false,
        ),
        (
            "tc_verify_full",
            "127.0.0.1",
            format!("&sslmode=verify-full&sslrootcert={}", path(&ca)),
            true,
        ),
        // verify-ca checks the chain, not the name.
        (
            "tc_verify_ca",
            "localhost",
            format!("&sslmode=verify-ca&sslrootcert={}", path(&ca)),
            true,
        ),
    ];
    for (name, host, params, encrypted) in connects {
        let store = open(&url(host, name, &params))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}\n{}", cluster.log()));
        let (tls, plain) = ssl_of(&cluster, name).await;
        if encrypted {
            assert!(tls > 0 && plain == 0, "{name}: {tls} TLS, {plain} plain");
        } else {
            assert!(tls == 0 && plain > 0, "{name}: {tls} TLS, {plain} plain");
        }
        store.close();
    }

    // Refused, saying why: (host, params, what the message says)
    let refused = [
        (
            "127.0.0.1",
            format!("&sslmode=verify-full&sslrootcert={}", path(&wrong)),
            "UnknownIssuer",
        ),
        (
            "localhost",
            format!("&sslmode=verify-full&sslrootcert={}", path(&ca)),
            "not valid for name",
        ),
        // As libpq: require with a root certificate checks the chain.
        (
            "127.0.0.1",
            format!("&sslmode=require&sslrootcert={}", path(&wrong)),
            "UnknownIssuer",
        ),
        (
            "127.0.0.1",
            format!(
                "&sslmode=verify-full&sslrootcert={}",
                path(&dir.path().join("none.pem"))
            ),
            "sslrootcert: ",
        ),
        (
            "127.0.0.1",
            "&sslmode=verify-everything".to_owned(),
            "sslmode: ",
        ),
    ];
    for (host, params, says) in refused {
        let message = match open(&url(host, "tc_refused", &params)).await {
            Ok(_) => panic!("{host} {params}: connected"),
            Err(e) => e.to_string(),
        };
        assert!(message.contains(says), "{host} {params}: {message}");
    }
    assert_eq!(ssl_of(&cluster, "tc_refused").await, (0, 0));
}
