//! Secrets sealed at rest: with a key, the database file
//! and a backup hold no byte of a destination's headers, signing secrets or `auth`
//! nor of a tenant's secrets or the server's JWT key; plain secrets written before a key are sealed
//! at start; a rotated key opens the old ones and seals them again; a store
//! none of whose keys opens a secret is refused, naming its destination.

use std::path::Path;

use base64::Engine;
use tc_model::auth::DestinationAuth;
use tc_model::destination::DestinationUpdate;
use tc_model::signing::SigningSecrets;
use tc_model::store::{Destinations, Tenants};
use tc_model::tenant::TenantUpdate;
use tc_model::{Headers, Timestamp};
use tc_seal::{Sealer, SecretKey};
use tc_store::backup::{BackupConfig, backup};
use tc_store::{SealReport, SqliteStore, StoreConfig};

const HEADER_SECRET: &str = "Bearer hdr-SECRET-2f9c1a";
/// A destination `auth`'s password and the server's JWT key.
const BASIC_PASSWORD: &str = "pw-SECRET-basic-77";
const JWT_KEY: &str = "jwt-key-SECRET-9d31";
const DESTINATION: &str = "api.example.com:443";

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

/// The secrets' texts a file must not hold.
fn secret_texts() -> Vec<String> {
    let strip = |s: String| s.trim_start_matches("whsec_").to_owned();
    vec![
        HEADER_SECRET.to_owned(),
        "hdr-SECRET".to_owned(),
        strip(whsec(7)),
        strip(whsec(8)),
        BASIC_PASSWORD.to_owned(),
        JWT_KEY.to_owned(),
    ]
}

async fn write_secrets(store: &SqliteStore) {
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

fn basic_auth() -> Option<DestinationAuth> {
    DestinationAuth::from_json(&serde_json::json!({
        "type": "basic", "username": "u", "password": BASIC_PASSWORD
    }))
    .unwrap()
}

/// The secrets read back through the port, opened.
async fn check_reads_back(store: &SqliteStore) {
    let d = store.destination(DESTINATION.into()).await.unwrap();
    assert_eq!(d.settings.headers.get("authorization"), Some(HEADER_SECRET));
    assert_eq!(d.settings.signing_secrets.len(), 1);
    let tenants = store.tenant_settings().await.unwrap();
    assert_eq!(tenants["acme"].signing_secrets.len(), 1);
    assert_eq!(d.settings.auth, basic_auth());
    // The key kept first is read back, opened, whatever a later node offers.
    let kept = store
        .server_key("jwt_key".into(), "another".into())
        .await
        .unwrap();
    assert_eq!(kept, JWT_KEY);
}

/// Which of the secrets' texts the files in `dir` (the database, its WAL,
/// a backup) hold.
fn found_in(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        for text in secret_texts() {
            if bytes.windows(text.len()).any(|w| w == text.as_bytes()) {
                found.push(format!("{}: {text}", path.display()));
            }
        }
    }
    found
}

async fn open(path: &Path, sealer: Sealer) -> Result<(SqliteStore, SealReport), String> {
    let mut store = SqliteStore::open(path, StoreConfig::default())
        .await
        .map_err(|e| e.to_string())?;
    let report = store.seal_with(sealer).await.map_err(|e| e.to_string())?;
    Ok((store, report))
}

#[tokio::test]
async fn with_a_key_neither_the_file_nor_a_backup_holds_a_secret_byte() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tc.db");
    let (store, _) = open(&path, Sealer::new(vec![key(1)])).await.unwrap();
    write_secrets(&store).await;
    check_reads_back(&store).await;
    let copy = dir.path().join("copy.db");
    let from = path.clone();
    let to = copy.clone();
    tokio::task::spawn_blocking(move || backup(&from, &to, &BackupConfig::default()))
        .await
        .unwrap()
        .unwrap();
    store.close().await;
    assert_eq!(found_in(dir.path()), Vec::<String>::new());
    // the control: without a key the same secrets are in the file
    let plain_dir = tempfile::tempdir().unwrap();
    let (store, _) = open(&plain_dir.path().join("tc.db"), Sealer::none())
        .await
        .unwrap();
    write_secrets(&store).await;
    store.close().await;
    assert!(!found_in(plain_dir.path()).is_empty());
}

#[tokio::test]
async fn plain_and_old_key_secrets_are_sealed_again_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tc.db");
    // written without a key: three plain secrets, reported at start
    let (store, _) = open(&path, Sealer::none()).await.unwrap();
    write_secrets(&store).await;
    store.close().await;
    let (store, report) = open(&path, Sealer::none()).await.unwrap();
    assert_eq!(
        report,
        SealReport {
            resealed: 0,
            plain: 5
        }
    );
    store.close().await;
    // a key given: sealed, the plain text gone from the file
    let (store, report) = open(&path, Sealer::new(vec![key(1)])).await.unwrap();
    assert_eq!(
        report,
        SealReport {
            resealed: 5,
            plain: 0
        }
    );
    check_reads_back(&store).await;
    store.close().await;
    assert_eq!(found_in(dir.path()), Vec::<String>::new());
    // rotation: the new key first, the old one listed, sealed again
    let (store, report) = open(&path, Sealer::new(vec![key(2), key(1)]))
        .await
        .unwrap();
    assert_eq!(
        report,
        SealReport {
            resealed: 5,
            plain: 0
        }
    );
    check_reads_back(&store).await;
    store.close().await;
    // then the old key may go
    let (store, report) = open(&path, Sealer::new(vec![key(2)])).await.unwrap();
    assert_eq!(report, SealReport::default());
    check_reads_back(&store).await;
    store.close().await;
}

#[tokio::test]
async fn a_store_whose_secrets_no_key_opens_is_refused_naming_the_destination() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tc.db");
    let (store, _) = open(&path, Sealer::new(vec![key(1)])).await.unwrap();
    write_secrets(&store).await;
    store.close().await;
    for sealer in [Sealer::none(), Sealer::new(vec![key(3)])] {
        let err = open(&path, sealer).await.err().expect("refused");
        assert!(err.contains(DESTINATION), "{err}");
        assert!(err.contains(key(1).id()), "{err}");
    }
    // refused without a change: the right key still opens everything
    let (store, _) = open(&path, Sealer::new(vec![key(1)])).await.unwrap();
    check_reads_back(&store).await;
    store.close().await;
}
