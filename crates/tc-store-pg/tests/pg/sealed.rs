//! Secrets sealed at rest on PostgreSQL: with a key, no
//! table holds a byte of a destination's headers, signing secrets or `auth`
//! nor of a tenant's secrets or the server's JWT key (the rows read as text
//! and grepped); plain secrets are
//! sealed at a node's start; a rotated key opens the old ones and seals them
//! again; a node none of whose keys opens a secret is refused, naming its
//! destination.

use base64::Engine;
use tc_model::auth::DestinationAuth;
use tc_model::destination::DestinationUpdate;
use tc_model::signing::SigningSecrets;
use tc_model::store::{Destinations, Tenants};
use tc_model::tenant::TenantUpdate;
use tc_model::{Headers, Timestamp};
use tc_seal::{SealReport, Sealer, SecretKey};
use tc_store_pg::{PgConfig, PgStore};

use crate::support::{Raw, database};

const HEADER_SECRET: &str = "Bearer hdr-SECRET-2f9c1a";
const DESTINATION: &str = "api.example.com:443";
/// A destination `auth`'s password and the server's JWT key.
const BASIC_PASSWORD: &str = "pw-SECRET-basic-77";
const JWT_KEY: &str = "jwt-key-SECRET-9d31";

fn basic_auth() -> Option<DestinationAuth> {
    DestinationAuth::from_json(&serde_json::json!({
        "type": "basic", "username": "u", "password": BASIC_PASSWORD
    }))
    .unwrap()
}

fn key(byte: u8) -> SecretKey {
    SecretKey::from_base64(&base64::engine::general_purpose::STANDARD.encode([byte; 32])).unwrap()
}

fn whsec(byte: u8) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode([byte; 24]);
    format!("whsec_{b64}")
}

fn now() -> Timestamp {
    Timestamp::from_millis(1_700_000_000_000)
}

async fn write_secrets(store: &PgStore) {
    let headers =
        Headers::from_stored(Some(&format!(r#"{{"authorization":"{HEADER_SECRET}"}}"#))).unwrap();
    let update = DestinationUpdate {
        headers: Some(headers),
        signing_secrets: Some(SigningSecrets::parse(&[whsec(7)]).unwrap()),
        auth: Some(basic_auth()),
        ..Default::default()
    };
    store
        .update_destination(DESTINATION.into(), update, now())
        .await
        .unwrap();
    let tenant = TenantUpdate {
        signing_secrets: Some(SigningSecrets::parse(&[whsec(8)]).unwrap()),
        ..Default::default()
    };
    store
        .create_tenant("acme".into(), tenant, now())
        .await
        .unwrap();
    let kept = store
        .server_key("jwt_key".into(), JWT_KEY.into())
        .await
        .unwrap();
    assert_eq!(kept, JWT_KEY);
}

async fn check_reads_back(store: &PgStore) {
    let d = store.destination(DESTINATION.into()).await.unwrap();
    assert_eq!(d.settings.headers.get("authorization"), Some(HEADER_SECRET));
    assert_eq!(d.settings.signing_secrets.len(), 1);
    let tenants = store.tenant_settings().await.unwrap();
    assert_eq!(tenants["acme"].signing_secrets.len(), 1);
    assert_eq!(d.settings.auth, basic_auth());
    let kept = store
        .server_key("jwt_key".into(), "another".into())
        .await
        .unwrap();
    assert_eq!(kept, JWT_KEY);
}

/// Which secrets' texts the tables' rows (as text) hold.
async fn found_in_tables(raw: &Raw) -> Vec<String> {
    let texts = [
        "hdr-SECRET".to_owned(),
        whsec(7).trim_start_matches("whsec_").to_owned(),
        whsec(8).trim_start_matches("whsec_").to_owned(),
        BASIC_PASSWORD.to_owned(),
        JWT_KEY.to_owned(),
    ];
    let mut found = Vec::new();
    for table in ["destinations", "tenants", "server_keys"] {
        let rows = raw
            .client()
            .query(&format!("SELECT t::text FROM {table} t"), &[])
            .await
            .unwrap();
        for row in rows {
            let text: String = row.get(0);
            found.extend(
                texts
                    .iter()
                    .filter(|s| text.contains(s.as_str()))
                    .map(|s| format!("{table}: {s}")),
            );
        }
    }
    found
}

#[tokio::test]
async fn secrets_are_sealed_in_the_tables_rotated_and_refused_without_their_key() {
    let Some(db) = database().await else { return };
    let schema = db.fresh_schema();
    let config = || PgConfig {
        schema: Some(schema.clone()),
        ..PgConfig::default()
    };
    let open = |sealer: Sealer| {
        let config = config();
        let url = db.url().to_owned();
        async move {
            let mut store = PgStore::open(&url, config)
                .await
                .map_err(|e| e.to_string())?;
            let report = store.seal_with(sealer).await.map_err(|e| e.to_string())?;
            Ok::<_, String>((store, report))
        }
    };
    let raw = Raw::connect(&db, None, Some(&schema)).await;
    // written without a key: plain in the tables, reported at start
    let (store, _) = open(Sealer::none()).await.unwrap();
    write_secrets(&store).await;
    assert_eq!(found_in_tables(&raw).await.len(), 5);
    drop(store);
    let (store, report) = open(Sealer::none()).await.unwrap();
    assert_eq!(
        report,
        SealReport {
            resealed: 0,
            plain: 5
        }
    );
    drop(store);
    // a key given: sealed at start, nothing left to find
    let (store, report) = open(Sealer::new(vec![key(1)])).await.unwrap();
    assert_eq!(
        report,
        SealReport {
            resealed: 5,
            plain: 0
        }
    );
    check_reads_back(&store).await;
    assert_eq!(found_in_tables(&raw).await, Vec::<String>::new());
    // written with the key: sealed too
    write_secrets_again(&store).await;
    assert_eq!(found_in_tables(&raw).await, Vec::<String>::new());
    drop(store);
    // rotation: the new key first, the old one listed
    let (store, report) = open(Sealer::new(vec![key(2), key(1)])).await.unwrap();
    assert_eq!(
        report,
        SealReport {
            resealed: 5,
            plain: 0
        }
    );
    check_reads_back(&store).await;
    drop(store);
    // a node with another key, or none, refuses to start, naming the destination
    for sealer in [Sealer::none(), Sealer::new(vec![key(1)])] {
        let err = open(sealer).await.err().expect("refused");
        assert!(err.contains(DESTINATION), "{err}");
        assert!(err.contains(key(2).id()), "{err}");
    }
    let (store, report) = open(Sealer::new(vec![key(2)])).await.unwrap();
    assert_eq!(report, SealReport::default());
    check_reads_back(&store).await;
    drop(store);
    drop(raw);
    db.cleanup().await.unwrap();
}

/// The same secrets written again through a sealing store.
async fn write_secrets_again(store: &PgStore) {
    let update = DestinationUpdate {
        signing_secrets: Some(SigningSecrets::parse(&[whsec(7)]).unwrap()),
        ..Default::default()
    };
    store
        .update_destination(DESTINATION.into(), update, now())
        .await
        .unwrap();
    check_reads_back(store).await;
}
